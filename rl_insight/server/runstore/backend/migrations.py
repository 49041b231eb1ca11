"""The run store's one migration chain: numbered steps from each released schema version to the next, each with
what it does on SQLite and on PostgreSQL, applied by both backends in order.

How a store is brought to SCHEMA_VERSION (`upgrade`): the tables of today's DDL that it lacks are created (a step's
new tables come from there), then every step after its version runs in order, then today's indexes that it lacks are
created (an index may cover a column a step added). A fresh store (version 0) is created from the DDL instead.

Invariants: the whole upgrade is one transaction with the new version number (SQLite: BEGIN IMMEDIATE and
`user_version`; PostgreSQL: under an advisory lock and `rl_insight_meta`), so a store is at one version or the next,
never between, and two servers starting at once upgrade it once. Steps add and backfill, never rewrite or drop what
a user stored (the copies step 4 removes were resends). A column is added only where missing, so a store that an
older rl-insight left half-migrated (its SQLite upgrade was not one transaction) goes on. PostgreSQL stores start at
version 5; the steps before do not apply to them. Tested from every released version's schema on both engines
(tests/unit/server/runstore/backend/schemas/, written by `python -m tools.store_schemas`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Union

from .schema import (
    LOD_BACKFILL,
    SAMPLES_ONCE,
    SCHEMA_VERSION,
    SERIES_PARTS_RECOUNT,
    SERIES_TOTALS_RECOUNT,
    STEP_MARKS_BACKFILL,
)

Engine = Literal["sqlite", "postgresql"]
FIRST_POSTGRES_VERSION = 5  # the first release with the PostgreSQL store


@dataclass(frozen=True)
class AddColumn:
    """Add `table.column` of `type` (SQLite's type name) where it is missing."""

    table: str
    column: str
    type: str


@dataclass(frozen=True)
class Run:
    """A statement in SQLite's dialect (PostgreSQL's types by postgres.py); `postgres` where PostgreSQL needs other
    text, and None on either side where that engine has nothing to do."""

    sqlite: str | None
    postgres: str | None | Literal["same"] = "same"

    def text(self, engine: Engine) -> str | None:
        if engine == "sqlite" or self.postgres == "same":
            return self.sqlite
        return self.postgres


Change = Union[AddColumn, Run]


@dataclass(frozen=True)
class Step:
    version: int  # what the store is at after it
    what: str
    changes: tuple[Change, ...] = ()


# a resend stored twice before version 4 (on PostgreSQL, before 9): the later copy goes
_SAMPLE_COPIES_SQLITE = ("DELETE FROM samples WHERE rowid IN (SELECT s.rowid FROM samples s WHERE EXISTS (SELECT 1 "
                         "FROM samples t WHERE t.series_id = s.series_id AND t.ts = s.ts AND t.rowid < s.rowid))")
_SAMPLE_COPIES_POSTGRES = ("DELETE FROM samples a USING samples b WHERE a.series_id = b.series_id AND a.ts = b.ts "
                           "AND a.ctid > b.ctid")

STEPS: tuple[Step, ...] = (
    Step(2, "runs.config and runs.tags (init(config=...)), runs.max_span_ns (window queries are bounded by each run's "
            "longest span), step_stats, step_blocks, step_summaries; the timeline scan reads a covering index",
         (AddColumn("runs", "config", "TEXT"), AddColumn("runs", "tags", "TEXT"),
          AddColumn("runs", "max_span_ns", "INTEGER"),
          Run("UPDATE runs SET max_span_ns = (SELECT max(end_ns - start_ns) FROM spans WHERE run_id = runs.id)"),
          Run("DROP INDEX IF EXISTS spans_by_lane"))),
    Step(3, "trajectories, turns and llm_requests (agent-loop trajectories and their LLM requests)"),
    Step(4, "a sample once per series and time: the copies of resends go, then a unique index keeps it so",
         (Run(_SAMPLE_COPIES_SQLITE, None), Run(SAMPLES_ONCE, None), Run("DROP INDEX IF EXISTS samples_by_ts", None))),
    Step(5, "runs.end_state (a clean finish, or lost: the process logging its steps stopped reporting)",
         (AddColumn("runs", "end_state", "TEXT"),)),
    Step(6, "fleet_clients (several ingest servers on one store: which server each client process reports to)"),
    Step(7, "fleet_records (profile requests and stack snapshots a fleet shares); fleet_clients.process",
         (AddColumn("fleet_clients", "process", "TEXT"),)),
    Step(8, "span_lod (the timeline's level-of-detail summary); the spans already stored are marked to summarize",
         (Run(LOD_BACKFILL),)),
    Step(9, "series.n_samples and series.last_step, counted from the samples; on PostgreSQL also version 4's one "
            "sample per series and time, which its stores lacked",
         (Run(None, _SAMPLE_COPIES_POSTGRES), Run(None, SAMPLES_ONCE),
          AddColumn("series", "n_samples", "INTEGER NOT NULL DEFAULT 0"), AddColumn("series", "last_step", "REAL"),
          Run(SERIES_TOTALS_RECOUNT))),
    Step(10, "series_parts and series.total (a counter's value per sending process, summed)",
         (AddColumn("series", "total", "REAL"), Run(SERIES_PARTS_RECOUNT))),
    Step(11, "series.logged_name (the name as the job logged it, where it differs from the stored one)",
         (AddColumn("series", "logged_name", "TEXT"),)),
    Step(12, "step_marks (the step as one stored fact), marked from the stored samples of training/global_step",
         (Run(*STEP_MARKS_BACKFILL),)),
)
assert STEPS[-1].version == SCHEMA_VERSION and [s.version for s in STEPS] == list(range(2, SCHEMA_VERSION + 1))


def pending(version: int, engine: Engine) -> list[Step]:
    """The steps a store of `engine` at `version` (> 0) runs, in order."""
    first = version if engine == "sqlite" else max(version, FIRST_POSTGRES_VERSION)
    return [s for s in STEPS if s.version > first]


def apply(step: Step, engine: Engine, execute: Callable[[str], object],
          has_column: Callable[[str, str], bool]) -> None:
    """Run `step`'s changes for `engine` through `execute` (the backend's, inside its upgrade transaction)."""
    for change in step.changes:
        if isinstance(change, AddColumn):
            if not has_column(change.table, change.column):
                execute(f"ALTER TABLE {change.table} ADD COLUMN {change.column} {change.type}")
        else:
            text = change.text(engine)
            if text:
                execute(text)
