"""Client liveness on the server: heartbeats keep an idle client alive, silence or finish() closes the
states a process left open (marked cut short), and a server-side close never overwrites a real end."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

import rl_insight
from rl_insight.client import delivery
from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.conftest import start_server, wait_until


def _run(srv, exp: str) -> dict:
    return next(r for r in httpx.get(srv.url + "/api/v1/runs").json()["runs"] if r["experiment_name"] == exp)


def test_state_left_open_at_finish_is_closed_as_cut_short(tmp_path: Path, monkeypatch) -> None:
    srv = start_server(tmp_path)
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        rl_insight.init(project="p", experiment_name="fin")
        block = rl_insight.trace_state("rollout", state_lane_id="replica_0")
        block.__enter__()  # e.g. an exception unwound past the training loop and finish() ran in a handler
        rl_insight.flush(5)
        assert httpx.get(srv.url + "/api/v1/spans/open").json()["total"] == 1
        rl_insight.finish(5)
        assert httpx.get(srv.url + "/api/v1/spans/open").json()["total"] == 0
        srv.app.state.st.writer.flush(10)
        (span,) = q.spans_in(srv.app.state.st.reader.conn(), _run(srv, "fin")["id"])
        assert span["end_ns"] is not None and span["attributes"]["cut_short_reason"] == "client finished"
        assert _run(srv, "fin")["status"] == "finished"
    finally:
        srv.stop()


def test_heartbeat_keeps_an_idle_client_with_an_open_state_alive(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(delivery, "HEARTBEAT_S", 0.2)
    srv = start_server(tmp_path, client_silence_s=1.0)
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        rl_insight.init(project="p", experiment_name="idle")
        with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
            time.sleep(2.5)  # a long step: nothing to send but heartbeats
            assert httpx.get(srv.url + "/api/v1/spans/open").json()["total"] == 1
            assert srv.app.state.st.clients.cut_short == 0
        rl_insight.flush(5)
        assert httpx.get(srv.url + "/api/v1/spans/open").json()["total"] == 0
        srv.app.state.st.writer.flush(10)
        (span,) = q.spans_in(srv.app.state.st.reader.conn(), _run(srv, "idle")["id"])
        assert "cut_short" not in span["attributes"] and span["end_ns"] - span["start_ns"] >= 2.5e9
    finally:
        srv.stop()


def test_silent_client_is_reaped_and_its_run_finishes(tmp_path: Path) -> None:
    srv = start_server(tmp_path, client_silence_s=0.5)
    try:
        start = {"id": "s1", "name": "vllm_generate", "lane": "replica_0", "kind": "state", "start_ns": time.time_ns(),
                 "attributes": {"project": "p", "experiment_name": "gone"}}
        body = {"v": 1, "client": {"id": "dead", "project": "p", "experiment_name": "gone"}, "span_starts": [start]}
        assert httpx.post(srv.url + "/api/v1/ingest", json=body).status_code == 200
        wait_until(lambda: srv.app.state.st.clients.cut_short == 1, timeout=10, what="reaper")
        srv.app.state.st.writer.flush(10)
        (span,) = q.spans_in(srv.app.state.st.reader.conn(), _run(srv, "gone")["id"])
        assert span["attributes"]["cut_short_reason"] == "client silent" and span["end_ns"] >= start["start_ns"]
        assert _run(srv, "gone")["status"] == "finished"
        assert "rl_insight_server_spans_cut_short 1.0" in httpx.get(srv.url + "/metrics").text
    finally:
        srv.stop()


def test_a_server_side_close_never_overwrites_a_real_end(tmp_path: Path) -> None:
    w = RunStoreWriter(tmp_path / "rs.sqlite", flush_interval_s=0.02)
    try:
        ident = {"project": "p", "experiment_name": "e"}
        w.put_spans([], [SpanRecord("a", "t", None, "gen", "replica_0", "state", 10, 50, ident)])
        w.put_spans([], [SpanRecord("a", "t", None, "gen", "replica_0", "state", 10, 99,
                                    {**ident, "cut_short": True, "cut_short_reason": "client silent"})])
        w.put_spans([SpanRecord("b", "t", None, "gen", "replica_1", "state", 10, None, ident)], [])
        w.put_spans([], [SpanRecord("b", "t", None, "gen", "replica_1", "state", 10, 77,
                                    {**ident, "cut_short": True, "cut_short_reason": "client silent"})])
        assert w.flush(10)
        spans = {s["id"]: s for s in q.spans_in(RunStoreReader(tmp_path / "rs.sqlite").conn(), 1)}
        assert spans["a"]["end_ns"] == 50 and "cut_short" not in spans["a"]["attributes"]
        assert spans["b"]["end_ns"] == 77 and spans["b"]["attributes"]["cut_short"] is True
    finally:
        w.close()


KILLED_JOB = r"""
import sys, time
import rl_insight
rl_insight.init(project="p", experiment_name="killed")
for step in (1, 2):
    rl_insight.metric_gauge("training/global_step", step)
block = rl_insight.trace_state("actor_update", state_lane_id="rank_0")
block.__enter__()  # step 3 is under way when the job is killed
assert rl_insight.flush(10)
print("ready", flush=True)
time.sleep(600)
"""


def test_a_job_killed_mid_step_is_lost_with_its_open_lanes_not_finished(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    srv = start_server(tmp_path, client_silence_s=1.5)
    env = {**os.environ, "RL_INSIGHT_SERVER_URL": srv.url}
    job = subprocess.Popen([sys.executable, "-c", KILLED_JOB], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "ready"
        job.send_signal(signal.SIGKILL)  # no finish(), no atexit
        job.wait(10)
        run = wait_until(lambda: (r := _run(srv, "killed"))["status"] == "lost" and r, timeout=20, what="lost")
        assert run["lost"]["lanes"] == ["rank_0"] and "stopped reporting without finishing" in run["lost"]["reason"]
        assert run["last_step"] == 2
    finally:
        job.kill()
        srv.stop()
