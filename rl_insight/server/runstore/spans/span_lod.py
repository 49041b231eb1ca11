"""The timeline's level-of-detail summary: a wide window's view without reading every span of its lanes.

Per run, lane and level k (resolution `RESOLUTIONS[k]`, 0.27 s × 4^k), `span_lod` holds the lane's finished spans
merged exactly as the timeline merges them at that resolution (`merge_lane`): a span at least that long stays one
item; shorter ones that follow each other at most that far apart become one busy item with their count, named after
their longest span. Items are kept per bucket of start time (`BUCKETS[k]`, 64 resolutions), so that a bucket can be
rebuilt alone.

Invariants:
- Merging a level's items at any resolution at or above the level's gives what merging the spans themselves gives:
  a merged item holds only spans shorter than its level's resolution, each starting at most that far after the ones
  before, so at a coarser resolution either all of it merges or it starts an item that the rest of it extends. The
  same holds for building level k from level k-1's items, which is how every level above 0 is built (a bucket reads
  four buckets of the level below, never the spans again).
- Never stale: the writer marks a lane's level-0 bucket dirty in the transaction that writes a finished span into it;
  a reader takes a dirty bucket from the level below (at level 0: the spans). Rebuilding a bucket marks its parent
  dirty. A mark carries a generation bumped by every write; a rebuild removes only the generation it read, so a span
  written meanwhile (by another server of a fleet) keeps its bucket dirty.
- A finished span re-sent with another start (its upsert moves it) is marked in the bucket of its old start too,
  in the same transaction, before the upsert (`mark_moved`): only the stored row still knows the old start.
- Open spans are never summarized (their end moves); readers take them from their own index.
- Only at a window's edges can a view from the summary differ from one from the spans: an edge item may also count
  spans just outside the window (it is drawn where the lane was busy either way).

Rebuilding runs in the writer's thread on the fleet's lease holder: a sweep over the dirty buckets in key order every
few seconds (`Summarizer`), a bounded slice at a time, each bucket at most once a sweep (`rebuild`), and only once its
time has passed (`SETTLE_NS`): a bucket live lanes still write into stays dirty, read from the level below.
"""

from __future__ import annotations

import logging
import time
from heapq import merge
from typing import Any, Callable, Iterable, Iterator, Sequence

from typing_extensions import TypedDict

from ..backend import StoreConnection
from ..backend.schema import LOD_BUCKET_NS
from ..rows import UPSERT_END

log = logging.getLogger("rl_insight.server.runstore")
# ns: 0.27 s (a 10-minute window at 1,500 px: 0.4 s a pixel), 1.07 s, 4.3 s, 17 s, 69 s, 4.6 min, 18 min
LEVELS = 7
RESOLUTIONS = [2**28 * 4**k for k in range(LEVELS)]
BUCKETS = [64 * r for r in RESOLUTIONS]  # ns of start time per bucket: 17 s ... 19.5 h; 4 buckets make the next one
assert BUCKETS[0] == LOD_BUCKET_NS  # (the tables and the backfill of stores older than the summary: backend/schema.py)

_MARK = ("INSERT INTO span_lod_dirty (run_id, lane, level, bucket_ns, generation) VALUES (?, ?, ?, ?, 1) "
         "ON CONFLICT (run_id, lane, level, bucket_ns) DO UPDATE SET generation = span_lod_dirty.generation + 1")
# one item: (depth, name, start, end, spans merged, longest span's length, span id where the item is one span alone
# at least the resolution long, open)
Item = Sequence[Any]


def level_for(resolution_ns: int) -> int | None:
    """The coarsest level whose resolution is at or under `resolution_ns`; None below level 0's."""
    level = None
    for k, r in enumerate(RESOLUTIONS):
        if r <= resolution_ns:
            level = k
    return level


def bucket_of(level: int, ns: int) -> int:
    return ns - ns % BUCKETS[level]


