"""The run store's writer in a process of its own (runstore/writer_process.py): acknowledged only once committed, a
dead child answered False and replaced, refusals at the start as clear as in-process, the child's log in ours (that
it ends with the server: tests/unit/server/workers/test_child_process.py)."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

import pytest

from rl_insight.errors import ConfigError, StoreError
from rl_insight.server.config import ServerConfig
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer_process import SEND_SPACING_S, WriterProcess
from rl_insight.server.state import AppState
from tests.unit.server.runstore.conftest import ForeignFile


def rows(n: int, name: str = "reward", t0: float = 1_000.0, labels: object = "{}") -> list[SampleRow]:
    return [SampleRow("p", "e", name, "gauge", labels, float(i), t0 + i, float(i)) for i in range(n)]  # type: ignore[arg-type]


def stored(location: StoreLocation, name: str = "reward") -> int:
    conn = RunStoreReader(location).conn()
    runs = q.list_runs(conn)
    if not runs:
        return 0
    return sum(m["samples"] for m in q.metric_names(conn, runs[0]["id"]) if m["name"] == name)


def wait_for(check, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def writer(store_at: StoreLocation):
    w = WriterProcess(store_at, flush_interval_s=0.02)
    yield w
    w.close()


def test_acknowledged_only_once_committed(writer: WriterProcess, store_at: StoreLocation) -> None:
    assert writer._child.proc.pid != os.getpid()
    os.kill(writer._child.proc.pid, signal.SIGSTOP)  # the child cannot write: nothing may be acknowledged
    try:
        since = writer.seq()
        writer.put_samples(rows(500))
        done = writer.durable(since)
        time.sleep(0.5)
        assert not done.done() and stored(store_at) == 0
        assert writer.lag_s() > 0.3  # the store trails ingest, and /healthz says so
    finally:
        os.kill(writer._child.proc.pid, signal.SIGCONT)
    assert done.result(20) is True
    assert stored(store_at) == 500  # True means it is in the store for every reader
    wait_for(lambda: writer.stats.samples == 500)
    assert writer.lag_s() == 0.0 and writer.integrity == "ok"


def test_a_killed_child_answers_false_and_is_replaced(writer: WriterProcess, store_at: StoreLocation) -> None:
    since = writer.seq()
    writer.put_samples(rows(10))
    assert writer.durable(since).result(20) is True
    first = writer._child.proc.pid
    os.kill(first, signal.SIGSTOP)
    since = writer.seq()
    writer.put_samples(rows(10, t0=5_000.0))
    lost = writer.durable(since)
    time.sleep(0.3)  # sent to the child that will die with it
    os.kill(first, signal.SIGKILL)
    assert lost.result(20) is False  # ingest answers 503: the client resends
    assert "ended unexpectedly" in (writer.stats.last_error or "")
    wait_for(lambda: writer._child.proc.pid != first and writer._down is None)
    since = writer.seq()
    writer.put_samples(rows(10, t0=5_000.0))  # the resend, to the new child
    assert writer.durable(since).result(20) is True
    assert stored(store_at) == 20 and writer.stats.last_error is None


def test_answers_waiting_close_together_go_in_few_messages(writer: WriterProcess, store_at: StoreLocation) -> None:
    """Every answer that waits for its commit wakes the sender: sent one by one, 1,000 clients were ~1,000 messages
    (and GIL hand-overs) a second. Within SEND_SPACING_S of a send, what comes next waits and goes along."""
    sent: list[str] = []
    child = writer._child
    send = child.send
    child.send = lambda msg: (sent.append(msg[0]), send(msg))[1]  # type: ignore[method-assign]
    waits, began = [], time.monotonic()
    for i in range(100):  # a hand-over a millisecond, each one waited for, as the ingest route does
        since = writer.seq()
        writer.put_samples(rows(1, t0=10_000.0 + i))
        waits.append(writer.durable(since))
        time.sleep(0.001)
    spent = time.monotonic() - began
    assert all(w.result(20) is True for w in waits)
    assert stored(store_at) == 100
    assert 1 <= sent.count("items") <= spent / SEND_SPACING_S + 3, (sent.count("items"), spent)


def test_refusals_at_the_start_are_the_in_process_ones(tmp_path: Path, foreign_sqlite: ForeignFile) -> None:
    with pytest.raises(StoreError, match="not an rl-insight run store") as err:
        WriterProcess(foreign_sqlite.path)
    assert err.value.hint  # the hint crosses the process boundary too
    assert foreign_sqlite.untouched()


def test_one_bad_item_is_dropped_counted_and_logged_here(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    w = WriterProcess(tmp_path / "rs.sqlite", flush_interval_s=0.02)
    try:
        caplog.set_level(logging.WARNING, logger="rl_insight.server.runstore")
        since = w.seq()
        # labels that SQLite cannot bind: the one row is dropped, the other 5 are kept
        w.put_samples(rows(5) + rows(1, name="bad", t0=9_000.0, labels={"not": "text"}))
        assert w.durable(since).result(20) is True
        wait_for(lambda: w.stats.by_reason.get("invalid_item") == 1)
        assert stored(w.location) == 5
        wait_for(lambda: any("dropped one sample" in r.getMessage() for r in caplog.records))
        assert any(r.name == "rl_insight.server.runstore" and r.levelno == logging.WARNING for r in caplog.records)
    finally:
        w.close()


def test_a_full_queue_drops_and_says_so(tmp_path: Path) -> None:
    w = WriterProcess(tmp_path / "rs.sqlite", max_queue_items=100, flush_interval_s=5.0)
    try:
        since = w.seq()
        w.put_samples(rows(80))
        w.put_samples(rows(80, t0=3_000.0))  # past the bound: dropped here, never sent
        assert w.stats.by_reason.get("queue_full") == 80 and w.stats.dropped >= 80
        assert w.durable(since).result(20) is False  # what waited on the lost hand-over is not acknowledged
        assert stored(w.location) == 80
    finally:
        w.close()


def test_close_writes_what_was_handed_over(tmp_path: Path) -> None:
    w = WriterProcess(tmp_path / "rs.sqlite", flush_interval_s=10.0)
    w.put_samples(rows(300))
    child = w._child.proc
    w.close()
    assert child.poll() == 0 and stored(w.location) == 300


def test_store_writer_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="store_writer 'fork' is not one of process, thread"):
        AppState(ServerConfig(data_dir=tmp_path, store_writer="fork"))
