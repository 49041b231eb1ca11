"""The timeline's level-of-detail summary (spans/span_lod.py), on both backends: a wide window read from the summary
answers exactly what the same window read from the spans answers, whatever is summarized, dirty or open; a span
written while its bucket is rebuilt keeps the bucket dirty; retention takes the summary with the run."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import pytest

from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.spans import span_lod, timeline
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.unit.server.runstore.test_runstore import span

S = 10**9
LANES = ["trainer/rank_0", "rollout/replica_0", "rollout/replica_1"]


def quiet_writer(store_at: StoreLocation) -> RunStoreWriter:
    """A writer whose upkeep leaves the summary alone: the test says when it is built."""
    w = RunStoreWriter(store_at, flush_interval_s=0.02)
    w.span_summary.clock_ns = lambda: span_lod.EVERYTHING  # every bucket's time passed (the default: test_settling)
    run = w.span_summary.run
    w.span_summary.run = lambda conn, now=False, **_: run(conn, now=True) if now else None  # type: ignore[method-assign]
    return w


@pytest.fixture
def store(store_at: StoreLocation):
    w = quiet_writer(store_at)
    yield w, RunStoreReader(store_at)
    w.close()


def summarize(w: RunStoreWriter) -> None:
    """Bring the summary up to date, as the writer's upkeep does, but now and to the end."""
    with w.conn_lock:
        w.span_summary.run(w._conn, now=True)
        while w.span_summary.backlog:
            w.span_summary.run(w._conn, now=True)
    assert w.span_summary.failures == 0


def dirty(r: RunStoreReader) -> int:
    return int(r.conn().execute("SELECT count(*) FROM span_lod_dirty").fetchone()[0])


def random_spans(rng: random.Random, t0: int, n: int, prefix: str) -> list[Any]:
    """Per lane, `n` states one after another over a few hours: mostly short ones (ms to a second) in dense runs,
    some long ones (up to ten minutes), gaps from none to minutes, and children one level down."""
    out = []
    for lane in LANES:
        t = t0 + rng.randrange(10 * S)
        for i in range(n):
            length = int(rng.choice([1e6, 3e7, 3e8, 1.5e9, 5e9, 9e10, 6e11]) * rng.uniform(0.5, 1.5))
            out.append(span(f"{prefix}{lane}{i}", rng.choice(["gen", "reward", "update"]), lane, t, t + length))
            if rng.random() < 0.2:
                out.append(span(f"{prefix}{lane}{i}c", "child", lane, t + 1, t + length // 2, "state_child",
                                f"{prefix}{lane}{i}"))
            t += length + int(rng.choice([0, 1e7, 8e8, 3e9, 2e10, 4e11]) * rng.random()) + 1
    return out


def views(r: RunStoreReader, lo: int, hi: int, res: int) -> tuple[Any, Any]:
    """The window from the summary and from the spans; an open span ends at `now`, which differs between the two
    reads, so its end is left out."""
    def norm(v: dict[str, Any]) -> tuple[Any, list[Any]]:
        rows = sorted((row[:4] + [None if row[7] else row[4]] + row[5:]) for row in v["spans"])
        return v["lanes"], rows

    conn = r.conn()
    return (norm(timeline.spans_window(conn, 1, from_ns=lo, to_ns=hi, resolution_ns=res)),
            norm(timeline.spans_window(conn, 1, from_ns=lo, to_ns=hi, resolution_ns=res, summary=False)))


RESOLUTIONS = [2**28, 3 * 2**28 + 7, 2**30, 2**32, 5 * 2**33, 2**36 + 1, 2**38, 2**41]


def assert_same(r: RunStoreReader, lo: int, hi: int) -> None:
    for res in RESOLUTIONS:
        from_summary, from_spans = views(r, lo, hi, res)
        assert from_summary == from_spans, f"at resolution {res}"
        assert from_spans[1], "an empty window proves nothing"


