"""Batching writer: ingest hands over validated items and returns at once; one thread writes them.

Ingest never waits on disk. The hand-over queue is bounded (items); past the bound a batch is
dropped and counted (`dropped`), as is a batch that fails to write (disk full, I/O error), which
also marks the store `degraded` with the error until a later write succeeds. Retention (by age and
by size) runs in the same thread, so it never contends with writes.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import connect

log = logging.getLogger("rl_insight.server.runstore")
NO_IDENTITY = ""  # project / experiment of data sent without a run identity


@dataclass
class SampleRow:
    project: str
    experiment_name: str
    name: str
    kind: str
    labels: str  # JSON of the labels other than project / experiment_name
    step: float | None
    ts: float
    value: float


@dataclass
class WriterStats:
    samples: int = 0
    spans: int = 0
    dropped: int = 0
    batches: int = 0
    runs_pruned: int = 0
    last_error: str | None = None
    degraded_since: float | None = None
    queue_items: int = 0
    write_seconds: float = 0.0
    by_reason: dict[str, int] = field(default_factory=dict)


def span_run(span: dict[str, Any]) -> tuple[str, str]:
    a = span.get("attributes") or {}
    return str(a.get("project") or NO_IDENTITY), str(a.get("experiment_name") or NO_IDENTITY)


class RunStoreWriter:
    def __init__(self, path: Path, *, max_queue_items: int = 2_000_000, flush_interval_s: float = 0.2,
                 retention_days: float = 30.0, max_bytes: int = 20 * 2**30, prune_every_s: float = 60.0) -> None:
        self.path = path
        self._conn = connect(path)  # raises StoreError for a foreign or damaged file before the server starts
        self._max_items = max_queue_items
        self._interval = flush_interval_s
        self._retention_s = retention_days * 86400
        self._max_bytes = max_bytes
        self._prune_every = prune_every_s
        self._queue: deque[tuple[str, Any]] = deque()
        self._queued = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._pending_marks = 0
        self._runs: dict[tuple[str, str], int] = {}
        self._series: dict[tuple[int, str, str, str], int] = {}
        self.stats = WriterStats()
        self._stop = False
        self._last_prune = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rl-insight-runstore", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ hand-over (called by ingest)
    def _put(self, kind: str, payload: Any, n: int) -> None:
        with self._lock:
            if self._queued + n > self._max_items:
                self.stats.dropped += n
                self.stats.by_reason["queue_full"] = self.stats.by_reason.get("queue_full", 0) + n
                return
            self._queue.append((kind, payload))
            self._queued += n
        if self._queued >= 20_000:
            self._wake.set()

    def put_samples(self, rows: list[SampleRow]) -> None:
        if rows:
            self._put("samples", rows, len(rows))

    def mark_finished(self, project: str, experiment_name: str) -> None:
        """A client of this run said it is done (its last batch); later data makes the run live again."""
        self._put("finished", (project, experiment_name), 1)

    def put_spans(self, starts: list[dict[str, Any]], spans: list[dict[str, Any]]) -> None:
        if starts or spans:
            self._put("spans", (starts, spans), len(starts) + len(spans))

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything handed over so far is written (tests, shutdown)."""
        done = threading.Event()
        with self._lock:
            self._queue.append(("mark", done))
        self._wake.set()
        return done.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        while not self._stop:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self._drain()
                if time.monotonic() - self._last_prune > self._prune_every:
                    self._last_prune = time.monotonic()
                    self.prune()
            except Exception as exc:  # keep the thread alive whatever happens
                log.exception("run store writer error: %s", exc)
        self._conn.close()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    return
                batch, n = [], 0
                while self._queue and n < 50_000:
                    kind, payload = self._queue.popleft()
                    batch.append((kind, payload))
                    if kind == "samples":
                        n += len(payload)
                    elif kind == "spans":
                        n += len(payload[0]) + len(payload[1])
                    elif kind == "finished":
                        n += 1
                self._queued -= n
                self.stats.queue_items = self._queued
            marks = [p for k, p in batch if k == "mark"]
            work = [(k, p) for k, p in batch if k != "mark"]
            if work:
                self._write(work, n)
            for m in marks:
                m.set()

    def _write(self, work: list[tuple[str, Any]], n: int) -> None:
        t0 = time.perf_counter()
        c = self._conn
        try:
            c.execute("BEGIN IMMEDIATE")
            now = time.time()
            sample_rows: list[tuple] = []
            span_starts: list[tuple] = []
            span_ends: list[tuple] = []
            touched: dict[int, list] = {}  # run id -> [last_seen, max step, final, earliest client time]
            for kind, payload in work:
                if kind == "finished":
                    run_id = self._run_id(*payload, now)
                    touched.setdefault(run_id, [now, None, False, now])[2] = True
                elif kind == "samples":
                    for r in payload:
                        run_id = self._run_id(r.project, r.experiment_name, now)
                        sid = self._series_id(run_id, r.name, r.kind, r.labels)
                        sample_rows.append((sid, r.step, r.ts, r.value))
                        t = touched.setdefault(run_id, [now, None, False, now])
                        if r.step is not None and (t[1] is None or r.step > t[1]):
                            t[1] = r.step
                        t[3] = min(t[3], r.ts)
                else:
                    starts, ends = payload
                    for s in starts:
                        run_id = self._run_id(*span_run(s), now)
                        t = touched.setdefault(run_id, [now, None, False, now])
                        t[3] = min(t[3], s["start_ns"] / 1e9)
                        span_starts.append((run_id, s["id"], s["trace_id"], s["parent_id"], s["name"], s["lane"] or "",
                                            s["kind"], s["start_ns"], json.dumps(s["attributes"], default=str)))
                    for s in ends:
                        run_id = self._run_id(*span_run(s), now)
                        t = touched.setdefault(run_id, [now, None, False, now])
                        t[3] = min(t[3], s["start_ns"] / 1e9)
                        span_ends.append((run_id, s["id"], s["trace_id"], s["parent_id"], s["name"], s["lane"] or "",
                                          s["kind"], s["start_ns"], s["end_ns"], json.dumps(s["attributes"], default=str)))
            if sample_rows:
                c.executemany("INSERT INTO samples (series_id, step, ts, value) VALUES (?, ?, ?, ?)", sample_rows)
            if span_starts:  # a late start never reopens a span whose end is already stored
                c.executemany("INSERT OR IGNORE INTO spans (run_id, id, trace_id, parent_id, name, lane, kind, start_ns, "
                              "attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", span_starts)
            if span_ends:
                c.executemany("INSERT INTO spans (run_id, id, trace_id, parent_id, name, lane, kind, start_ns, end_ns, "
                              "attributes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, id) DO UPDATE SET "
                              "end_ns = excluded.end_ns, start_ns = excluded.start_ns, attributes = excluded.attributes",
                              span_ends)
            for run_id, (seen, step, final, earliest) in touched.items():
                # (SQLite's max() is NULL when any argument is: batches without a step keep last_step)
                c.execute("UPDATE runs SET last_seen = max(last_seen, ?), last_step = CASE WHEN ? IS NULL THEN last_step "
                          "ELSE max(coalesce(last_step, ?), ?) END, finished_at = ?, first_seen = min(first_seen, ?) "
                          "WHERE id = ?", (seen, step, step, step, seen if final else None, earliest, run_id))
            c.execute("COMMIT")
            self.stats.samples += len(sample_rows)
            self.stats.spans += len(span_starts) + len(span_ends)
            self.stats.batches += 1
            if self.stats.degraded_since is not None:
                log.warning("run store writes succeed again (%s)", self.path)
            self.stats.degraded_since = None
        except sqlite3.Error as exc:
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._runs.clear()  # ids created inside the rolled-back transaction are gone
            self._series.clear()
            reason = "disk_full" if "full" in str(exc).lower() else "write_error"
            self.stats.dropped += n
            self.stats.by_reason[reason] = self.stats.by_reason.get(reason, 0) + n
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            if self.stats.degraded_since is None:
                self.stats.degraded_since = time.time()
                log.error("run store %s cannot write (%s); %d items dropped, ingest and /metrics continue", self.path, exc, n)
        finally:
            self.stats.write_seconds += time.perf_counter() - t0

    def _run_id(self, project: str, experiment: str, now: float) -> int:
        key = (project, experiment)
        rid = self._runs.get(key)
        if rid is None:
            c = self._conn
            c.execute("INSERT OR IGNORE INTO runs (project, experiment_name, first_seen, last_seen) VALUES (?, ?, ?, ?)",
                      (project, experiment, now, now))
            rid = c.execute("SELECT id FROM runs WHERE project = ? AND experiment_name = ?", key).fetchone()[0]
            self._runs[key] = rid
        return rid

    def _series_id(self, run_id: int, name: str, kind: str, labels: str) -> int:
        key = (run_id, name, kind, labels)
        sid = self._series.get(key)
        if sid is None:
            c = self._conn
            c.execute("INSERT OR IGNORE INTO series (run_id, name, kind, labels) VALUES (?, ?, ?, ?)", key)
            sid = c.execute("SELECT id FROM series WHERE run_id = ? AND name = ? AND kind = ? AND labels = ?", key).fetchone()[0]
            self._series[key] = sid
        return sid

    # ------------------------------------------------------------------ retention
    def used_bytes(self) -> int:
        page = self._conn.execute("PRAGMA page_size").fetchone()[0]
        count = self._conn.execute("PRAGMA page_count").fetchone()[0]
        free = self._conn.execute("PRAGMA freelist_count").fetchone()[0]
        return (count - free) * page

    def prune(self) -> int:
        """Delete runs not seen for `retention_days`, then the oldest runs while over `max_bytes`."""
        c = self._conn
        cutoff = time.time() - self._retention_s
        old = [r[0] for r in c.execute("SELECT id FROM runs WHERE last_seen < ?", (cutoff,))]
        if old:
            self._delete_runs(old)
        removed = len(old)
        while self.used_bytes() > self._max_bytes:
            oldest = c.execute("SELECT id FROM runs ORDER BY last_seen LIMIT 1").fetchone()
            if oldest is None:
                break
            self._delete_runs([oldest[0]])
            removed += 1
        self.stats.runs_pruned += removed
        return removed

    def _delete_runs(self, run_ids: list[int]) -> None:
        c = self._conn
        marks = ",".join("?" * len(run_ids))
        c.execute("BEGIN IMMEDIATE")
        c.execute(f"DELETE FROM samples WHERE series_id IN (SELECT id FROM series WHERE run_id IN ({marks}))", run_ids)
        c.execute(f"DELETE FROM series WHERE run_id IN ({marks})", run_ids)
        c.execute(f"DELETE FROM spans WHERE run_id IN ({marks})", run_ids)
        c.execute(f"DELETE FROM runs WHERE id IN ({marks})", run_ids)
        c.execute("COMMIT")
        self._runs = {k: v for k, v in self._runs.items() if v not in run_ids}
        self._series = {k: v for k, v in self._series.items() if k[0] not in run_ids}