def merge_lane(lane: str, rows: Iterable[Item], res: int, out: list[list[Any]], limit: int) -> bool:
    """Append a lane's items, in start order, merged at resolution `res`, to `out` as [lane, depth, name, start, end,
    count, span_id, open, mergeable, longest]; False when `limit` items were reached."""
    current: list[list[Any] | None] = [None, None]  # per depth: the item being extended
    for depth, name, start, end, count, longest, sid, is_open in rows:
        cur = current[depth]
        if cur is not None and longest < res and cur[8] and start - cur[4] <= res:
            # short spans right after a short (or merged) item: one busy interval
            if end > cur[4]:
                cur[4] = end
            cur[5] += count
            cur[6] = None
            if is_open:
                cur[7] = True
            if longest > cur[9]:  # named after its longest span
                cur[2], cur[9] = name, longest
            continue
        if len(out) >= limit:
            return False
        cur = [lane, depth, name, start, end, count, sid, bool(is_open), longest < res, longest]
        current[depth] = cur
        out.append(cur)
    return True


# (a trigger on spans would find the old start by itself, but its mere presence made SQLite's span upserts ~20%
# slower; a lookup per span reads the page the upsert reads next and costs nothing measurable on SQLite)
_OLD_BUCKET = f"s.start_ns - ((s.start_ns % {BUCKETS[0]}) + {BUCKETS[0]}) % {BUCKETS[0]}"
_ON_MARKED = ("ON CONFLICT (run_id, lane, level, bucket_ns) DO UPDATE SET generation = "
              "span_lod_dirty.generation + 1")
# (SQLite: the batch's spans as a CTE's VALUES list, a point read by primary key each, in few statements:
# backend/sqlite_rows.py)
_MARK_MOVED = (f"WITH sent (run_id, id, start_ns) AS (VALUES (?, ?, ?)) "
               f"INSERT INTO span_lod_dirty (run_id, lane, level, bucket_ns, generation) SELECT s.run_id, s.lane, 0, "
               f"{_OLD_BUCKET}, 1 FROM sent JOIN spans s ON s.run_id = sent.run_id AND s.id = sent.id "
               f"WHERE s.end_ns IS NOT NULL AND s.start_ns <> sent.start_ns {_ON_MARKED}")
# A remote engine (PostgreSQL), where every statement is a round trip: a batch's stored rows of one run in one read by
# primary key and an array of ids, planned per call (dialect.rows_for_ids). The one-statement form before (unnest, a
# LATERAL point read per span, the marks in the same statement) ran 7-19 s a batch on the CPU at ~300k spans in
# bench_fanin's two-server run (its plan not captured; every ingest answer waited out its 10 s); this form is 1.26x its
# write rate: bench/RESULTS.md
_STORED_REMOTE = "SELECT id, lane, start_ns FROM spans WHERE run_id = ? AND id {ids} AND end_ns IS NOT NULL"
# (upsert_ends on a remote engine) the end of a span stored unfinished, or finished at the same start; a span stored
# finished at another start is left to the caller, which marks the bucket it leaves first
_UPSERT_END_UNMOVED = UPSERT_END + " WHERE spans.end_ns IS NULL OR spans.start_ns = excluded.start_ns"
_STORED_ONE = "SELECT lane, start_ns FROM spans WHERE run_id = ? AND id = ?"


def mark_moved(conn: StoreConnection, spans: Sequence[tuple[int, str, int]]) -> None:
    """Before finished spans (run, id, start) are upserted: mark the level-0 bucket of each one already stored as
    finished at another start, whose item the upsert would otherwise leave behind there."""
    if not spans:
        return
    if not conn.dialect.remote:
        conn.insert_rows(_MARK_MOVED, spans)
        return
    starts: dict[int, dict[str, int]] = {}  # run -> span id -> the start it is sent with now
    for run, span_id, start in spans:
        starts.setdefault(run, {})[span_id] = start
    moved = []
    for run, of_run in starts.items():
        rows = conn.dialect.rows_for_ids(conn, _STORED_REMOTE, (run,), list(of_run))
        moved += [(run, lane, old) for span_id, lane, old in rows if old != of_run[span_id]]
    mark(conn, moved)