def test_the_summary_answers_what_the_spans_answer(store) -> None:
    w, r = store
    rng = random.Random(24)
    t0 = time.time_ns() - 6 * 3600 * S
    spans = random_spans(rng, t0, 150, "a")
    opened = [span("open0", "gen", LANES[0], max(s.end_ns for s in spans) + S, None),
              span("open1", "stuck", LANES[1], t0 - 3600 * S, None)]  # open for hours: before every bucket read
    w.put_spans(opened, spans)
    assert w.flush(10)
    lo, hi = t0 - 7200 * S, time.time_ns() + 60 * S
    assert dirty(r) > 0
    assert_same(r, lo, hi)  # nothing summarized yet: every bucket from the spans

    summarize(w)
    assert dirty(r) == 0 and w.span_summary.buckets_built > 0
    levels = {row[0] for row in r.conn().execute("SELECT DISTINCT level FROM span_lod")}
    assert levels == set(range(span_lod.LEVELS))
    assert_same(r, lo, hi)  # everything summarized

    # buckets marked dirty at every level (as if a rebuild were pending) are read from the level below
    with w.conn_lock:
        marks = [(1, lane, lvl, span_lod.bucket_of(lvl, t0 + rng.randrange(6 * 3600 * S)))
                 for lane in LANES for lvl in range(span_lod.LEVELS) for _ in range(2)]
        w._conn.executemany(span_lod._MARK, marks)
    assert_same(r, lo, hi)

    # more spans in the middle of the run: their level-0 buckets are dirty until rebuilt, the rest is summarized
    more = random_spans(rng, t0 + 3600 * S, 40, "b")
    w.put_spans([], more)
    assert w.flush(10)
    assert_same(r, lo, hi)
    summarize(w)
    assert dirty(r) == 0
    assert_same(r, lo, hi)
    # a window below the first level's resolution reads the spans, and says so by counting every one of them
    fine = timeline.spans_window(r.conn(), 1, from_ns=lo, to_ns=hi, resolution_ns=0)
    assert sum(row[5] for row in fine["spans"]) == len(spans) + len(opened) + len(more)


def test_a_span_written_while_its_bucket_is_rebuilt_keeps_it_dirty(store, monkeypatch: pytest.MonkeyPatch) -> None:
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns() - 3600 * S)
    w.put_spans([], [span("a", "gen", LANES[0], t0 + S, t0 + 2 * S)])
    assert w.flush(10)
    real = span_lod._build
    writes = []

    def build_while_another_server_writes(conn: Any, run: int, lane: str, level: int, bucket: int) -> Any:
        items = real(conn, run, lane, level, bucket)
        if level == 0 and not writes:  # a span lands in this bucket after the rebuild read it
            writes.append(1)
            span_lod.mark(conn, [(run, lane, t0 + 3 * S)])
        return items

    monkeypatch.setattr(span_lod, "_build", build_while_another_server_writes)
    with w.conn_lock:
        w.span_summary.run(w._conn, now=True)
    rows = r.conn().execute("SELECT level, bucket_ns, generation FROM span_lod_dirty ORDER BY level").fetchall()
    assert [tuple(x) for x in rows][0] == (0, t0, 2)  # still dirty, one generation on
    monkeypatch.setattr(span_lod, "_build", real)
    summarize(w)
    assert dirty(r) == 0


