"""The trajectories: a run's steps that have some, one step's page and statistics, one trajectory in detail."""

from __future__ import annotations

from ..bound import Bound, StoreKind
from . import queries as tq


class TrajectoryReads(StoreKind):
    steps = Bound(tq.steps)
    page = Bound(tq.page)
    stats = Bound(tq.stats)
    detail = Bound(tq.detail)