def upsert_ends(conn: StoreConnection, rows: Sequence[Sequence[Any]]) -> None:
    """Store finished spans (rows of rows.UPSERT_END), marking the level-0 bucket each one left when it was stored
    finished at another start (mark_moved), in the writer's transaction.

    A remote engine (PostgreSQL) checks nothing first: the upsert itself declines a row whose stored span is finished
    at another start (`_UPSERT_END_UNMOVED`), says which (RETURNING), and only those rare rows are looked up, one
    primary-key read each, marked and upserted. The read of every span a batch finishes (mark_moved's, by an array of
    ids) was planned per call, and with a new run's statistics not yet gathered PostgreSQL read the run's spans
    through `spans_by_start` instead of the key: 1.7 ms at 15,000 spans against 0.18 ms, growing with the run
    (bench/RESULTS.md)."""
    if not rows:
        return
    if not conn.dialect.remote:
        mark_moved(conn, [(r[0], r[1], r[7]) for r in rows])
        conn.insert_rows(UPSERT_END, rows)
        return
    written = conn.insert_rows_written(_UPSERT_END_UNMOVED, rows)
    moved = [r for r, ok in zip(rows, written) if not ok]
    if moved:
        old = [conn.execute(_STORED_ONE, (r[0], r[1])).fetchone() for r in moved]
        mark(conn, [(r[0], o[0], o[1]) for r, o in zip(moved, old) if o is not None])
        conn.insert_rows(UPSERT_END, moved)


def mark(conn: StoreConnection, buckets: Iterable[tuple[int, str, int]]) -> None:
    """Mark the level-0 buckets of (run, lane, a finished span's start) dirty (the writer, in its transaction)."""
    marks = sorted({(run, lane, bucket_of(0, start)) for run, lane, start in buckets})
    if marks:
        conn.insert_rows(_MARK, [(run, lane, 0, b) for run, lane, b in marks])


# ----------------------------------------------------------------------------- rebuilding
_SPANS_OF_BUCKET = ("SELECT kind != 'state', name, start_ns, end_ns, 1, end_ns - start_ns, id, 0 FROM spans "
                    "WHERE run_id = ? AND lane = ? AND start_ns >= ? AND start_ns < ? AND end_ns IS NOT NULL "
                    "ORDER BY start_ns")
_ITEM_COLUMNS = "depth, name, start_ns, end_ns, merged, longest_ns, span_id, 0"
_ITEMS_OF_BUCKETS = (f"SELECT {_ITEM_COLUMNS} FROM span_lod WHERE run_id = ? AND lane = ? AND level = ? "
                     f"AND bucket_ns >= ? AND bucket_ns < ? ORDER BY bucket_ns, seq")


def _build(conn: StoreConnection, run: int, lane: str, level: int, bucket: int) -> list[list[Any]]:
    if level == 0:
        rows: Any = conn.execute(_SPANS_OF_BUCKET, (run, lane, bucket, bucket + BUCKETS[0]))
    else:
        rows = conn.execute(_ITEMS_OF_BUCKETS, (run, lane, level - 1, bucket, bucket + BUCKETS[level]))
    out: list[list[Any]] = []
    merge_lane(lane, ((int(r[0]), *r[1:]) for r in rows), RESOLUTIONS[level], out, 2**62)
    return out