def test_a_bucket_still_written_is_rebuilt_once_a_round_and_the_levels_above_it_are_reached(
        store, monkeypatch: pytest.MonkeyPatch) -> None:
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns() - 3600 * S)
    w.put_spans([], [span("a0", "gen", LANES[0], t0 + S, t0 + 2 * S)])
    assert w.flush(10)
    real, built = span_lod._build, []

    def slow(conn: Any, run: int, lane: str, level: int, bucket: int) -> Any:
        built.append(level)
        if level == 0:
            time.sleep(0.3)  # a dense lane's newest bucket: one rebuild takes more than a slice's budget
        return real(conn, run, lane, level, bucket)

    monkeypatch.setattr(span_lod, "_build", slow)
    summary = w.span_summary
    for i in range(1, 6):  # the upkeep between the writer's batches, each batch writing into that bucket again
        with w.conn_lock:
            span_lod.Summarizer.run(summary, w._conn)  # (the class's: the fixture's writer only runs it when told)
        w.put_spans([], [span(f"a{i}", "gen", LANES[0], t0 + (2 * i + 1) * S, t0 + (2 * i + 2) * S)])
        assert w.flush(10)
    assert built == list(range(span_lod.LEVELS))  # the busy bucket once, then every level above it, in one round
    assert not summary.backlog and summary.failures == 0
    marked = [tuple(x) for x in r.conn().execute("SELECT level, bucket_ns FROM span_lod_dirty")]
    assert marked == [(0, t0)]  # only it waits, and readers take it from its spans meanwhile
    assert_same(r, t0, t0 + 60 * S)
    # the next sweep (EVERY_S on, as if that long had passed) rebuilds it with what was written since, and the
    # levels above it again
    summary._last -= summary.EVERY_S
    with w.conn_lock:
        span_lod.Summarizer.run(summary, w._conn)
        while summary.backlog:  # (its first slice was the busy bucket alone again)
            span_lod.Summarizer.run(summary, w._conn)
    assert built[span_lod.LEVELS:] == list(range(span_lod.LEVELS)) and not summary.backlog and dirty(r) == 0
    assert_same(r, t0, t0 + 60 * S)


def test_a_slice_past_its_budget_stops_after_one_bucket_and_the_sweep_goes_on_from_there(store) -> None:
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns() - 3600 * S)
    w.put_spans([], [span(f"s{lane}.{b}", "gen", f"lane{lane:02d}", t0 + b * span_lod.BUCKETS[0] + S,
                          t0 + b * span_lod.BUCKETS[0] + 2 * S) for lane in range(40) for b in range(3)])
    assert w.flush(10)
    assert dirty(r) == 120
    with w.conn_lock:
        w._conn.execute("BEGIN IMMEDIATE")
        done, position = span_lod.rebuild(w._conn, budget_s=0)
        w._conn.execute("COMMIT")
    assert (done, position) == (1, (1, "lane00", 0, t0))  # always one, in key order
    with w.conn_lock:
        w._conn.execute("BEGIN IMMEDIATE")
        done, position = span_lod.rebuild(w._conn, budget_s=60, after=position)
        w._conn.execute("COMMIT")
    assert position is None and done >= 119  # from there on to the end: the rest of level 0, and parents ahead
    assert r.conn().execute("SELECT count(*) FROM span_lod_dirty WHERE level = 0").fetchone()[0] == 0
    summarize(w)  # (what the sweep had passed: parents marked behind it)
    assert dirty(r) == 0
    assert_same(r, t0, t0 + 3 * span_lod.BUCKETS[0])


