"""Training API behaviour through real HTTP: a capturing peer for the wire format, the real server for semantics."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings

import httpx
import pytest

import rl_insight
from tests.conftest import free_port, wait_until

SERVER_ON_A_PORT = "the rl_insight client sends through the stdlib, not httpx"  # (tests/lanes.py)



def spans_of(server, **match):
    body = httpx.get(server.url + "/api/v1/spans/recent", params={"limit": 10000}).json()
    return [s for s in body["spans"] if all(s.get(k) == v for k, v in match.items())]


def metrics_text(server) -> str:
    return httpx.get(server.url + "/metrics").text


def sample_value(text: str, series: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


# ----------------------------------------------------------------------------- lifecycle
def test_import_loads_no_server_or_otel_stack() -> None:
    code = ("import sys, rl_insight; bad = [m for m in ('fastapi','starlette','uvicorn','pydantic','opentelemetry',"
            "'httpx','typer','prometheus_client','yaml','numpy') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_no_url_means_silent_noop() -> None:
    # (an exporter of an earlier test in this process may still be winding down: only a new one would be this init's)
    before = {t for t in threading.enumerate() if t.name == "rl-insight-exporter"}
    rl_insight.init(project="p", experiment_name="e")
    assert not rl_insight.is_enabled()
    rl_insight.metric_gauge("x", 1.0)
    rl_insight.metric_count("c")
    with rl_insight.trace_state("s", state_lane_id="rank_0"):
        pass
    assert rl_insight.stats() == {"enabled": False}
    assert not [t for t in threading.enumerate() if t.name == "rl-insight-exporter" and t not in before]


def test_second_init_warns_and_changes_nothing_then_reinit_after_finish(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p1", experiment_name="e1")
    with pytest.warns(RuntimeWarning, match="more than once"):
        rl_insight.init(project="p2", experiment_name="e2")
    rl_insight.metric_gauge("g", 1.0)
    assert rl_insight.flush(5)
    assert 'rl_insight_monitor_g{experiment_name="e1",project="p1"} 1.0' in metrics_text(server)
    rl_insight.finish()
    assert not rl_insight.is_enabled()
    rl_insight.init(project="p3", experiment_name="e3")
    rl_insight.metric_gauge("g", 2.0)
    assert rl_insight.flush(5)
    assert 'rl_insight_monitor_g{experiment_name="e3",project="p3"} 2.0' in metrics_text(server)


def test_bare_init_takes_identity_from_environment(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    monkeypatch.setenv("RL_INSIGHT_PROJECT", "envproj")
    monkeypatch.setenv("RL_INSIGHT_EXPERIMENT_NAME", "envexp")
    rl_insight.init()
    with rl_insight.trace_state("actor_update", state_lane_id="rank_1"):
        pass
    assert rl_insight.flush(5)
    attrs = spans_of(server, name="actor_update")[0]["attributes"]
    assert (attrs["project"], attrs["experiment_name"]) == ("envproj", "envexp")


def test_config_url_and_token_from_init_config(token_server) -> None:
    rl_insight.init(config={"server": {"url": token_server.url, "token": "s3cret-token"}})
    rl_insight.metric_gauge("from_config", 3.0)
    assert rl_insight.flush(5)
    assert sample_value(metrics_text(token_server), "rl_insight_monitor_from_config") == 3.0
    assert rl_insight.stats()["dropped"] == {}


def test_wrong_token_is_counted_not_raised(token_server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", token_server.url)
    monkeypatch.setenv("RL_INSIGHT_TOKEN", "wrong")
    rl_insight.init()
    rl_insight.metric_gauge("x", 1.0)
    assert rl_insight.flush(5) is False  # delivered, but refused: flush says so
    assert rl_insight.stats()["dropped"].get("unauthorized") == 1


def test_at_exit_a_wrong_token_is_said_as_such_with_the_events_it_cost(token_server, monkeypatch, caplog) -> None:
    """Issue 49 item 20: the server answered 401 and all 12 events were dropped, and finish() said "did not answer;
    0 event(s) were not delivered"."""
    import logging

    from rl_insight.client.ratelog import ratelog

    monkeypatch.setattr(ratelog, "_last", {})  # (another test's message under the same key must not suppress it)
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", token_server.url)
    monkeypatch.setenv("RL_INSIGHT_TOKEN", "wrong")
    rl_insight.init(project="p", experiment_name="wrong-token")
    for i in range(12):
        rl_insight.metric_gauge("x", float(i))
    with caplog.at_level(logging.WARNING, logger="rl_insight"):
        rl_insight.finish(timeout=5)
    said = [r.getMessage() for r in caplog.records if "[rl-insight]" in r.getMessage()]
    final = said[-1]
    assert "did not answer" not in final, said
    assert "refused this process's token" in final and "RL_INSIGHT_TOKEN" in final and "unauthorized: 12" in final


