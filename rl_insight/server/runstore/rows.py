"""What the writer is handed and how it writes it: the row of a metric sample, the writer's counters, and the
statements that make every write idempotent (a resent sample or span is stored once). Upserts name their conflict
target, so the same text runs on SQLite and PostgreSQL (dialect.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SampleRow:
    project: str
    experiment_name: str
    name: str
    kind: str
    labels: str  # JSON of the labels other than project / experiment_name
    step: float | None
    ts: float
    value: float  # a gauge's value; a counter's: the sending process's own running value (summed by the writer)
    client: str = ""  # a counter's sending process (runstore/metrics/series_parts.py); "" for a gauge
    logged: str = ""  # the name as the job logged it (`actor/entropy`) when it differs from `name` (`actor_entropy`)

    def __reduce__(self) -> tuple:
        # pickled as the constructor's arguments: rows cross to the writer process by the thousand a second, and a
        # dataclass's default (its __dict__) took ~2x as long to pickle and unpickle (bench/RESULTS.md, issue 24)
        return SampleRow, (self.project, self.experiment_name, self.name, self.kind, self.labels, self.step, self.ts,
                           self.value, self.client, self.logged)


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
    conflicts_retried: int = 0  # batches written again after losing a conflict with another server's (PostgreSQL)
    by_reason: dict[str, int] = field(default_factory=dict)


# a resent sample (a lost answer, a restart) is the same series and time: stored once
INSERT_SAMPLE = "INSERT INTO samples (series_id, step, ts, value) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING"
UPSERT_STEP_STAT = ("INSERT INTO step_stats (run_id, step, start_ns, end_ns, lane, name, value) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, step, lane, name) DO UPDATE SET "
                    "start_ns = excluded.start_ns, end_ns = excluded.end_ns, value = excluded.value")
# a late start never reopens a span whose end is already stored
INSERT_START = (
    "INSERT INTO spans (run_id, id, trace_id, parent_id, name, lane, kind, start_ns, attributes) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
# a span closed by the server (its client went silent) never overwrites an end its client did send
CLOSE_CUT_SHORT = (
    "INSERT INTO spans (run_id, id, trace_id, parent_id, name, lane, kind, start_ns, end_ns, attributes) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, id) DO UPDATE SET "
    "end_ns = excluded.end_ns, attributes = excluded.attributes WHERE spans.end_ns IS NULL"
)
UPSERT_END = ("INSERT INTO spans (run_id, id, trace_id, parent_id, name, lane, kind, start_ns, end_ns, attributes) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, id) DO UPDATE SET "
               "end_ns = excluded.end_ns, start_ns = excluded.start_ns, attributes = excluded.attributes")
# a step or block summed up again replaces its mark ({kind}: 'step' or 'block')
UPSERT_SUMMARY = ("INSERT INTO step_summaries VALUES (?, '{kind}', ?, ?, ?) ON CONFLICT (run_id, kind, first_step) "
                  "DO UPDATE SET start_ns = excluded.start_ns, end_ns = excluded.end_ns")
