"""The samples: a run's metric names, one series, the same series of several runs, the CSV export."""

from __future__ import annotations

from . import queries as q
from .bound import Bound, StoreKind


class SampleReads(StoreKind):
    names = Bound(q.metric_names)
    series = Bound(q.series)
    compare = Bound(q.compare)
    csv = Bound(q.csv_export)
