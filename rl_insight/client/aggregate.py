"""Cumulative counters and histograms, kept per series *outside* the queue.

A dropped or resent batch therefore never loses or double-counts an increment, and a restarted
server gets the totals back (the exporter resends every series when the server's boot id changes).
The lock is held only for dict updates.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from itertools import accumulate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


def labels_key(labels: dict) -> tuple:
    return tuple(sorted(labels.items())) if labels else ()


class Aggregates:
    def __init__(
        self, max_series: int, buckets_for: Callable[[str], tuple[float, ...]], drop: Callable[[str], None]
    ) -> None:
        self._max = max_series
        self._buckets_for = buckets_for
        self._drop = drop
        self._lock = threading.Lock()
        self._counters: dict[tuple, list] = {}  # key -> [total, ts, step, doc, labels]
        self._hists: dict[tuple, list] = {}  # key -> [counts, sum, count, ts, step, doc, labels, bounds]
        self._dirty_counters: set[tuple] = set()
        self._dirty_hists: set[tuple] = set()

    def add(self, name: str, amount: float, doc: str, labels: dict, step: Any) -> None:
        key = (name, labels_key(labels))
        now = time.time()
        with self._lock:
            s = self._counters.get(key)
            if s is None:
                if len(self._counters) >= self._max:
                    self._drop("series_limit")
                    return
                s = self._counters[key] = [0.0, now, step, doc, labels]
            s[0] += amount
            s[1] = now
            s[2] = step
            self._dirty_counters.add(key)

    def observe(self, name: str, value: float, doc: str, labels: dict, step: Any) -> None:
        key = (name, labels_key(labels))
        now = time.time()
        with self._lock:
            s = self._hists.get(key)
            if s is None:
                if len(self._hists) >= self._max:
                    self._drop("series_limit")
                    return
                bounds = self._buckets_for(name)
                s = self._hists[key] = [[0] * (len(bounds) + 1), 0.0, 0, now, step, doc, labels, bounds]
            s[0][bisect_left(s[7], value)] += 1
            s[1] += value
            s[2] += 1
            s[3] = now
            s[4] = step
            self._dirty_hists.add(key)

    def take(self, everything: bool) -> tuple[list, list, int]:
        """Copies of the series changed since the last call (all of them when `everything`):
        counters as (name, labels_key, total, ts, step, doc, labels); histograms as
        (name, labels_key, sum, count, cumulative, ts, step, doc, labels, bounds); and how many of them changed."""
        with self._lock:
            changed = len(self._dirty_counters) + len(self._dirty_hists)
            dirty_c = set(self._counters) if everything else self._dirty_counters
            dirty_h = set(self._hists) if everything else self._dirty_hists
            self._dirty_counters, self._dirty_hists = set(), set()
            counters = [(k, self._counters[k][:]) for k in dirty_c if k in self._counters]
            hists = [(k, [self._hists[k][0][:]] + self._hists[k][1:]) for k in dirty_h if k in self._hists]
        out_c = [(k[0], k[1], c[0], c[1], c[2], c[3], c[4]) for k, c in counters]
        out_h = [(k[0], k[1], h[1], h[2], list(accumulate(h[0])), h[3], h[4], h[5], h[6], h[7]) for k, h in hists]
        return out_c, out_h, changed
