"""A run's stragglers from the run store: the fail-slow radar (semantics/stragglers.py) over the spans of its last
`RADAR_STEPS` steps, one step at a time, oldest first (each step's spans are read alone: a step of 4,096 lanes is
about 16,000 spans)."""

from __future__ import annotations

from ....semantics import stragglers
from ....semantics.findings import Finding
from .. import queries as q
from ..backend import StoreConnection

RADAR_STEPS = 200


def run_stragglers(conn: StoreConnection, run_id: int, windows: list[tuple[int, int, int]]) -> list[Finding]:
    """The straggler findings of the run's last RADAR_STEPS steps (`windows`: its step windows, oldest first)."""
    radar = stragglers.Radar()
    for step, a, b in windows[-RADAR_STEPS:]:
        radar.step(step, q.spans_in(conn, run_id, a, b, attributes=False), a, b)
    return [f.as_json() for f in radar.findings]  # type: ignore[misc]
