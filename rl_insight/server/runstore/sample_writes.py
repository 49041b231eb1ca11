"""Samples, the writer side (`sample_reads.py` is the reader's): a batch's samples into the open transaction.

Invariants: a sample is stored once per series and time (a resend writes nothing); a counter's sample is stored as
its series' total across the processes that send it (`metrics/series_parts.py`), and one older than what its
process already said is not stored; each series' totals follow what was written (`metrics/series_totals.py`);
a step metric's samples mark their run's steps (`step_marks.py`: the step, stored once).
"""

from __future__ import annotations

from typing import Sequence

from . import step_marks as marks
from .backend import StoreConnection
from .metrics import series_parts, series_totals
from .rows import INSERT_SAMPLE, SampleRow
from .transaction_rows import TransactionRows


def write_batch(c: StoreConnection, samples: Sequence[SampleRow], rows: TransactionRows,
                step_names: frozenset[str] = frozenset()) -> None:
    """Every sample of a batch, in one statement (the batch's transaction is the writer's); the samples of a step
    metric (`step_names`, sanitized) mark their run's steps (step_marks.py)."""
    if not samples:
        return
    sample_rows = [rows.sample(s) for s in samples]
    series_parts.as_totals(c, list(samples), sample_rows)
    stored = c.insert_rows(INSERT_SAMPLE, sample_rows)
    series_totals.record(c, sample_rows, stored)
    stepping = [(rows.run_of(s), s.name, r[3], r[2]) for s, r in zip(samples, sample_rows) if s.name in step_names]
    if stepping:
        marks.record(c, stepping, all_stored=stored == len(sample_rows))


def write_one(c: StoreConnection, sample: SampleRow, rows: TransactionRows,
              step_names: frozenset[str] = frozenset()) -> bool:
    """One sample (a batch written item by item after one failed whole); False when it was not stored."""
    row = rows.sample(sample)
    if sample.client:  # a counter: stored as its series' total across processes
        total = series_parts.summed(c, [(row[0], sample.client, sample.ts, sample.value)])[0]
        if total is None:
            return False  # older than what its process already said
        row = (*row[:3], total)
    stored = c.execute(INSERT_SAMPLE, row).rowcount
    series_totals.record(c, [row], stored)
    if stored and sample.name in step_names:
        marks.record(c, [(rows.run_of(sample), sample.name, row[3], row[2])], all_stored=True)
    return True
