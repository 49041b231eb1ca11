"""The insight rounds in a process of their own (live/insights/process.py): the same insights and step statistics as
on the refresh thread, what the child summarized remembered between rounds, a lost, hung or failing child costing one
round (no stale insights, said in health()) and replaced, the child's log in ours, and an unknown worker refused by
name."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rl_insight.errors import ConfigError, ServiceError
from rl_insight.server.config import ServerConfig
from rl_insight.server.live.insights.process import NICE, InsightProcess
from rl_insight.server.live.insights.service import InsightService
from rl_insight.server.runstore.backend.location import StoreLocation, sqlite_location
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.state import AppState
from tests.unit.server.runstore.conftest import store_at  # noqa: F401  (the fixture: SQLite and PostgreSQL)
from tests.unit.server.runstore.steps.test_step_stats import S, _build

pytestmark = pytest.mark.socket  # (the insight rounds' child process)

STEPS = 30  # 2 s steps, ending 10 s ago: inside the 300 s window, the run live
OPTIONS: dict[str, Any] = {"window_s": 300.0, "live_window_s": 3600.0, "step_metric": "training/global_step",
                           "version_metric": "current_param_version"}


class Handed:
    """The writer's side of InsightService: what it was handed, in order."""

    def __init__(self) -> None:
        self.step_stats: list[tuple[list[Any], list[Any]]] = []

    def put_step_stats(self, rows: list[Any], blocks: list[Any]) -> None:
        self.step_stats.append((rows, blocks))


def _service(where: StoreLocation, worker: str, writer: Any = None) -> InsightService:
    return InsightService(RunStoreReader(where), **OPTIONS, writer=writer, worker=worker)


def _samples(svc: InsightService) -> dict[tuple[str, tuple[str, ...]], float]:
    """What /metrics would show of the service's insights, parsed back from its text."""
    families = text_string_to_metric_families(svc.exposition().decode())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in families for s in fam.samples}


def _live_run(where: StoreLocation) -> None:
    w, _, _ = _build(where, steps=STEPS, t0=time.time_ns() - (STEPS * 2 + 10) * S)
    w.close()


def test_a_round_in_the_process_equals_one_on_the_thread(store_at: StoreLocation) -> None:  # noqa: F811
    _live_run(store_at)
    handed = {"thread": Handed(), "process": Handed()}
    svc = {kind: _service(store_at, kind, handed[kind]) for kind in handed}
    try:
        began = time.monotonic()
        for kind in ("process", "thread"):
            svc[kind].refresh()
        apart = time.monotonic() - began  # how much longer the open generation state was in the second round
        child = svc["process"]._rounds._child
        assert child is not None and child.proc.pid != os.getpid()
        ours = os.getpriority(os.PRIO_PROCESS, 0)  # the child waits for CPU before the server and its writer do
        assert os.getpriority(os.PRIO_PROCESS, child.proc.pid) == min(19, ours + NICE)
        thread, process = _samples(svc["thread"]), _samples(svc["process"])
        assert len(thread) > 20 and set(process) == set(thread)  # lanes, states, steps: the same series
        for key, value in thread.items():
            assert process[key] == pytest.approx(value, abs=apart), key
        # the same rows for the writer (keyed by run, step, lane and name: their order is the lanes' order in the
        # spans each round read, which PostgreSQL does not keep from one scan to the next; seen in CI once)
        def unordered(handed_rows: list[tuple[list[Any], list[Any]]]) -> list[tuple[list[Any], list[Any]]]:
            return [(sorted(rows, key=repr), sorted(blocks, key=repr)) for rows, blocks in handed_rows]
        assert handed["process"].step_stats
        assert unordered(handed["process"].step_stats) == unordered(handed["thread"].step_stats)
        svc["process"].refresh()  # the child remembers what it summarized: nothing is handed over twice
        assert len(handed["process"].step_stats) == 1 and svc["process"]._rounds.starts == 1
    finally:
        for s in svc.values():
            s.stop()
    assert child.proc.poll() == 0  # stopped in order


def test_a_lost_child_costs_one_round_and_is_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    where = sqlite_location(tmp_path / "rs.sqlite")
    _live_run(where)
    svc = _service(where, "process", Handed())
    try:
        svc.refresh()
        assert _samples(svc)
        os.kill(svc._rounds._child.proc.pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="rl_insight.server.insights"):
            svc.refresh()
        assert not _samples(svc)  # no insights rather than stale ones
        assert any("insight process ended during a round" in r.getMessage() for r in caplog.records)
        health = svc.health()
        assert health["failed_rounds"] == 1 and "ended during a round" in health["last_error"]
        svc.refresh()
        assert _samples(svc)
        health = svc.health()
        assert health["rounds"] == 2 and health["process_starts"] == 2 and health["last_error"] is None
        assert health["worker"] == "process" and 0 < health["last_round_s"] < 60
    finally:
        svc.stop()


