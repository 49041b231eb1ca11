"""The one bounded batch worker and the periodic service (rl_insight/server/workers/batch_worker.py)."""

from __future__ import annotations

import threading
import time

from rl_insight.server.workers.batch_worker import BatchWorker, Periodic
from tests.conftest import wait_until


def test_put_never_waits_for_a_slow_export_and_the_bound_refuses_new_items_counted() -> None:
    release = threading.Event()
    got: list[list[int]] = []

    def export(batch: list[int]) -> None:
        release.wait(10)
        got.append(batch)

    w: BatchWorker[int] = BatchWorker("t", export, max_weight=5, max_batch_weight=2, interval_s=0.01)
    try:
        assert w.put(0)
        wait_until(lambda: len(w) == 0, timeout=5, what="the first item taken by the blocked export")
        kept = [w.put(i) for i in range(1, 9)]  # the export is blocked: these queue, up to the bound
        assert kept == [True] * 5 + [False] * 3 and w.dropped == {"queue_full": 3}
        release.set()
        assert w.flush(5)
        assert [x for b in got for x in b] == [0, 1, 2, 3, 4, 5] and all(len(b) <= 2 for b in got)
    finally:
        release.set()
        w.stop(1)


def test_drop_oldest_keeps_the_newest_and_bounds_bytes_too() -> None:
    release = threading.Event()
    got: list[str] = []
    w: BatchWorker[str] = BatchWorker("t", lambda b: (release.wait(10), got.extend(b)) and None, max_weight=100,
                                      max_batch_weight=100, interval_s=3600, max_bytes=10, size=len,
                                      overflow="drop_oldest")
    try:
        for s in ("aaaa", "bbbb", "cccc", "dd"):
            w.put(s)
        assert len(w) == 3 and w.dropped == {"queue_full": 1}  # 4 + 4 + 4 > 10: the oldest made room
        assert not w.put("x" * 11) and len(w) == 3  # past the whole bound: refused, nothing evicted for it
        release.set()
        assert w.flush(5) and got == ["bbbb", "cccc", "dd"]
    finally:
        release.set()
        w.stop(1)


def test_a_failing_export_is_counted_and_the_worker_goes_on() -> None:
    seen: list[list[int]] = []

    def export(batch: list[int]) -> None:
        seen.append(batch)
        if batch[0] == 0:
            raise RuntimeError("disk on fire")

    w: BatchWorker[int] = BatchWorker("t", export, max_weight=10, max_batch_weight=1, interval_s=3600)
    try:
        w.put(0)
        w.put(1)
        assert w.flush(5) and seen == [[0], [1]] and w.dropped == {"export_error": 1}
    finally:
        w.stop(1)


def test_an_export_that_asks_to_back_off_leaves_the_rest_for_the_next_round() -> None:
    calls: list[list[int]] = []
    w: BatchWorker[int] = BatchWorker("t", lambda b: calls.append(b) or False, max_weight=10, max_batch_weight=1,
                                      interval_s=3600)
    try:
        w.put(1)
        w.put(2)
        assert not w.flush(0.3)  # one batch tried, then it backs off until the next interval
        assert calls == [[1]] and len(w) == 1
    finally:
        w.stop(0.1)
    assert calls == [[1], [2]]  # stopping drains what is left


def test_min_gap_spaces_exports_so_wakes_group_and_a_wake_at_backlog_skips_the_wait() -> None:
    starts: list[float] = []
    sizes: list[int] = []

    def export(batch: list[int]) -> None:
        starts.append(time.monotonic())
        sizes.append(len(batch))

    w: BatchWorker[int] = BatchWorker("t", export, max_weight=10_000, max_batch_weight=10_000, interval_s=3600,
                                      wake_at=1_000, min_gap_s=0.2)
    try:
        for i in range(40):  # one wake per item, as answers that each wait for a commit
            w.put(i)
            w.wake()
            time.sleep(0.01)
        assert w.flush(5)
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        assert len(starts) <= 4 and all(g >= 0.19 for g in gaps), (sizes, gaps)  # ~0.4 s of wakes: 2-3 exports
        assert sum(sizes) == 40
        before = len(starts)
        t0 = time.monotonic()
        for i in range(1_000):  # wake_at weight at once: no waiting out the gap
            w.put(i)
        wait_until(lambda: len(starts) > before, timeout=5, what="the backlog's export")
        assert starts[before] - t0 < 0.15
    finally:
        w.stop(1)


def test_upkeep_runs_beside_the_work_and_periodic_survives_its_failures() -> None:
    ticks: list[int] = []
    upkeep = threading.Event()
    w: BatchWorker[int] = BatchWorker("t", lambda b: None, max_weight=1, max_batch_weight=1, interval_s=0.01,
                                      on_idle=lambda: (upkeep.set(), 1 / 0))
    try:
        assert upkeep.wait(5) and w.put(1) and w.flush(5)  # an upkeep that raises never stops the work
    finally:
        w.stop(1)

    def tick() -> None:
        ticks.append(1)
        raise ValueError("one bad round")

    p = Periodic("t", 0.01, tick).start()
    try:
        wait_until(lambda: len(ticks) >= 3, timeout=5, what="ticks after failures")
    finally:
        p.stop()


def test_a_periodic_woken_runs_at_once_and_says_when_it_cannot() -> None:
    from rl_insight.server.workers.batch_worker import Periodic

    ran = threading.Event()
    p = Periodic("woken", 3600, ran.set)
    assert p.wake() is False  # not started: the caller does the work itself
    p.start()
    try:
        assert p.wake() is True
        assert ran.wait(5)  # not an hour later
    finally:
        p.stop(timeout=5)
    assert p.wake() is False and not p._thread.is_alive()  # stop() does not wait out the interval either
