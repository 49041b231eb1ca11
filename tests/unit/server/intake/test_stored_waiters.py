"""Answers wait for the run store's commit (intake/ingest.StoredWaiters) on the watermarks both writers keep, on a
real store: the writer in this process and the writer process, SQLite and PostgreSQL. A waiting request resumes
only once its rows are readable; a stopped writer process means a 503 at the timeout and nothing acknowledged; a
killed one a 503 at once; many waiting requests are woken by one commit each, not one wake-up each."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from rl_insight.errors import BusyError
from rl_insight.server.intake.ingest import StoredWaiters, wait_stored
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.hand_over import HandOver, Receipt
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from rl_insight.server.runstore.writer_process import WriterProcess


def rows(n: int, t0: float) -> list[SampleRow]:
    return [SampleRow("p", "e", "reward", "gauge", "{}", float(i), t0 + i, float(i)) for i in range(n)]


def stored(location: StoreLocation) -> int:
    conn = RunStoreReader(location).conn()
    runs = q.list_runs(conn)
    return sum(m["samples"] for m in q.metric_names(conn, runs[0]["id"])) if runs else 0


def hand_over(w: HandOver, n: int, t0: float) -> Receipt:
    since = w.seq()
    w.put_samples(rows(n, t0))
    return Receipt(since, w.seq())


@pytest.fixture(params=["thread", "process"])
def writer(request: pytest.FixtureRequest, store_at: StoreLocation):
    w: HandOver = (RunStoreWriter if request.param == "thread" else WriterProcess)(store_at, flush_interval_s=5.0)
    yield w
    w.close()


def test_a_waiting_request_resumes_once_its_rows_are_readable(writer: HandOver, store_at: StoreLocation) -> None:
    acks = StoredWaiters(writer)

    async def request() -> int:
        receipt = hand_over(writer, 50, 1_000.0)
        assert receipt.verdict(writer.settled()) is None  # not committed yet: it has to wait
        await acks.until_stored(receipt, 10)
        return stored(store_at)

    started = time.monotonic()
    assert asyncio.run(request()) == 50
    assert time.monotonic() - started < 2.5  # asked for at once, not at the writer's 5 s interval


def test_many_waiting_requests_each_resolve_true(writer: HandOver, store_at: StoreLocation) -> None:
    passes = []
    acks = StoredWaiters(writer)
    settle = acks._settle
    acks._settle = lambda: (passes.append(1), settle())[1]  # type: ignore[method-assign]

    async def many() -> None:
        async def one(k: int) -> None:
            await asyncio.sleep(k % 7 * 0.003)
            await acks.until_stored(hand_over(writer, 4, 10_000.0 * (k + 1)), 10)

        await asyncio.gather(*(one(k) for k in range(300)))
        await asyncio.sleep(StoredWaiters.SWEEP_S * 2)
        assert not acks._waiting and acks._sweep is None  # nothing left behind, the timeout sweep stopped

    asyncio.run(many())
    assert stored(store_at) == 1_200
    assert len(passes) < 100  # one pass a commit, however many waited on it


def test_a_stopped_writer_process_is_a_503_at_the_timeout_and_nothing_is_acknowledged(
        store_at: StoreLocation) -> None:
    w = WriterProcess(store_at, flush_interval_s=0.02)
    try:
        acks = StoredWaiters(w)
        os.kill(w._child.proc.pid, signal.SIGSTOP)
        try:
            receipt = hand_over(w, 20, 1_000.0)
            started = time.monotonic()
            with pytest.raises(BusyError, match="not committed within 1 s"):
                asyncio.run(acks.until_stored(receipt, 1.0))
            assert 0.9 < time.monotonic() - started < 4.0  # the timeout, swept every SWEEP_S
            assert stored(store_at) == 0 and not acks._waiting
        finally:
            os.kill(w._child.proc.pid, signal.SIGCONT)
        asyncio.run(acks.until_stored(hand_over(w, 20, 2_000.0), 10))  # the resend is acknowledged once stored
        assert stored(store_at) == 40  # the first batch was written late: the resend of it would be stored once
    finally:
        w.close()


def test_a_killed_writer_process_is_a_503_at_once(tmp_path: Path) -> None:
    from rl_insight.server.runstore.backend.location import sqlite_location

    w = WriterProcess(sqlite_location(tmp_path / "rs.sqlite"), flush_interval_s=0.02)
    try:
        acks = StoredWaiters(w)
        os.kill(w._child.proc.pid, signal.SIGSTOP)
        receipt = hand_over(w, 20, 1_000.0)

        async def request() -> float:
            started = time.monotonic()
            asyncio.get_running_loop().call_later(0.3, os.kill, w._child.proc.pid, signal.SIGKILL)
            with pytest.raises(BusyError, match="a write failed"):
                await acks.until_stored(receipt, 30)
            return time.monotonic() - started

        assert asyncio.run(request()) < 10  # at the child's death, not the 30 s timeout
        with pytest.raises(BusyError):  # the thread path (gRPC) says the same
            wait_stored(w, receipt, 5)
    finally:
        w.close()
