"""Spans, the writer side (`reads.py` is the reader's): a batch's starts and ends into the open transaction, with
the timeline's level-of-detail summary marked where it changed (`span_lod.py`).

Invariants: a span is one row by (run, id): its start is stored once, its end completes or replaces it (a resend
writes the same row); a span the client cut short (`cut_short`, its process gone) closes an open start and never
overwrites an end already stored; every end marks the summary's window it falls in, a moved span both windows.
"""

from __future__ import annotations

from typing import Sequence

from ....protocol import SpanRecord
from ..backend import StoreConnection
from ..rows import CLOSE_CUT_SHORT, INSERT_START, UPSERT_END
from ..transaction_rows import TransactionRows
from . import span_lod


def cut_short(s: SpanRecord) -> bool:
    return s.attributes.get("cut_short") is True


def write_batch(c: StoreConnection, starts: Sequence[SpanRecord], ends: Sequence[SpanRecord],
                rows: TransactionRows) -> None:
    """A batch's starts and ends, a statement for each sort (the batch's transaction is the writer's)."""
    start_rows = [rows.span(s) for s in starts]
    end_rows: list[tuple] = []
    cut_rows: list[tuple] = []
    for s in ends:
        (cut_rows if cut_short(s) else end_rows).append(rows.span(s))
    if start_rows:
        c.insert_rows(INSERT_START, start_rows)
    if end_rows:
        span_lod.upsert_ends(c, end_rows)
    if cut_rows:
        c.insert_rows(CLOSE_CUT_SHORT, cut_rows)
    span_lod.mark(c, [(r[0], r[5], r[7]) for r in end_rows + cut_rows])


def write_one(c: StoreConnection, span: SpanRecord, ended: bool, rows: TransactionRows) -> None:
    """One start or end (a batch written item by item after one failed whole)."""
    stmt = INSERT_START if not ended else CLOSE_CUT_SHORT if cut_short(span) else UPSERT_END
    row = rows.span(span)
    if stmt is UPSERT_END:
        span_lod.mark_moved(c, [(row[0], row[1], row[7])])
    c.execute(stmt, row)
    if ended:
        span_lod.mark(c, [(row[0], row[5], row[7])])