Position = tuple[int, str, int, int]  # a dirty bucket's key: (run, lane, level, bucket), the table's primary key
# A bucket is due once its time is SETTLE_NS behind the clock. Before then a live lane writes into it again with
# (about) every batch: rebuilding it on every sweep rebuilt each bucket once a sweep for as long as it lasts, and
# every level above it along with it. At 1,000 clients (5,000 lanes) that kept the sweep always behind, ~1,500-2,000
# rebuilds a second between the writer's commits; a bucket rebuilt once its time has passed is rebuilt about once
# (a span finishing after that marks it again). Readers take a bucket not yet due from the level below, as any dirty
# one: at most four buckets a level, and the newest 17 s from the spans. The settling time lets the states that start
# near a bucket's end finish first.
SETTLE_NS = 5 * 10**9
_END_OF_BUCKET = "bucket_ns + CASE level " + " ".join(f"WHEN {k} THEN {b}" for k, b in enumerate(BUCKETS)) + " END"
_DUE = f"{_END_OF_BUCKET} <= ?"
# the next due buckets after a position, in primary-key order (a range of the key's index; what is not due yet is
# skipped inside the engine, never returned)
_NEXT_DIRTY = ("SELECT run_id, lane, level, bucket_ns, generation FROM span_lod_dirty WHERE "
               f"(run_id, lane, level, bucket_ns) > (?, ?, ?, ?) AND {_DUE} ORDER BY run_id, lane, level, bucket_ns "
               "LIMIT 256")
_ANY_DUE = f"SELECT 1 FROM span_lod_dirty WHERE {_DUE} LIMIT 1"
START: Position = (-(2**62), "", -1, -(2**62))
EVERYTHING = 2**62  # `due_by_ns` that makes every dirty bucket due, whatever its time (tests, a full rebuild)


def rebuild(conn: StoreConnection, budget_s: float = 0.2, after: Position = START, *, work_waits: Callable[[],
            bool] | None = None,
            yield_after_s: float = 0.0, due_by_ns: int = EVERYTHING) -> tuple[int, Position | None]:
    """Rebuild dirty buckets that end by `due_by_ns` after position `after`, in primary-key order, for about `budget_s`
    (at least one), in the caller's transaction: (buckets rebuilt, the position to resume after, None when the end was
    reached). Past `yield_after_s` it also stops as soon as `work_waits()` says other work waits for the caller's
    thread.

    A sweep from START to the end takes each dirty bucket at most once. What is marked behind it — the newest bucket
    of a busy lane, dirty again after every batch; a parent that sorts before rows already read — waits for the next
    sweep. (Before, each slice began again at level 0 with every dirty row read: such a bucket was rebuilt on every
    slice and, once one rebuild took a slice, the levels above it were never reached.) A parent sorts after its
    children (same run and lane, a level up) but often before rows already read with them: a lane's levels then
    follow one a sweep, and readers take a dirty bucket from the level below meanwhile."""
    began = time.monotonic()
    deadline, may_yield = began + budget_s, began + yield_after_s
    done, position = 0, after
    while True:
        rows = conn.execute(_NEXT_DIRTY, (*position, due_by_ns)).fetchall()
        if not rows:
            return done, None
        for run, lane, level, bucket, generation in rows:
            if done:
                t = time.monotonic()
                if t > deadline or (work_waits is not None and t > may_yield and work_waits()):
                    return done, position
            items = _build(conn, run, lane, level, bucket)
            conn.execute("DELETE FROM span_lod WHERE run_id = ? AND lane = ? AND level = ? AND bucket_ns = ?",
                         (run, lane, level, bucket))
            conn.executemany(
                "INSERT INTO span_lod (run_id, lane, level, bucket_ns, seq, depth, name, start_ns, end_ns, merged, "
                "longest_ns, span_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run, lane, level, bucket, i, it[1], it[2], it[3], it[4], it[5], it[9], it[6] if it[5] == 1 else None)
                 for i, it in enumerate(items)])
            conn.execute("DELETE FROM span_lod_dirty WHERE run_id = ? AND lane = ? AND level = ? AND bucket_ns = ? "
                         "AND generation = ?", (run, lane, level, bucket, generation))
            if level + 1 < LEVELS:
                conn.execute(_MARK, (run, lane, level + 1, bucket_of(level + 1, bucket)))
            done += 1
            position = (run, lane, level, bucket)