# ----------------------------------------------------------------------------- wire format / step tagging
def test_every_sample_carries_timestamp_step_and_identity_labels(capture, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    rl_insight.init(project="proj", experiment_name="exp")
    t0 = time.time()
    rl_insight.metric_gauge("actor_loss", 0.9)  # before any step: step is null
    time.sleep(0.1)  # (in the same burst as the step metric it would belong to that step: see the test below)
    for step in (1, 2):
        rl_insight.metric_gauge("training_global_step", step)  # verl's "/" -> "_" spelling
        rl_insight.metric_gauge("actor_loss", 1.0 / step, "loss", role="actor")
    assert rl_insight.flush(5)
    series, samples = [], []
    for b in capture.batches():
        offset = len(series)
        series += b["series"]
        samples += [[s[0] + offset, *s[1:]] for s in b["samples"]]
    loss = [(s[2], s[3], s[1]) for s in samples if series[s[0]]["n"] == "actor_loss"]
    assert [(st, v) for st, v, _ in loss] == [(None, 0.9), (1, 1.0), (2, 0.5)]
    assert all(t0 - 1 <= ts <= time.time() + 1 for _, _, ts in loss)
    labeled = [series[s[0]]["l"] for s in samples if series[s[0]]["n"] == "actor_loss" and s[2] == 2][0]
    assert labeled == {"project": "proj", "experiment_name": "exp", "role": "actor"}


def test_step_metric_is_configurable(capture, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    rl_insight.init(config={"step_metric": "trainer/iteration"})
    rl_insight.metric_gauge("trainer/iteration", 41)
    rl_insight.metric_gauge("training/global_step", 5)  # not the step metric any more
    rl_insight.metric_gauge("reward", 0.1)
    assert rl_insight.flush(5)
    b = capture.batches()[-1]
    reward = [s for s in b["samples"] if b["series"][s[0]]["n"] == "reward"][0]
    assert reward[2] == 41


def test_counters_and_histograms_are_cumulative_on_the_wire(capture, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    rl_insight.init(config={"histogram_buckets": {"latency": [0.1, 1.0]}})
    for _ in range(3):
        rl_insight.metric_count("tokens", 10)
    rl_insight.metric_histogram("latency", 0.05)
    rl_insight.metric_histogram("latency", 0.5)
    assert rl_insight.flush(5)
    rl_insight.metric_count("tokens", 5)
    assert rl_insight.flush(5)
    values = []
    for b in capture.batches():
        for idx, _, _, v in b["samples"]:
            if b["series"][idx]["n"] == "tokens" and "ns" not in b["series"][idx]:
                values.append(v)
            if b["series"][idx]["n"] == "latency":
                assert b["series"][idx]["b"] == [0.1, 1.0]
                assert v == [0.55, 2, [1, 2, 2]]
    assert values == [30.0, 35.0]  # totals, not increments


def test_negative_counter_increment_is_dropped_and_counted(capture, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    rl_insight.init()
    rl_insight.metric_count("c", -1)
    rl_insight.metric_count("c", "lots")
    rl_insight.metric_histogram("h", None)
    rl_insight.metric_gauge("g", "not a number")
    rl_insight.metric_gauge("g", 1.0, **{"weird": object()})  # label value stringified, not an error
    assert rl_insight.flush(5) is False  # delivered, but four samples were dropped since the last flush
    assert rl_insight.stats()["dropped"] == {"invalid_value": 4}
    rl_insight.metric_gauge("g", 2.0)
    assert rl_insight.flush(5) is True  # nothing dropped since the previous flush


def test_client_self_metrics_reach_the_server(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="e")
    rl_insight.metric_gauge("ok", 1.0)
    rl_insight.metric_gauge("bad", "NaN-ish text")
    rl_insight.metric_gauge("actor/pg_loss", float("nan"))  # diverged: dropped, and counted by name
    rl_insight.metric_gauge("actor/pg_loss", float("nan"))
    rl_insight.metric_gauge("actor/grad_norm", float("inf"))
    assert rl_insight.flush(5) is False  # four samples were dropped
    rl_insight.metric_gauge("ok", 2.0)
    assert rl_insight.flush(5)  # a flush reports the latest delivery counters
    text = metrics_text(server)
    labels = f'experiment_name="e",host="{__import__("socket").gethostname()}",pid="{os.getpid()}",project="p"'
    assert sample_value(text, f'rl_insight_client_events_dropped_total{{{labels},reason="invalid_value"}}') == 4.0
    nonfinite = "rl_insight_client_nonfinite_values_total"  # (rule RLInsightNonFiniteMetric)
    assert [line for line in text.splitlines() if line.startswith(nonfinite)] == [
        f'{nonfinite}{{experiment_name="e",host="{socket.gethostname()}",metric="{m}",pid="{os.getpid()}",'
        f'project="p"}} {n}' for m, n in (("actor/pg_loss", 2.0), ("actor/grad_norm", 1.0))]  # not "bad": text
    from rl_insight.semantics.catalog import CLIENT_SELF_METRICS  # (the catalog the dashboards and rules are held to)

    reported = {line.split("{")[0] for line in text.splitlines() if line.startswith("rl_insight_client_")}
    assert reported and reported <= set(CLIENT_SELF_METRICS), reported - set(CLIENT_SELF_METRICS)
    assert sample_value(text, f"rl_insight_client_events_sent_total{{{labels}}}") >= 1.0
    assert sample_value(text, f"rl_insight_client_queue_depth{{{labels}}}") == 0.0


def test_server_restart_resends_totals(capture, monkeypatch) -> None:
    """A new boot id in the response makes the client resend every series' latest value."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    rl_insight.init()
    rl_insight.metric_count("done", 4)
    rl_insight.metric_gauge("g", 7.0)
    assert rl_insight.flush(5)
    capture.boot_id = "boot-2"
    rl_insight.metric_gauge("other", 1.0)
    assert rl_insight.flush(5)
    wait_until(lambda: any(b["series"][s[0]]["n"] == "done" for b in capture.batches()[2:] for s in b["samples"]),
               what="resent counter")
    resent = {
        b["series"][s[0]]["n"]: s[3]
        for b in capture.batches()[2:]
        for s in b["samples"]
        if "ns" not in b["series"][s[0]]
    }
    assert resent["done"] == 4.0 and resent["g"] == 7.0


def test_the_last_batch_carries_every_total_and_counts_no_copy_as_an_event(capture, monkeypatch) -> None:
    """Behind a balancer that alternates, the server that hears a process's final batch claims it (server/fleet/
    coordinator.py): that batch carries every counter's total and latest gauge, even those unchanged since an earlier
    batch; the copies are not counted as events sent."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    rl_insight.init(project="p", experiment_name="last-batch")
    rl_insight.metric_count("tokens", 30)
    rl_insight.metric_gauge("loss", 0.5)
    assert rl_insight.flush(5)
    rl_insight.metric_gauge("lr", 1e-4)  # the only new event
    runtime = rl_insight.client.api._rt
    rl_insight.finish(timeout=5)
    last = capture.batches()[-1]
    assert last.get("final") is True
    sent = {last["series"][s[0]]["n"]: s[3] for s in last["samples"] if "ns" not in last["series"][s[0]]}
    assert sent == {"tokens": 30.0, "loss": 0.5, "lr": 1e-4}
    assert runtime is not None and runtime.sent_items == 3  # the counter and loss, then lr: no copy counted


def test_alternating_between_two_servers_of_a_fleet_resends_once_per_server(capture, monkeypatch) -> None:
    """Issue 49 item 5: behind a round-robin balancer the boot id alternates; each server is fed everything once (the
    first time it is reached), never on every batch. Every request names its process for a balancer to hash on."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", capture.url)
    rl_insight.init()
    rl_insight.metric_count("done", 4)
    assert rl_insight.flush(5)

    def resent_since(n: int) -> int:
        return sum(1 for b in capture.batches()[n:] for s in b["samples"] if b["series"][s[0]]["n"] == "done")

    for i, boot in enumerate(["boot-2", "boot-1", "boot-2", "boot-1", "boot-2", "boot-3"]):
        capture.boot_id = boot
        before = len(capture.batches())
        rl_insight.metric_gauge("other", float(i))
        assert rl_insight.flush(5)
        rl_insight.metric_gauge("other", float(i) + 0.5)  # the batch after the reply that told the boot id
        assert rl_insight.flush(5)
        assert resent_since(before) == (1 if i in (0, 5) else 0), (i, boot)  # boot-2 and boot-3 are new once
    ids = {h.get("X-RL-Insight-Client") for path, h, _ in capture.requests if path == "/api/v1/ingest"}
    assert len(ids) == 1 and len(next(iter(ids)) or "") == 16


# ----------------------------------------------------------------------------- queue bound, no stall
def test_full_queue_drops_oldest_and_counts(monkeypatch) -> None:
    port = free_port()  # nothing listens here
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("RL_INSIGHT_QUEUE_SIZE", "100")
    monkeypatch.setenv("RL_INSIGHT_FLUSH_INTERVAL", "60")  # the thread stays asleep while we fill the queue
    rl_insight.init()
    start = time.perf_counter()
    for i in range(1000):
        rl_insight.metric_gauge("g", i)
    assert time.perf_counter() - start < 5  # generous: only checks that nothing blocked on the network
    st = rl_insight.stats()
    assert st["dropped"] == {"queue_full": 900}
    assert st["queue_depth"] == 100


def test_data_arrives_after_server_comes_up(tmp_path, monkeypatch) -> None:
    from tests.conftest import start_server

    port = free_port()
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"http://127.0.0.1:{port}")
    rl_insight.init(project="late", experiment_name="e")
    rl_insight.update_prometheus_config(["10.1.2.3:8000"], "vllm", [{"replica": 0}])
    for step in range(5):
        rl_insight.metric_gauge("training/global_step", step)
    assert not rl_insight.flush(0.3)  # server down: flush honours its deadline and says so
    srv = start_server(tmp_path, port=port)
    try:
        assert rl_insight.flush(40)
        wait_until(
            lambda: "10.1.2.3:8000" in httpx.get(srv.url + "/api/v1/targets").text, timeout=40, what="registration"
        )
        assert (
            sample_value(
                metrics_text(srv), 'rl_insight_monitor_training_global_step{experiment_name="e",project="late"}'
            )
            == 4.0
        )
        assert rl_insight.stats()["retries"] >= 1
    finally:
        srv.stop()


def test_update_prometheus_config_label_length_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="labels length must match"):
        rl_insight.update_prometheus_config(["a:1", "b:2"], "job", [{"replica": 0}])


def test_update_prometheus_config_without_init_uses_env(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.update_prometheus_config(["127.0.0.1:9000"], "transfer_queue", None)  # verl's TQ call, positional
    wait_until(lambda: httpx.get(server.url + "/api/v1/targets").json()["count"] == 1, what="registration")
    t = httpx.get(server.url + "/api/v1/targets").json()["targets"][0]
    assert (t["job"], t["target"]) == ("transfer_queue", "127.0.0.1:9000")


# ----------------------------------------------------------------------------- trace_state lanes
def test_same_name_overlaps_merge_and_nested_states_become_children(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="e")
    with rl_insight.trace_state("train_batch", state_lane_id="rank_0", stage="x"):
        with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
            time.sleep(0.01)
        with rl_insight.trace_state("train_batch", state_lane_id="rank_0"):  # same name: merged, no new span
            pass
    assert rl_insight.flush(5)
    parent = spans_of(server, name="train_batch")
    child = spans_of(server, name="actor_update")
    assert len(parent) == 1 and len(child) == 1
    p, c = parent[0], child[0]
    assert c["parent_id"] == p["id"] and c["trace_id"] == p["trace_id"] and p["parent_id"] is None
    assert p["start_ns"] <= c["start_ns"] < c["end_ns"] <= p["end_ns"]
    assert p["lane"] == c["lane"] == "rank_0"
    assert p["attributes"]["stage"] == "x" and p["attributes"]["state_name"] == "train_batch"
    assert p["attributes"]["monitor.trace_segment"] == "state_interval"
    assert p["attributes"]["project"] == "p" and p["attributes"]["process_id"] == str(os.getpid())


def test_default_lane_is_process_id(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init()
    with rl_insight.trace_state("compute"):
        pass
    assert rl_insight.flush(5)
    assert spans_of(server, name="compute")[0]["lane"] == str(os.getpid())


def test_hundreds_of_concurrent_coroutines_on_one_lane(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init()

    async def request(i: int) -> None:
        with rl_insight.trace_state("vllm_generate", state_lane_id="replica_3"):
            await asyncio.sleep(0.001 * (i % 20))

    async def main() -> None:
        await asyncio.gather(*(request(i) for i in range(300)))
        await asyncio.sleep(0.02)
        await asyncio.gather(*(request(i) for i in range(50)))

    asyncio.run(main())
    assert rl_insight.flush(5)
    spans = sorted(spans_of(server, name="vllm_generate"), key=lambda s: s["start_ns"])
    assert len(spans) == 2  # two busy intervals separated by an idle gap
    assert spans[0]["end_ns"] < spans[1]["start_ns"]


def test_open_state_is_known_before_it_ends(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init()
    block = rl_insight.trace_state("rollout", state_lane_id="replica_0")
    block.__enter__()
    try:
        wait_until(lambda: httpx.get(server.url + "/api/v1/spans/open").json()["count"] == 1, what="open state")
        open_span = httpx.get(server.url + "/api/v1/spans/open").json()["spans"][0]
        assert open_span["name"] == "rollout" and open_span["end_ns"] is None
    finally:
        block.__exit__(None, None, None)
    assert rl_insight.flush(5)
    assert httpx.get(server.url + "/api/v1/spans/open").json()["count"] == 0
    assert spans_of(server, name="rollout")[0]["id"] == open_span["id"]


def test_trace_op_sync_async_and_raising(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init()

    @rl_insight.trace_op("sync_op", extra_labels=lambda batch: {"size": len(batch)}, role="actor")
    def work(batch: list) -> int:
        return len(batch)

    @rl_insight.trace_op()
    async def fetch() -> str:
        await asyncio.sleep(0.001)
        return "ok"

    @rl_insight.trace_op("boom")
    def fail() -> None:
        raise KeyError("x")

    assert work([1, 2, 3]) == 3
    assert asyncio.run(fetch()) == "ok"
    with pytest.raises(KeyError):
        fail()
    assert rl_insight.flush(5)
    s = spans_of(server, name="sync_op")[0]
    assert s["attributes"]["size"] == 3 and s["attributes"]["role"] == "actor"
    assert s["attributes"]["monitor.trace_segment"] == "duration"
    assert spans_of(server, name="test_trace_op_sync_async_and_raising.<locals>.fetch")
    assert spans_of(server, name="boom")


def test_trace_span_is_reported_verbatim(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init()
    rl_insight.trace_span(name="agent_session", start_time_ns=1_000, end_time_ns=2_000,
                          attributes={"turn": 3, "state_lane_id": "traj=1"})
    rl_insight.trace_span(name="bad", start_time_ns=5, end_time_ns=1, attributes={})  # end < start: server rejects
    assert rl_insight.flush(5) is False  # the server refused one item
    s = spans_of(server, name="agent_session")[0]
    assert (s["start_ns"], s["end_ns"], s["lane"], s["attributes"]["turn"]) == (1000, 2000, "traj=1", 3)
    assert not spans_of(server, name="bad")
    assert rl_insight.stats()["dropped"] == {"rejected": 1}


# ----------------------------------------------------------------------------- fork
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_gets_fresh_queue_and_thread(server, monkeypatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="fork", experiment_name="e")
    rl_insight.metric_count("work", 5)
    assert rl_insight.flush(5)
    warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads warns on 3.12+
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            rl_insight.metric_count("work", 2)  # child's own cumulative series starts at 0
            ok = rl_insight.flush(5)
            alive = [t.name for t in threading.enumerate() if t.name == "rl-insight-exporter"]
            os.write(w, json.dumps({"ok": ok, "threads": alive, "stats": rl_insight.stats()}).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    child = json.loads(data)
    assert child["ok"] and child["threads"] == ["rl-insight-exporter"]
    # parent 5 + child 2: the server sums the two processes' cumulative totals
    wait_until(
        lambda: (
            sample_value(metrics_text(server), 'rl_insight_monitor_work_total{experiment_name="e",project="fork"}')
            == 7.0
        ),
        what="summed counter",
    )


def test_a_steps_metrics_logged_before_its_step_key_get_that_step(server, monkeypatch) -> None:
    """verl's dict has `training/global_step` after most keys; every key of the dict belongs to that step."""
    import json as _json
    import sqlite3

    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    rl_insight.init(project="p", experiment_name="steps")
    for step in (1, 2, 3):
        for key, value in {"actor/loss": step / 10, "critic/score/mean": step, "training/global_step": step,
                           "training/epoch": 0}.items():
            rl_insight.metric_gauge(key.replace("/", "_"), value)
        time.sleep(0.2)  # the step's work
    assert rl_insight.flush(5)
    server.app.state.st.writer.flush(10)
    conn = sqlite3.connect(server.config.store_file)
    rows = conn.execute("SELECT s.name, p.step, p.value FROM samples p JOIN series s ON s.id = p.series_id "
                        "WHERE s.name IN ('actor_loss', 'training_epoch') ORDER BY s.name, p.ts").fetchall()
    assert [(n, st) for n, st, _ in rows] == [("actor_loss", 1.0), ("actor_loss", 2.0), ("actor_loss", 3.0),
                                             ("training_epoch", 1.0), ("training_epoch", 2.0), ("training_epoch", 3.0)]
    assert _json is not None
