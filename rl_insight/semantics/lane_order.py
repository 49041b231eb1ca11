"""The one order of lanes (`replica_2` before `replica_10`): the server's queries, the offline renderers and
Perfetto export sort with `lane_sort_key`; the UI's `static/lanes.js` implements the same order (a test sorts
the same names in both and compares)."""

from __future__ import annotations

import re

_LANE = re.compile(r"^(.+?)(?:[_-](\d+))?$", re.S)


def lane_sort_key(lane: str) -> tuple[str, int, str]:
    """By prefix, then by number (none first), then by the raw name; code points, not locale."""
    m = _LANE.match(lane or "")
    if not m:
        return (lane or "", -1, lane or "")
    return (m.group(1), int(m.group(2)) if m.group(2) else -1, lane)