# ----------------------------------------------------------------------------- reading
def _plan(level: int, lo: int, hi: int, dirty: set[tuple[int, int]], out: list[list[int]]) -> None:
    """Cover start times [lo, hi) (aligned to `level`'s buckets) with clean buckets, as [level, lo, hi] runs in start
    order; a dirty bucket by the level below, at level 0 by the spans (level -1)."""
    size = BUCKETS[level]
    for b in range(lo, hi, size):
        if (level, b) not in dirty:
            part = [level, b, b + size]
        elif level > 0:
            _plan(level - 1, b, b + size, dirty, out)
            continue
        else:
            part = [-1, b, b + size]
        if out and out[-1][0] == part[0] and out[-1][2] == part[1]:
            out[-1][2] = part[2]
        else:
            out.append(part)


def dirty_buckets(conn: StoreConnection, run_id: int) -> dict[str, set[tuple[int, int]]]:
    """Per lane, the (level, bucket) not to be read: those marked, and every bucket above one (a rebuild marks the
    parent only once the child is done, so until then the parent misses what the child is missing)."""
    out: dict[str, set[tuple[int, int]]] = {}
    for lane, level, bucket in conn.execute("SELECT lane, level, bucket_ns FROM span_lod_dirty WHERE run_id = ?",
                                            (run_id,)):
        out.setdefault(lane, set()).update((k, bucket_of(k, bucket)) for k in range(level, LEVELS))
    return out


# a span as an item (open ones end at :now), the timeline's reads of spans and of the summary alike
SPAN_ITEM = ("kind != 'state', name, start_ns, coalesce(end_ns, :now), 1, coalesce(end_ns, :now) - start_ns, "
             "CASE WHEN coalesce(end_ns, :now) - start_ns >= :res THEN id END, end_ns IS NULL")
# the run's open spans starting before :before, from their partial index
OPEN_SPANS = ("SELECT lane, " + SPAN_ITEM + " FROM spans {open_index} WHERE run_id = :run AND end_ns IS NULL "
              "AND start_ns < :before ORDER BY start_ns")
_WINDOW = "start_ns < :to AND coalesce(end_ns, :now) > :from"
_RAW = (f"SELECT {SPAN_ITEM} FROM spans WHERE run_id = :run AND lane = :lane AND start_ns >= :lo AND start_ns < :hi "
        f"AND {_WINDOW} ORDER BY start_ns")
_LOD = ("SELECT depth, name, start_ns, end_ns, merged, longest_ns, CASE WHEN merged = 1 AND longest_ns >= :res "
        "THEN span_id END, 0 FROM span_lod WHERE run_id = :run AND lane = :lane AND level = :level "
        "AND bucket_ns >= :lo AND bucket_ns < :hi AND start_ns < :to AND end_ns > :from ORDER BY bucket_ns, seq")


def open_index(conn: StoreConnection) -> str:
    """SQLite would rather walk the start-time index over every span of the run than the partial index of its open
    ones; PostgreSQL picks the latter by itself."""
    return conn.dialect.index_hint("spans_open")


def lane_rows(conn: StoreConnection, args: dict[str, Any], lanes: list[str], level: int, longest_ns: int
              ) -> Iterator[tuple[str, Iterable[Item]]]:
    """Each lane's items for the window args[from, to) at resolution args[res] >= level's, in start order: clean
    buckets of `level` (or below where dirty), the spans of dirty level-0 buckets, and open spans, which no bucket
    holds. Buckets from the one holding args[from] - `longest_ns` on (no finished span reaching into the window
    starts earlier)."""
    dirty = dirty_buckets(conn, args["run"])
    open_by_lane: dict[str, list[tuple]] = {}
    for r in conn.execute(OPEN_SPANS.format(open_index=open_index(conn)), {**args, "before": args["to"]}):
        open_by_lane.setdefault(r[0], []).append((int(r[1]), *r[2:]))
    size = BUCKETS[level]
    lo = bucket_of(level, args["from"] - max(0, longest_ns))
    hi = bucket_of(level, args["to"] - 1) + size
    for lane in lanes:
        plan: list[list[int]] = []
        _plan(level, lo, hi, dirty.get(lane, set()), plan)
        parts: list[Iterable[Item]] = []
        summarized: list[tuple[int, int]] = []
        for lvl, a, b in plan:
            if lvl < 0:
                parts.append(conn.execute(_RAW, {**args, "lane": lane, "lo": a, "hi": b}))
            else:
                parts.append(conn.execute(_LOD, {**args, "lane": lane, "level": lvl, "lo": a, "hi": b}))
                summarized.append((a, b))
        rows: Iterable[Item] = (r for part in parts for r in part)
        if lane in open_by_lane:  # (open spans of dirty buckets came with their spans; those before lo with none)
            extra = [r for r in open_by_lane[lane] if r[2] < lo or any(a <= r[2] < b for a, b in summarized)]
            if extra:
                rows = merge(rows, extra, key=lambda r: r[2])
        yield lane, rows