def test_the_writers_sweep_takes_slices_of_slice_s_and_goes_on_where_it_stopped(store,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice holds the writer's commits (issue 24's tail): the sweep stops at its budget and the next round goes on
    from there; a few rounds finish it."""
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns() - 3600 * S)
    w.put_spans([], [span(f"s{lane}", "gen", f"lane{lane:02d}", t0 + S, t0 + 2 * S) for lane in range(30)])
    assert w.flush(10)
    budgets = []
    rebuild = span_lod.rebuild
    monkeypatch.setattr(span_lod, "rebuild", lambda conn, budget_s, after, **_: (budgets.append(budget_s),
                                                                                rebuild(conn, 0, after))[1])
    summary = w.span_summary
    with w.conn_lock:
        summary.run(w._conn, now=True)
    assert budgets == [summary.SLICE_S] and summary.SLICE_S < 0.2  # (rebuild's own default is 0.2 s)
    assert summary.backlog and summary.buckets_built == 1 and dirty(r) > 1  # one bucket over a budget of 0
    rounds = 1
    while summary.backlog:
        with w.conn_lock:
            summary.run(w._conn, now=True)
        rounds += 1
        assert rounds < 1_000
    assert dirty(r) == 0 and summary.buckets_built >= 30
    assert_same(r, t0, t0 + span_lod.BUCKETS[0])


def test_a_slice_ends_once_a_batch_waits_for_the_writer(store) -> None:
    """Past yield_after_s a slice gives the writer back as soon as work waits (issue 24: answers wait for the next
    commit); while none waits it runs to its budget; either way the sweep goes on where the slice stopped."""
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns() - 3600 * S)
    w.put_spans([], [span(f"s{lane}", "gen", f"lane{lane:02d}", t0 + S, t0 + 2 * S) for lane in range(30)])
    assert w.flush(10)
    asked = []

    def waiting() -> bool:
        asked.append(1)
        return True

    with w.conn_lock:
        w._conn.execute("BEGIN IMMEDIATE")
        done, position = span_lod.rebuild(w._conn, budget_s=60, work_waits=waiting, yield_after_s=0.0)
        w._conn.execute("COMMIT")
    assert (done, len(asked)) == (1, 1) and position is not None  # one bucket, then the writer's turn
    with w.conn_lock:
        w._conn.execute("BEGIN IMMEDIATE")
        done, position = span_lod.rebuild(w._conn, budget_s=60, after=position, work_waits=lambda: False)
        w._conn.execute("COMMIT")
    assert position is None and done >= 29  # nothing waiting: on to the end of the sweep
    with w.conn_lock:
        w._conn.execute("BEGIN IMMEDIATE")
        span_lod.rebuild(w._conn, budget_s=60, work_waits=waiting, yield_after_s=60)
        w._conn.execute("COMMIT")
    assert len(asked) == 1  # before yield_after_s nothing is asked
    summarize(w)
    assert dirty(r) == 0
    assert_same(r, t0, t0 + span_lod.BUCKETS[0])


def test_a_finished_span_resent_with_another_start_leaves_nothing_in_its_old_bucket(store) -> None:
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns() - 6 * 3600 * S)
    moved_to = t0 + 3 * span_lod.BUCKETS[0] + S  # three level-0 buckets later
    w.put_spans([], [span("a", "gen", LANES[0], t0 + S, t0 + 2 * S),
                     span("b", "gen", LANES[0], t0 + 5 * S, t0 + 6 * S)])
    assert w.flush(10)
    summarize(w)
    w.put_spans([], [span("a", "gen", LANES[0], moved_to, moved_to + S)])  # the same span, its start corrected
    assert w.flush(10)
    marked = {tuple(x) for x in r.conn().execute("SELECT level, bucket_ns FROM span_lod_dirty")}
    assert marked == {(0, t0), (0, span_lod.bucket_of(0, moved_to))}  # the bucket it left too
    lo, hi = t0 - S, moved_to + 60 * S
    assert_same(r, lo, hi)
    summarize(w)
    assert dirty(r) == 0
    assert_same(r, lo, hi)
    items = r.conn().execute("SELECT span_id, start_ns FROM span_lod WHERE level = 0 ORDER BY start_ns").fetchall()
    assert [tuple(x) for x in items] == [("b", t0 + 5 * S), ("a", moved_to)]
    # a resend that moves nothing (the same start, a later end) marks only the bucket it is in
    w.put_spans([], [span("b", "gen", LANES[0], t0 + 5 * S, t0 + 7 * S)])
    assert w.flush(10)
    assert [tuple(x) for x in r.conn().execute("SELECT level, bucket_ns FROM span_lod_dirty")] == [(0, t0)]


def test_a_batch_that_moves_and_resends_one_span_marks_what_it_left(store) -> None:
    # in one transaction: the same span twice (its start corrected, then resent as corrected) and a new one
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns() - 6 * 3600 * S)
    moved_to = t0 + 3 * span_lod.BUCKETS[0] + S
    w.put_spans([], [span("a", "gen", LANES[0], t0 + S, t0 + 2 * S)])
    assert w.flush(10)
    summarize(w)
    w.put_spans([], [span("a", "gen", LANES[0], moved_to, moved_to + S),
                     span("a", "gen", LANES[0], moved_to, moved_to + 2 * S),
                     span("c", "gen", LANES[1], t0 + 9 * S, t0 + 10 * S)])
    assert w.flush(10)
    marked = {tuple(x) for x in r.conn().execute("SELECT lane, bucket_ns FROM span_lod_dirty")}
    assert marked == {(LANES[0], t0), (LANES[0], span_lod.bucket_of(0, moved_to)), (LANES[1], t0)}
    stored = r.conn().execute("SELECT id, start_ns, end_ns FROM spans ORDER BY id").fetchall()
    assert [tuple(x) for x in stored] == [("a", moved_to, moved_to + 2 * S), ("c", t0 + 9 * S, t0 + 10 * S)]
    summarize(w)
    assert_same(r, t0 - S, moved_to + 60 * S)


def test_finished_spans_cost_postgresql_no_read_of_the_spans_unless_one_moved(store, store_at: StoreLocation) -> None:
    w, _ = store
    if not w._conn.dialect.remote:
        pytest.skip("(SQLite checks every finished span in the same statement: backend/sqlite_rows.py)")
    reads: list[str] = []
    execute, native = w._conn.execute, w._conn.native

    def counted_execute(sql: str, params: Any = ()) -> Any:
        if sql.lstrip().upper().startswith("SELECT") and " FROM spans " in f" {sql} ":
            reads.append(sql)
        return execute(sql, params)

    def counted_native(sql: str, params: Any, **kw: Any) -> Any:
        if " FROM spans " in f" {sql} ":
            reads.append(sql)
        return native(sql, params, **kw)

    w._conn.execute, w._conn.native = counted_execute, counted_native  # type: ignore[method-assign]
    t0 = time.time_ns() - 3600 * S
    w.put_spans([], [span(f"s{i}", "gen", LANES[i % 3], t0 + i * S, t0 + i * S + S // 2) for i in range(200)])
    assert w.flush(10)
    w.put_spans([], [span(f"s{i}", "gen", LANES[i % 3], t0 + i * S, t0 + i * S + S) for i in range(200)])  # resent
    assert w.flush(10)
    assert reads == []
    w.put_spans([], [span("s7", "gen", LANES[1], t0 + 99 * S, t0 + 100 * S)])  # one moved: one primary-key read
    assert w.flush(10)
    assert len(reads) == 1 and "id = " in reads[0]


def test_a_failed_rebuild_is_rolled_back_counted_and_logged_once(store, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    w, r = store
    t0 = time.time_ns() - 3600 * S
    w.put_spans([], [span("a", "gen", LANES[0], t0, t0 + 2 * S)])
    assert w.flush(10)

    def broken(*args: Any) -> Any:
        raise RuntimeError("disk went away")

    monkeypatch.setattr(span_lod, "_build", broken)
    with caplog.at_level(logging.WARNING, "rl_insight.server.runstore"), w.conn_lock:
        w.span_summary.run(w._conn, now=True)
        w.span_summary.run(w._conn, now=True)
    assert w.span_summary.failures == 2
    assert sum("timeline summary could not be brought up to date" in m for m in caplog.messages) == 1
    assert dirty(r) == 1  # nothing half done: the bucket waits, and readers take it from the spans
    a, b = views(r, t0 - S, t0 + 10 * S, span_lod.RESOLUTIONS[0])
    assert a == b and len(a[1]) == 1
    w.put_spans([], [span("b", "gen", LANES[0], t0 + 3 * S, t0 + 4 * S)])  # the writer goes on writing
    assert w.flush(10)


def test_retention_takes_the_summary_with_the_run(store) -> None:
    w, r = store
    t0 = time.time_ns() - 3600 * S
    w.put_spans([], [span("a", "gen", LANES[0], t0, t0 + 2 * S), span("k", "gen", LANES[0], t0, t0 + S, exp="kept")])
    assert w.flush(10)
    summarize(w)
    with w.conn_lock:
        w._conn.execute("UPDATE runs SET last_seen = ? WHERE experiment_name = 'e'", (time.time() - 90 * 86400,))
    w._retention_s = 30 * 86400
    assert w.prune() == 1
    left = r.conn().execute("SELECT DISTINCT run_id FROM span_lod").fetchall()
    assert [x[0] for x in left] == [2]


def test_levels_and_the_read_plan() -> None:
    first = span_lod.RESOLUTIONS[0]
    assert span_lod.level_for(first - 1) is None
    assert span_lod.level_for(first) == 0 and span_lod.level_for(4 * first - 1) == 0
    assert span_lod.level_for(4 * first) == 1
    assert span_lod.level_for(10**15) == span_lod.LEVELS - 1
    assert span_lod.bucket_of(0, -1) == -span_lod.BUCKETS[0]  # (before the epoch: the bucket below, not above)
    b1, b0 = span_lod.BUCKETS[1], span_lod.BUCKETS[0]
    plan: list[list[int]] = []
    # level 1 over three buckets; the middle one dirty, and within it the second level-0 bucket dirty too
    span_lod._plan(1, 0, 3 * b1, {(1, b1), (0, b1 + b0)}, plan)
    assert plan == [[1, 0, b1], [0, b1, b1 + b0], [-1, b1 + b0, b1 + 2 * b0], [0, b1 + 2 * b0, 2 * b1],
                    [1, 2 * b1, 3 * b1]]


def test_settling_a_bucket_is_rebuilt_once_its_time_has_passed_and_read_from_below_until_then(store) -> None:
    """A bucket live lanes still write into is left dirty by a sweep (each later batch would dirty it again), so the
    sweep is not behind for it; once the clock is SETTLE_NS past its end it is rebuilt, the level above it then
    waiting for its own time. Readers get the spans' answer all along."""
    w, r = store
    t0 = span_lod.bucket_of(span_lod.LEVELS - 1, time.time_ns())  # the first bucket of every level
    clock = [t0 + 3 * S]
    w.span_summary.clock_ns = lambda: clock[0]
    w.put_spans([], [span(f"a{lane}", "gen", lane, t0 + S, t0 + 2 * S) for lane in LANES])
    assert w.flush(10)

    def marked() -> set[tuple[str, int]]:
        return {(x[0], int(x[1])) for x in r.conn().execute("SELECT lane, level FROM span_lod_dirty")}

    summarize(w)  # (as far as it goes)
    assert w.span_summary.buckets_built == 0 and not w.span_summary.health()["behind"]
    assert marked() == {(lane, 0) for lane in LANES}
    assert_same(r, t0, t0 + 60 * S)
    clock[0] = t0 + span_lod.BUCKETS[0] + span_lod.SETTLE_NS - 1  # not quite
    summarize(w)
    assert w.span_summary.buckets_built == 0
    clock[0] += 1  # level 0's bucket has settled; level 1's (four times as long) has not
    summarize(w)
    assert w.span_summary.buckets_built == len(LANES)
    assert marked() == {(lane, 1) for lane in LANES}
    assert_same(r, t0, t0 + 60 * S)
    clock[0] = t0 + span_lod.BUCKETS[span_lod.LEVELS - 1] + span_lod.SETTLE_NS  # every level's has
    summarize(w)
    assert w.span_summary.buckets_built == len(LANES) * span_lod.LEVELS and dirty(r) == 0
    assert_same(r, t0, t0 + 60 * S)