def test_a_hung_child_is_stopped_at_the_timeout_and_replaced(tmp_path: Path) -> None:
    where = sqlite_location(tmp_path / "rs.sqlite")
    _live_run(where)
    rounds = InsightProcess(where, OPTIONS, round_timeout_s=1.0)
    try:
        assert rounds.run().latest
        hung = rounds._child
        assert hung is not None
        os.kill(hung.proc.pid, signal.SIGSTOP)
        with pytest.raises(ServiceError, match="did not answer a round within 1 s"):
            rounds.run()
        assert hung.proc.poll() is not None  # killed, not left behind
        assert rounds.run().latest and rounds.starts == 2
    finally:
        rounds.close()


def test_close_does_not_wait_for_a_stuck_round(tmp_path: Path) -> None:
    where = sqlite_location(tmp_path / "rs.sqlite")
    _live_run(where)
    rounds = InsightProcess(where, OPTIONS)  # (the 300 s round timeout)
    rounds.run()
    child = rounds._child
    assert child is not None
    os.kill(child.proc.pid, signal.SIGSTOP)
    failed: list[BaseException] = []

    def round_in_flight() -> None:
        try:
            rounds.run()
        except ServiceError as exc:
            failed.append(exc)

    thread = threading.Thread(target=round_in_flight)
    thread.start()
    time.sleep(0.3)
    began = time.monotonic()
    rounds.close(timeout=1.0)
    assert time.monotonic() - began < 10 and child.proc.poll() is not None  # killed, not waited for
    thread.join(10)
    assert not thread.is_alive() and failed  # the round in flight failed
    with pytest.raises(ServiceError, match="stopped"):
        rounds.run()


def test_a_round_that_fails_in_the_child_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    svc = _service(sqlite_location(tmp_path / "missing" / "rs.sqlite"), "process")
    try:
        with caplog.at_level(logging.WARNING, logger="rl_insight.server.insights"):
            svc.refresh()
        failed = [r.getMessage() for r in caplog.records if "insight refresh failed" in r.getMessage()]
        assert failed and "StoreError" in failed[0] and "rs.sqlite" in failed[0]
        assert not _samples(svc)
        assert svc._rounds._child is not None  # the child lives on: the next round may find the store
        assert "StoreError" in svc.health()["last_error"] and svc.health()["process_starts"] == 1
    finally:
        svc.stop()


def test_the_childs_log_is_logged_here(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    where = sqlite_location(tmp_path / "rs.sqlite")
    _live_run(where)
    caplog.set_level(logging.INFO, logger="rl_insight")
    svc = _service(where, "process")
    try:
        svc.refresh()
        pid = svc._rounds._child.proc.pid
        assert any(r.name == "rl_insight.server.insights" and f"insight process {pid} ready" in r.getMessage()
                   for r in caplog.records)
    finally:
        svc.stop()


def test_insights_worker_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="insights_worker 'fork' is not one of process, thread"):
        AppState(ServerConfig(data_dir=str(tmp_path), insights_worker="fork"))


def test_the_ledger_counters_add_up_the_summarized_steps_and_grow_with_them(tmp_path: Path) -> None:
    """rl_insight_ledger_seconds_total (docs/ledger.md): a live run's device-seconds by reason over the steps its
    rounds summarized, equal to the step rows handed to the writer; goodput is the training share."""
    where = sqlite_location(tmp_path / "s.sqlite")
    _live_run(where)
    handed = Handed()
    svc = _service(where, "thread", handed)
    try:
        svc.refresh()
        got = {dict(labels)["reason"]: v for (name, labels), v in _samples(svc).items()
               if name == "rl_insight_ledger_seconds_total"}
        rows = [r for rows, _ in handed.step_stats for r in rows if r[4] == "@ledger"]
        want: dict[str, float] = {}
        for r in rows:  # (run, step, start, end, lane, "class:reason", seconds): one device a lane here
            want[r[5].split(":", 1)[1]] = want.get(r[5].split(":", 1)[1], 0.0) + r[6]
        assert got and got == pytest.approx(want)
        goodput = next(v for (name, _), v in _samples(svc).items() if name == "rl_insight_insight_goodput_ratio")
        assert goodput == pytest.approx(want.get("training", 0.0) / sum(want.values()))
    finally:
        svc.stop()