class SummaryHealth(TypedDict):
    """/healthz's word on the timeline summary: whether due buckets wait to be rebuilt, how many were, failures."""

    behind: bool
    buckets_built: int
    failures: int


class Summarizer:
    """Keeps the summary up to date from the writer's thread (between its batches, so never in their way for more
    than a slice): a sweep over the due dirty buckets (SETTLE_NS) every EVERY_S, continued at once while it is
    unfinished. A failed slice is rolled back, counted and logged at most once a minute; readers meanwhile read the
    spans of what stays dirty."""

    EVERY_S = 5.0
    # A slice holds the writer between two commits, so every answer waiting for the next commit waits for it too. At
    # 1,000 clients (5,000 lanes, thousands of buckets dirty a sweep) slices of rebuild's default 0.2 s were the tail
    # of ingest's p99; 0.05 s slices, still back to back while the sweep is unfinished, cut it (bench/RESULTS.md,
    # issue 24). Shorter ones with pauses between were slower: each slice's own transaction and re-read cost more.
    SLICE_S = 0.05
    # ... and a slice ends sooner, past this, once a batch waits for the writer (`work_waits`): at 1,000 clients one
    # did about every 2 ms, and the gaps between commits of a slice plus a commit were the answers' tail
    YIELD_AFTER_S = 0.005

    def __init__(self) -> None:
        self._last = -float("inf")
        self._position: Position | None = None  # where the unfinished sweep goes on
        self.backlog = True  # (a store upgraded from before the summary starts with every bucket to build)
        self._logged = -float("inf")
        self.buckets_built = 0
        self.failures = 0
        self.clock_ns: Callable[[], int] = time.time_ns  # what says which buckets' time has passed (SETTLE_NS)

    def health(self) -> SummaryHealth:
        """For /healthz: whether due buckets wait to be rebuilt (wide views read below them meanwhile), and failures."""
        return {"behind": self.backlog, "buckets_built": self.buckets_built, "failures": self.failures}

    def run(self, conn: StoreConnection, *, now: bool = False, work_waits: Callable[[], bool] | None = None) -> None:
        """A slice of rebuilding, when due. `now`: at once, and left with `backlog` set while anything is dirty (what
        a sweep leaves behind it is swept again at once). `work_waits`: whether the writer has a batch waiting (the
        slice then ends after YIELD_AFTER_S)."""
        if not now and not self.backlog and time.monotonic() - self._last < self.EVERY_S:
            return
        self._last = time.monotonic()
        due_by = self.clock_ns() - SETTLE_NS
        if conn.execute(_ANY_DUE, (due_by,)).fetchone() is None:
            self.backlog, self._position = False, None  # (nothing due: no write lock taken)
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            done, self._position = rebuild(conn, budget_s=self.SLICE_S, after=self._position or START,
                                           work_waits=work_waits, yield_after_s=self.YIELD_AFTER_S, due_by_ns=due_by)
            conn.execute("COMMIT")
            self.buckets_built += done
            self.backlog = self._position is not None or (
                now and conn.execute(_ANY_DUE, (due_by,)).fetchone() is not None)
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self.backlog, self._position = False, None
            self.failures += 1
            if time.monotonic() - self._logged > 60:
                self._logged = time.monotonic()
                log.warning("the timeline summary could not be brought up to date (the timeline reads spans "
                            "instead): %s: %s", type(exc).__name__, exc)
