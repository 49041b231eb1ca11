"""The running totals of OTLP delta points: an exporter with delta temporality sends what changed in each window
(`start_time_unix_nano`, `time_unix_nano`]; the store and /metrics expect the cumulative value, so the totals are
kept here, per run and series.

Invariants:
* **Once per window.** A point is added once: a window already added to its series (the same start and end, what
  an exporter resends after a 503 or a timeout, whether or not the first copy was committed) returns the total as
  it was after that window instead of adding it again; the resent sample then repeats the first one's value and
  time, which the store keeps once.
* **Bounded per run, never at another run's cost.** Each run holds at most `max_series_per_run` series and
  `max_bytes_per_run` bytes (names, labels and buckets counted); past either, a new series of that run is refused
  and counted (`delta_run_full`). All runs together hold at most `max_bytes`; past it, runs idle for `idle_s` are
  forgotten (their exporters are gone) and otherwise the new series is refused (`delta_totals_full`). Nothing ever
  clears the totals of a run that is still sending.
* Callers validate a point (series and value) before adding it (otlp_metrics.py): what would be refused downstream
  never takes memory here.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

WINDOWS_KEPT = 8  # windows remembered per series (a resend comes right after its first copy)
SERIES_OVERHEAD_BYTES = 400  # a series' dict entry, key tuple and total, beside its strings


class DeltaRefused(Exception):
    """The run's (or the whole ledger's) bound is reached: this new series is not kept. `reason` is the count key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Series:
    __slots__ = ("total", "windows")

    def __init__(self, total: Any) -> None:
        self.total = total
        self.windows: dict[tuple[int, int], Any] = {}  # window -> the total after it (insertion order: oldest first)


class _Run:
    __slots__ = ("series", "bytes", "used")

    def __init__(self) -> None:
        self.series: dict[tuple, _Series] = {}
        self.bytes = 0
        self.used = 0.0  # monotonic time of the last point added


def _cost(key: tuple, value: Any) -> int:
    """Bytes a series takes here, estimated from its strings and buckets."""
    strings = sum(len(str(part)) for part in key[:-1]) + sum(len(k) + len(v) for k, v in key[-1])
    buckets = len(value[2]) * 8 if isinstance(value, list) else 0
    return SERIES_OVERHEAD_BYTES + strings + buckets + WINDOWS_KEPT * 64


def _add(old: Any, delta: Any) -> Any:
    if not isinstance(delta, list):
        return old + delta
    if len(old[2]) != len(delta[2]):
        return delta  # the bounds changed: a new series start
    return [old[0] + delta[0], old[1] + delta[1], [a + b for a, b in zip(old[2], delta[2])]]


class DeltaTotals:
    def __init__(self, *, max_series_per_run: int = 10_000, max_bytes_per_run: int = 8 * 2**20,
                 max_bytes: int = 128 * 2**20, idle_s: float = 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_series_per_run = max_series_per_run
        self.max_bytes_per_run = max_bytes_per_run
        self.max_bytes = max_bytes
        self.idle_s = idle_s
        self.clock = clock
        self._runs: dict[tuple[str, str], _Run] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def add(self, run: tuple[str, str], key: tuple, window: tuple[int, int], delta: Any) -> Any:
        """The series' total with `delta` (a number, or a histogram [sum, count, per-bucket counts]) added, once per
        `window` (a window of (0, 0) says nothing and is always added). `key` ends with the labels as sorted pairs.
        DeltaRefused when a new series does not fit."""
        with self._lock:
            now = self.clock()
            state = self._runs.get(run)
            series = state.series.get(key) if state is not None else None
            if state is None or series is None:
                state = self._admit(run, key, delta, now)
                series = state.series[key] = _Series(delta)
                total = delta
            else:
                if window != (0, 0) and window in series.windows:
                    return series.windows[window]  # a resend: added already
                total = series.total = _add(series.total, delta)
            state.used = now
            if window != (0, 0):
                series.windows[window] = total
                if len(series.windows) > WINDOWS_KEPT:
                    del series.windows[next(iter(series.windows))]
            return total

    def _admit(self, run: tuple[str, str], key: tuple, delta: Any, now: float) -> _Run:
        cost = _cost(key, delta)
        state = self._runs.get(run)
        if state is not None and (len(state.series) >= self.max_series_per_run
                                  or state.bytes + cost > self.max_bytes_per_run):
            raise DeltaRefused("delta_run_full")
        if self._bytes + cost > self.max_bytes:
            self._forget_idle(now, keep=run)
            if self._bytes + cost > self.max_bytes:
                raise DeltaRefused("delta_totals_full")
        if state is None:
            state = self._runs[run] = _Run()
        state.bytes += cost
        self._bytes += cost
        return state

    def _forget_idle(self, now: float, keep: tuple[str, str]) -> None:
        for run, state in list(self._runs.items()):
            if run != keep and now - state.used > self.idle_s:
                self._bytes -= state.bytes
                del self._runs[run]

    def forget(self, runs: set[tuple[str, str]]) -> None:
        """Runs deleted from the store: their totals go too."""
        with self._lock:
            for run in runs:
                state = self._runs.pop(run, None)
                if state is not None:
                    self._bytes -= state.bytes

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"runs": len(self._runs), "series": sum(len(s.series) for s in self._runs.values()),
                    "bytes": self._bytes}
