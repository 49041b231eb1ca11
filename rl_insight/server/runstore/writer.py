"""Batching writer: ingest hands over validated items and returns at once; one batch worker
(rl_insight/server/workers/batch_worker.py) writes them, a batch a transaction, each kind of data by its own
writer (`sample_writes.py`, `spans/writes.py`, `run_writes.py`, `steps/step_stats.store`, `trajectories/index.py`);
this module owns the transaction, its retries and its upkeep.

Hand-over never waits on disk. The hand-over queue is bounded (items); past the bound a batch is
dropped and counted (`dropped`), as is a batch that fails to write (disk full, I/O error), which
also marks the store `degraded` with the error until a later write succeeds. Retention (by age and
by size) runs in the same thread, so it never contends with writes.

Durability for acknowledgements: every hand-over gets a sequence number; `durable(since)` is a future
that resolves once everything handed over before it is committed: True when nothing handed over after
`since` was dropped or failed, else False. Ingest takes `seq()` before it hands over and answers only
when its future says True, so nothing it acknowledged can be lost by a crash (the commit is in the WAL).
A failure of someone else's items after `since` also gives False: the answer is then a resend, never a
loss, and writes are idempotent (samples are unique per series and time, spans per id).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ...protocol import SpanRecord
from ...semantics.names import sanitize_metric_name
from ..workers.batch_worker import BatchWorker
from . import retention, run_writes, sample_writes
from .backend import Backend, StoreLocation, open_backend
from .backend.checkpoints import CheckpointHealth
from .backend.transfer import refuse_unfinished
from .hand_over import SINGLE_ITEM_KINDS as _SINGLE_ITEM_KINDS
from .hand_over import HandOver, weight
from .identities import Identities
from .retention import DEFAULT_RETENTION_DAYS, DEFAULT_STORE_MAX_BYTES
from .rows import WriterStats
from .spans import span_lod
from .spans import writes as span_writes
from .spans.writes import cut_short
from .steps import step_stats
from .trajectories.index import TrajectoryStore
from .transaction_rows import TransactionRows

log = logging.getLogger("rl_insight.server.runstore")
NO_IDENTITY = ""  # project / experiment of data sent without a run identity
CONFLICT_RETRIES = 3  # a batch PostgreSQL aborted for another server's transaction is written again this often
MAX_TRANSACTION_ITEMS = 50_000  # items written in one transaction (a longer one holds readers' snapshots back)
WAKE_AT_ITEMS = 20_000  # queued this many, the writer starts without waiting for its interval
# a transaction starts no sooner than this after the previous one: every answer wakes the writer, and at 1,000
# clients a commit each ~1-2 ms rewrote the same index pages over and over (bench/RESULTS.md: the writer's CPU
# -35-44 % for ~10 ms more at p50)
COMMIT_SPACING_S = 0.01


def _weight(item: tuple[str, Any, int]) -> int:
    return weight(item[0], item[1])


class RunStoreWriter(HandOver):
    """The writer in the calling process: one batch worker thread and one connection (writer_process.py runs one in a
    process of its own)."""

    def __init__(self, where: Backend | StoreLocation | Path, *, max_queue_items: int = 2_000_000,
                 flush_interval_s: float = 0.2,
                 retention_days: float = DEFAULT_RETENTION_DAYS, max_bytes: int = DEFAULT_STORE_MAX_BYTES,
                 prune_every_s: float = 60.0, step_metric: str = "training/global_step") -> None:
        self.backend = open_backend(where)
        self.step_names = frozenset({sanitize_metric_name(step_metric)})  # whose samples mark steps (step_marks.py)
        self.location = self.backend.location
        self.path = self.location.display  # what logs may name (never a password)
        # raises StoreError for a foreign or damaged store before the server starts
        self._conn = self.backend.connect()
        try:
            # a half-migrated store: its new runs would collide with the rest of the move
            refuse_unfinished(self.backend, self._conn)
        except BaseException:
            self._conn.close()
            raise
        # a SQLite file's WAL checkpoints on a thread of their own, not inside the commits answers wait for
        self.checkpoints = self.backend.checkpointer(self._conn)
        # a large file skips the start-up check (minutes near the size limit); it runs in the background instead
        self._integrity = "checking" if self.backend.integrity_deferred() else "ok"
        if self._integrity == "checking":
            threading.Thread(target=self._check_integrity, name="rl-insight-integrity", daemon=True).start()
        self._retention_s = retention_days * 86400
        self._max_bytes = max_bytes
        self._prune_every = prune_every_s
        self._seq = 0  # hand-overs so far
        self._failed_seq = 0  # the latest hand-over that was dropped or failed to write
        self._settled_seq = 0  # every hand-over up to this one is written or lost (the latest mark exported)
        self._asked_seq = 0  # the number of the latest mark ask() queued
        self._lock = threading.Lock()  # hand-overs take their sequence number and their queue place together
        self.ids = Identities()  # runs' and series' ids, created in key order (identities.py)
        # called (in the writer thread) with the (project, experiment_name) of runs retention deleted, so what
        # hangs off a run elsewhere (profile traces) goes with it
        self.on_runs_deleted: list[Callable[[set[tuple[str, str]]], object]] = []
        self._stats = WriterStats()
        self.lead: Callable[[], bool] = lambda: True  # several servers on one store: retention on the lease holder
        self.on_settled: list[Callable[[], None]] = []  # called on the writer thread after a commit moved settled()
        self.trajectories = TrajectoryStore()  # agent-loop trajectories from the spans written
        self.span_summary = span_lod.Summarizer()  # the timeline's level-of-detail summary, kept between batches
        self._last_prune = self._last_commit = time.monotonic()
        # the connection serves one thread at a time: the worker's, or a caller of prune() (tests, tools)
        self.conn_lock = threading.RLock()
        # items weigh what they hold (a batch of samples: its rows; a mark: nothing, so it is never refused)
        self._worker: BatchWorker[tuple[str, Any, int]] = BatchWorker(
            "runstore", self._export, max_weight=max_queue_items, max_batch_weight=MAX_TRANSACTION_ITEMS,
            interval_s=flush_interval_s, weight=_weight, wake_at=WAKE_AT_ITEMS, on_idle=self._upkeep,
            min_gap_s=COMMIT_SPACING_S)

    def _check_integrity(self) -> None:
        try:
            result = self.backend.check_integrity()
        except Exception as exc:
            result = f"{type(exc).__name__}: {exc}"
        self._integrity = result
        if result != "ok":
            self.stats.last_error = f"integrity check: {result}"
            self.stats.degraded_since = self.stats.degraded_since or time.time()
            log.error("run store %s is damaged (%s); it keeps serving what it can read. Move it aside and "
                      "`sqlite3 %s .recover` when convenient", self.path, result, self.path)

    # ------------------------------------------------------------------ hand-over (called by ingest)
    def _put(self, kind: str, payload: Any, n: int) -> None:
        with self._lock:
            self._seq += 1
            if not self._worker.put((kind, payload, self._seq)):
                self._failed_seq = self._seq
                self.stats.dropped += n
                self.stats.by_reason["queue_full"] = self.stats.by_reason.get("queue_full", 0) + n
        self.stats.queue_items = self._worker.queued_weight

    def seq(self) -> int:
        return self._seq

    def settled(self) -> tuple[int, int]:
        return self._settled_seq, self._failed_seq

    def ask(self, upto: int) -> None:
        if self._settled_seq >= upto or self._asked_seq >= upto:  # settled, or a queued mark covers it already
            return
        with self._lock:
            self._asked_seq = self._seq
            self._worker.put(("mark", (upto, None), self._seq))
        self._worker.wake()

    def durable(self, since: int) -> "Future[bool]":
        """Resolves once everything handed over so far is committed: True when nothing handed over after `since`
        was dropped or failed (see the module docstring). The writer is woken at once (commits group themselves:
        whatever queued meanwhile goes into the same transaction)."""
        fut: Future[bool] = Future()
        with self._lock:
            self._worker.put(("mark", (since, fut), self._seq))
        self._worker.wake()
        return fut

    @property
    def stats(self) -> WriterStats:
        return self._stats

    @property
    def integrity(self) -> str:
        return self._integrity

    def summary_health(self) -> span_lod.SummaryHealth:
        return self.span_summary.health()

    def checkpoint_health(self) -> CheckpointHealth | None:
        return self.checkpoints.health() if self.checkpoints is not None else None

    def flush(self, timeout: float = 10.0) -> bool:
        try:
            self.durable(self._seq).result(timeout)
            return True
        except TimeoutError:
            return False

    def close(self, timeout: float = 10.0) -> None:
        self.flush(timeout)
        self._worker.stop(timeout)
        if self.checkpoints is not None:
            self.checkpoints.close()  # first: the writer's connection, the last to close, checkpoints what is left
        self._conn.close()

    # ------------------------------------------------------------------ the worker thread
    def _upkeep(self) -> None:
        if self.checkpoints is not None and self._worker.queued_weight == 0:  # nothing waits for a commit now
            with self.conn_lock:
                self.checkpoints.finish(self._conn)
        if not self.lead():
            return
        if time.monotonic() - self._last_prune > self._prune_every:
            self._last_prune = time.monotonic()
            self.prune()
        with self.conn_lock:
            self.span_summary.run(self._conn, work_waits=lambda: self._worker.queued_weight > 0)

    def _export(self, batch: list[tuple[str, Any, int]]) -> None:
        """One transaction for the batch; then the marks in it learn whether what they wait for is stored."""
        marks = [p for k, p, _ in batch if k == "mark"]
        work = [(k, p) for k, p, _ in batch if k != "mark"]
        n = sum(_weight(item) for item in batch)
        self.stats.queue_items = self._worker.queued_weight
        with self.conn_lock:
            written = not work or self._write(work, n)
        if not written:
            with self._lock:
                self._failed_seq = max(self._failed_seq, max(seq for k, _, seq in batch if k != "mark"))
        if marks:
            # a mark is numbered with the hand-overs put before it, all drained before it (the queue keeps order)
            self._settled_seq = max(self._settled_seq, max(seq for k, _, seq in batch if k == "mark"))
        for since, fut in marks:
            if fut is not None:  # (ask's marks have none: settled() says it)
                fut.set_result(self._failed_seq <= since)
        if marks:
            for hook in self.on_settled:  # once per commit, however many requests wait on it
                hook()

    def _write(self, work: list[tuple[str, Any]], n: int) -> bool:
        """Write a drained batch in one transaction; if an item breaks it, isolate items one by one. False when
        the batch is lost (the file cannot be written); items refused one by one (values SQLite cannot hold)
        are counted, not lost: a resend would be refused the same way."""
        t0 = time.perf_counter()
        try:
            self._write_batch_again_on_conflict(work)
            self.stats.samples += sum(len(p) for k, p in work if k == "samples")
            self.stats.spans += sum(len(p[0]) + len(p[1]) for k, p in work if k == "spans")
            self.stats.batches += 1
            self._last_commit = time.monotonic()
            self._recovered()
            return True
        except Exception as exc:  # whatever it is, the transaction must not stay open
            self._rollback()
            if self.backend.is_storage_failure(exc):
                self._storage_failed(exc, n)
                return False
            # One bad item (a value SQLite cannot bind, a constraint) must not cost the others:
            # write each on its own savepoint and drop only those that fail, counted.
            log.warning("run store batch failed (%s: %s); writing its %d items one by one", type(exc).__name__, exc, n)
            try:
                self._write_isolated(work)
                self._recovered()
                return True
            except Exception as exc2:
                self._rollback()
                self._storage_failed(exc2, n)
                return False
        finally:
            self.stats.write_seconds += time.perf_counter() - t0

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except Exception:  # sqlite3's or psycopg's: a broken connection is reopened by the next write
            pass
        self.ids.clear()  # ids created inside the rolled-back transaction are gone
        self.trajectories.forget()

    def lag_s(self) -> float:
        if self._worker.queued_weight == 0:
            return 0.0
        return time.monotonic() - self._last_commit

    def _recovered(self) -> None:
        if self.stats.degraded_since is not None:
            log.warning("run store writes succeed again (%s)", self.path)
        self.stats.degraded_since = None

    def _count_drop(self, reason: str, n: int) -> None:
        self.stats.dropped += n
        self.stats.by_reason[reason] = self.stats.by_reason.get(reason, 0) + n

    def _storage_failed(self, exc: BaseException, n: int) -> None:
        reason = "disk_full" if "full" in str(exc).lower() else "write_error"
        self._count_drop(reason, n)
        self.stats.last_error = f"{type(exc).__name__}: {exc}"
        if self.stats.degraded_since is None:
            self.stats.degraded_since = time.time()
            log.error(
                "run store %s cannot write (%s); %d items dropped, ingest and /metrics continue", self.path, exc, n
            )

    def _write_batch_again_on_conflict(self, work: list[tuple[str, Any]]) -> None:
        """A batch that lost a deadlock or a serialization conflict with another server's transaction (the writer
        takes its locks in one order, so this is rare: resends of the same rows through two servers) is written
        again, up to CONFLICT_RETRIES times, instead of being dropped."""
        for attempt in range(1, CONFLICT_RETRIES + 1):
            try:
                return self._write_batch(work)
            except Exception as exc:
                if not self.backend.is_transient(exc):
                    raise
                self._rollback()
                self.stats.conflicts_retried += 1
                log.info("run store batch conflicted with another server's (%s); writing it again", exc)
                # the other transaction still has to commit: again at once would meet it half-way again
                time.sleep(random.uniform(0.01, 0.05) * attempt)
        self._write_batch(work)

    def _write_batch(self, work: list[tuple[str, Any]]) -> None:
        """The whole batch in one transaction, each kind by its writer (samples, spans, runs, steps)."""
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        now = time.time()
        self.ids.create_in_order(c, work, now)
        rows = TransactionRows(c, self.ids, now)
        for kind, payload in work:
            if kind in _SINGLE_ITEM_KINDS:
                self._write_item(kind, payload, rows)
        sample_writes.write_batch(c, [r for k, p in work if k == "samples" for r in p], rows, self.step_names)
        span_writes.write_batch(c, [s for k, p in work if k == "spans" for s in p[0]],
                                [s for k, p in work if k == "spans" for s in p[1]], rows)
        self._index_trajectories([s for k, p in work if k == "spans" for s in p[1] if not cut_short(s)], now)
        rows.update_runs()
        c.execute("COMMIT")

    def _write_isolated(self, work: list[tuple[str, Any]]) -> None:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        now = time.time()
        rows = TransactionRows(c, self.ids, now)
        for kind, payload in work:
            if kind in _SINGLE_ITEM_KINDS:
                items: list[tuple[str, Any]] = [(kind, payload)]
            elif kind == "samples":
                items = [("sample", r) for r in payload]
            else:
                items = [("start", s) for s in payload[0]] + [("end", s) for s in payload[1]]
            for what, item in items:
                exc = self._on_savepoint(partial(self._write_item, what, item, rows))
                if exc is not None:
                    self.ids.clear()
                    self._count_drop("invalid_item", 1)
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    log.warning("run store dropped one %s it cannot store: %s: %s", what, type(exc).__name__, exc)
        self._index_trajectories([s for k, p in work if k == "spans" for s in p[1] if not cut_short(s)], now)
        rows.update_runs(existing_only=True)
        c.execute("COMMIT")
        self.stats.batches += 1

    def _write_item(self, what: str, item: Any, rows: TransactionRows) -> None:
        """One item by its kind's writer: a hand-over of one item, or one of a batch written item by item."""
        c = self._conn
        if what == "finished":
            run_writes.finished(c, self.ids, item, rows)
        elif what == "heard":
            run_writes.heard(c, self.ids, item, rows)
        elif what == "run_info":
            run_writes.run_info(c, self.ids, item, rows)
        elif what == "step_stats":
            step_stats.store(c, *item)
        elif what == "step_backfill":
            self._step_backfill(item, rows.now)
        elif what == "sample":
            if sample_writes.write_one(c, item, rows, self.step_names):
                self.stats.samples += 1
        else:
            span_writes.write_one(c, item, what == "end", rows)
            self.stats.spans += 1

    def _on_savepoint(self, work: Callable[[], object]) -> BaseException | None:
        """Run `work` on a savepoint of the open transaction: a failure of the file itself propagates (the whole
        batch is lost, counted by the caller); any other is rolled back alone and returned."""
        c = self._conn
        c.execute("SAVEPOINT part")
        try:
            work()
        except Exception as exc:
            if self.backend.is_storage_failure(exc):
                raise
            c.execute("ROLLBACK TO part")
            c.execute("RELEASE part")
            return exc
        c.execute("RELEASE part")
        return None

    def _index_trajectories(self, ended: list[SpanRecord], now: float) -> None:
        """Trajectories and turns from the finished spans just written, on a savepoint of their own: a failure
        here is counted (`trajectory_index`) and never costs the spans."""
        if not ended:
            return
        exc = self._on_savepoint(
            lambda: self.trajectories.apply(
                self._conn, ended, lambda s: self.ids.run_id(self._conn, s.project, s.experiment_name, now)
            )
        )
        if exc is not None:
            self.trajectories.forget()
            self._count_drop("trajectory_index", len(ended))
            self.stats.last_error = f"trajectory index: {type(exc).__name__}: {exc}"
            log.warning("run store could not index the trajectories of %d spans (they are stored): %s: %s",
                        len(ended), type(exc).__name__, exc)

    def _step_backfill(self, payload: tuple[str, str, int, int], now: float) -> None:
        project, experiment, step, before_ns = payload
        run_id = self.ids.run_id(self._conn, project, experiment, now)
        self.trajectories.backfill_steps(self._conn, run_id, step, before_ns)

    # ------------------------------------------------------------------ retention
    def used_bytes(self) -> int:
        return self.backend.used_bytes(self._conn)

    def prune(self) -> int:
        """Delete runs not seen for `retention_days`, then the oldest runs while over `max_bytes`."""
        with self.conn_lock:
            removed = retention.prune(self.backend, self._conn, time.time() - self._retention_s, self._max_bytes,
                                      self._delete_runs)
        self.stats.runs_pruned += removed
        return removed

    def _delete_runs(self, run_ids: list[int]) -> None:
        keys = retention.delete_runs(self._conn, run_ids)
        self.ids.forget(run_ids)
        self.trajectories.forget()
        for callback in self.on_runs_deleted:
            try:
                callback(keys)
            except Exception as exc:  # a listener's failure never undoes the deletion
                log.warning("after deleting runs: %r", exc)
