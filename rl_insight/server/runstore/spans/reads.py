"""The spans: a run's lanes, one span, the timeline's window (its default bounds from the run's own, spans far
before the run left out and counted), the Perfetto export."""

from __future__ import annotations

import time

from .. import queries as q
from ..backend import StoreConnection
from ..bound import Bound, StoreKind
from ..results import LeftOut, SpanWindow
from . import timeline

DEFAULT_WINDOW_SLACK_S = 3600.0  # spans this far before the run's (plausible) start still open its default window


def window(conn: StoreConnection, run_id: int, *, from_ns: int | None, to_ns: int | None, resolution_ns: int,
           px: int, lane_names: list[str] | None, limit: int, live_window_s: float) -> SpanWindow:
    """Spans in a time window (the run's own when not given); same-name spans shorter than the resolution (from the
    view's width `px` when not given) merged, with a count."""
    left_out: LeftOut | None = None
    if from_ns is None or to_ns is None:
        # the run's own bounds (kept up to date by the writer) instead of a scan over every span; spans whose clocks
        # say they began long before the run did (a node at 1970) are left out of the default window, and the
        # answer says how many
        run = q.get_run(conn, run_id, live_window_s)
        floor = int((run["first_seen"] - DEFAULT_WINDOW_SLACK_S) * 1e9)
        first, last = q.span_bounds(conn, run_id, floor)
        if first is None:  # nothing after the floor (spans imported from the past): the data's own start
            first, last = q.span_bounds(conn, run_id)
        elif from_ns is None:
            early = q.spans_before(conn, run_id, floor)
            if early:
                left_out = {"spans": early, "before_ns": floor,
                            "why": f"{early}{'+' if early >= 100_000 else ''} spans start more than "
                                   f"{DEFAULT_WINDOW_SLACK_S / 3600:.0f} h before the run began (a client clock far "
                                   "behind); ask for them with from_ns"}
        now = time.time_ns()
        end = max(int(run["last_seen"] * 1e9), last or 0, now if q.has_open_spans(conn, run_id) else 0) + 1
        from_ns = from_ns if from_ns is not None else min(int(run["first_seen"] * 1e9), first or end - 1)
        to_ns = to_ns if to_ns is not None else end
    if px and not resolution_ns:
        resolution_ns = max(0, (to_ns - from_ns) // px)
    body = timeline.spans_window(conn, run_id, from_ns=from_ns, to_ns=to_ns, resolution_ns=resolution_ns,
                                 lane_names=lane_names, limit=limit)
    if left_out is not None:
        body["left_out"] = left_out
    return body


class SpanReads(StoreKind):
    lanes = Bound(q.lanes)
    detail = Bound(q.span_detail)
    window = Bound(window)
    chrome_trace = Bound(q.chrome_trace_stream)
