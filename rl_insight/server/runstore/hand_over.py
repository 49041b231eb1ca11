"""What ingest hands the run store, and what the rest of the server reads of it: one interface for the writer in
the server's own process (`writer.RunStoreWriter`) and for the writer in a process of its own
(`writer_process.WriterProcess`, the default).

Every hand-over is one `(kind, payload)` put through `_put`, which gives it the next sequence number. What a caller
handed over is a `Receipt`, the numbers (since, upto]. Two ways to learn it is committed: `settled()`, two watermarks
(everything up to one number is settled; the latest number lost), which the event loop reads once per commit for
all its waiting requests after `ask(upto)` (intake/ingest.StoredWaiters: no future, no thread hop per request); and
`durable(since)`, a future for a caller on a thread, resolving once everything handed over so far is committed, True
when nothing handed over after `since` was lost.
The `put_*` methods only shape payloads, so both writers take exactly the same items in the same order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .backend import Backend, StoreLocation
from .backend.checkpoints import CheckpointHealth
from .rows import SampleRow, WriterStats
from .spans.span_lod import SummaryHealth


@dataclass(frozen=True, slots=True)
class Receipt:
    """What one caller handed over: the hand-overs numbered after `since`, up to and including `upto`."""

    since: int
    upto: int

    def verdict(self, settled: tuple[int, int]) -> bool | None:
        """Against `HandOver.settled()`: None while not all of it is settled, else True when none of it was lost (a
        loss numbered later is counted against it too: the caller resends, and resends are stored once)."""
        done, lost = settled
        return None if done < self.upto else lost <= self.since


# hand-over kinds that are one item each (samples and spans come in lists)
SINGLE_ITEM_KINDS = ("finished", "heard", "run_info", "step_stats", "step_backfill")


def weight(kind: str, payload: Any) -> int:
    """What a hand-over counts against a queue bound and a transaction's size (a mark: nothing, never refused)."""
    if kind == "samples":
        return len(payload)
    if kind == "spans":
        return len(payload[0]) + len(payload[1])
    return 1 if kind in SINGLE_ITEM_KINDS else 0


class HandOver(ABC):
    backend: Backend  # the store written (a child process opens its own from `location`)
    location: StoreLocation
    # called with the (project, experiment_name) of runs retention deleted, so what hangs off a run elsewhere
    # (profile traces, a step clock) goes with it
    on_runs_deleted: list[Callable[[set[tuple[str, str]]], object]]
    on_settled: list[Callable[[], None]]  # called after a commit moved `settled()` (on a writer thread, not the loop)
    lead: Callable[[], bool]  # several servers on one store: background upkeep on the lease holder only

    @abstractmethod
    def _put(self, kind: str, payload: Any, n: int) -> None:
        """Queue one hand-over under the next sequence number; never blocks, never raises (a loss is counted)."""

    @abstractmethod
    def seq(self) -> int:
        """The hand-over count now: what a later `durable(since)` is measured from."""

    @abstractmethod
    def settled(self) -> tuple[int, int]:
        """(every hand-over up to this number is settled, the latest one that was lost): read on any thread."""

    @abstractmethod
    def ask(self, upto: int) -> None:
        """Have every hand-over up to `upto` committed soon; `on_settled` hooks run once `settled()` moved."""

    @abstractmethod
    def durable(self, since: int) -> "Future[bool]":
        """Resolves once everything handed over so far is committed: True when nothing after `since` was lost."""

    @abstractmethod
    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything handed over so far is written (tests, shutdown); False on a timeout."""

    @abstractmethod
    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then release the store."""

    @abstractmethod
    def lag_s(self) -> float:
        """How far the store trails ingest: 0 with nothing waiting, else the seconds since the last commit."""

    @property
    @abstractmethod
    def stats(self) -> WriterStats:
        """Items written and lost (by reason), the queue, whether writes fail now."""

    @property
    @abstractmethod
    def integrity(self) -> str:
        """"ok", "checking" (a large store is checked after the start), or what the check found."""

    @abstractmethod
    def summary_health(self) -> SummaryHealth:
        """The timeline summary's state for /healthz (span_lod.Summarizer.health)."""

    @abstractmethod
    def checkpoint_health(self) -> CheckpointHealth | None:
        """The SQLite WAL checkpoints' state for /healthz (checkpoints.Checkpointer.health); None on PostgreSQL."""

    # ------------------------------------------------------------------ hand-overs
    def put_samples(self, rows: list[SampleRow]) -> None:
        if rows:
            self._put("samples", rows, len(rows))

    def mark_finished(self, project: str, experiment_name: str, lost: dict[str, Any] | None = None) -> None:
        """The run ended: its clients said they are done (their last batch), or, with `lost` (why, and the lanes that
        were open), the process logging its steps stopped reporting without a word. Later data makes it live again."""
        self._put("finished", (project, experiment_name, lost), 1)

    def put_heard(self, project: str, experiment_name: str) -> None:
        """A process of the run was heard from without data (a heartbeat): the run stays live (its `last_seen` moves),
        so a job that hangs while its processes still beat is not taken for one that went quiet."""
        self._put("heard", (project, experiment_name), 1)

    def put_run_info(self, project: str, experiment_name: str, config: dict[str, Any], tags: list[str]) -> None:
        """What init(config=...) said about the run; the latest description wins."""
        self._put("run_info", (project, experiment_name, config, tags), 1)

    def put_step_stats(self, rows: list[tuple[int, int, int, int, str, str, float]],
                       blocks: Sequence[tuple[int, int, int, int, list[int]]] = ()) -> None:
        """Per-step insight rows (runstore/steps/step_stats.py), and blocks of complete steps to sum up once the rows
        are in: (run_id, first_step, start_ns, end_ns, steps). A step or block computed again replaces its rows."""
        if rows or blocks:
            self._put("step_stats", (rows, list(blocks)), 1)

    def put_step_backfill(self, project: str, experiment_name: str, step: int, at_s: float) -> None:
        """The run's step clock moved for the first time (server/live/step_clock.py): trajectories that arrived before,
        without a step, and began before `at_s` get `step`."""
        self._put("step_backfill", (project, experiment_name, int(step), int(at_s * 1e9)), 1)

    def put_spans(self, starts: list[Any], spans: list[Any]) -> None:
        if starts or spans:
            self._put("spans", (starts, spans), len(starts) + len(spans))
