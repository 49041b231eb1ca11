"""The run store's reads, by kind of data (`runs`, `samples`, `spans`, `steps`, `trajectories`: each a kind's reader
in its folder, whose reads take the connection themselves), over read connections: one per thread (SQLite
connections are not shared across threads, and a PostgreSQL connection runs one statement at a time), opened lazily;
WAL (SQLite) and MVCC (PostgreSQL) let them read while the writer commits. A PostgreSQL connection found broken is
opened again."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from .backend import Backend, StoreConnection, StoreLocation, open_backend
from .moe import moe_summary
from .run_reads import RunReads
from .sample_reads import SampleReads
from .spans.reads import SpanReads
from .steps.reads import StepReads
from .trajectories.reads import TrajectoryReads


class RunStoreReader:
    def __init__(self, where: Backend | StoreLocation | Path) -> None:
        self.backend = open_backend(where)
        self.location = self.backend.location
        self.path = self.location.display
        self._local = threading.local()
        self.runs, self.samples, self.spans = RunReads(self), SampleReads(self), SpanReads(self)
        self.steps, self.trajectories = StepReads(self), TrajectoryReads(self)

    def moe(self, run_id: int, step: float | None = None) -> Any:
        """A MoE run's expert load (runstore/moe.py)."""
        return moe_summary(self.conn(), run_id, step)

    def conn(self) -> StoreConnection:
        """This thread's connection: for the run store's own modules (outside it, a kind's reads)."""
        c = getattr(self._local, "conn", None)
        if c is None or getattr(c, "closed", False):
            c = self._local.conn = self.backend.connect(readonly=True)
        return c
