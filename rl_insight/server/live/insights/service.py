"""Insight metrics for live runs, recomputed in the background and exposed on /metrics.

Every `interval_s` a round (`InsightRounds.run`, live/insights/rounds.py) summarizes the run store's newly completed
steps and computes the last `window_s` of each live run. `InsightService` runs the rounds in a process of their own
(live/insights/process.py, the default) or on its thread, hands the statistics to the writer and keeps the latest
round's families already in Prometheus' text format (rendered where the round ran): /metrics only appends
those bytes, so a scrape costs the ingest loop no Python per lane.

Invariants: one round at a time; a run's failure costs only that run's insights; a failed round leaves none.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from ....errors import ConfigError
from ...config import INSIGHTS_WORKERS
from ...runstore.reader import RunStoreReader
from ...workers.batch_worker import Periodic
from .rounds import InsightRounds

if TYPE_CHECKING:
    from .process import InsightProcess

log = logging.getLogger("rl_insight.server.insights")


class InsightHealth(TypedDict):
    """/healthz's word on the insight rounds: where they run, how many succeeded and failed, the last one (when it
    ended, how long it took, why it failed), and how often the child process was started (None in process)."""

    worker: str
    rounds: int
    failed_rounds: int
    last_round_at: float | None
    last_round_s: float | None
    last_error: str | None
    process_starts: int | None


class InsightService:
    """Refreshes the insights every `interval_s` (on the fleet's lease holder only) and exposes the latest on /metrics.

    The rounds run where `worker` says: "process" (the server's default, live/insights/process.py: a round is ~1 s of
    Python at a thousand clients, which in this process would hold the ingest loop's GIL) or "thread" (here, on the
    refresh thread). The per-step statistics a round computed are handed to `writer` here; `on_refresh` callbacks get
    its insights; `health()` says how the last round went (/healthz). A round that fails leaves no insights (none
    rather than stale ones) until the next succeeds."""

    def __init__(self, reader: RunStoreReader, *, window_s: float, live_window_s: float, step_metric: str,
                 version_metric: str, interval_s: float = 15.0, writer: Any = None,
                 stalled_min_s: float = 60.0, worker: str = "thread") -> None:
        options: dict[str, Any] = {"window_s": window_s, "live_window_s": live_window_s, "step_metric": step_metric,
                                   "version_metric": version_metric, "summarize": writer is not None,
                                   "stalled_min_s": stalled_min_s}
        self._rounds: InsightRounds | InsightProcess
        if worker == "process":
            from .process import InsightProcess

            self._rounds = InsightProcess(reader.location, options)
        elif worker == "thread":
            self._rounds = InsightRounds(reader, **options)
        else:
            raise ConfigError(f"insights_worker {worker!r} is not one of {', '.join(INSIGHTS_WORKERS)}")
        self._writer = writer  # where per-step statistics are stored
        self._worker = worker
        self._rounds_done = self._rounds_failed = 0
        self._last_round: tuple[float, float, str | None] | None = None  # (unix end, seconds, error)
        self._lock = threading.Lock()
        self._exposition = b""  # the latest round's families (render_insights): each scrape only copies them
        self.failures: dict[int, str] = {}  # run id -> last error (kept for diagnosis)
        self.on_refresh: list[Any] = []  # callbacks taking {(project, experiment): summary} (live exporters)
        self.lead: Any = lambda: True  # () -> whether this server does the fleet's background work
        self._refresher = Periodic("insights", interval_s, self.refresh)  # a failed round is logged; the next comes

    def start(self) -> None:
        self._refresher.start()

    def stop(self) -> None:
        self._refresher.stop()
        self._rounds.close()

    def refresh(self) -> None:
        if not self.lead():  # several servers on one store: the lease holder summarizes and exposes (once)
            with self._lock:
                self._exposition = b""
            return
        began = time.monotonic()
        try:
            result = self._rounds.run()
        except Exception as exc:
            with self._lock:
                self._exposition = b""
                self._rounds_failed += 1
                self._last_round = (time.time(), time.monotonic() - began, f"{type(exc).__name__}: {exc}")
            log.warning("insight refresh failed: %s", exc)
            return
        if self._writer is not None:
            for rows, blocks in result.step_stats:
                self._writer.put_step_stats(rows, blocks)
        self.failures.update(result.failures)
        with self._lock:
            self._exposition = result.exposition
            self._rounds_done += 1
            self._last_round = (time.time(), time.monotonic() - began, None)
        for callback in self.on_refresh:
            try:
                callback(result.latest)
            except Exception as exc:  # an exporter never stops the insights
                log.warning("insight callback failed: %s", exc)

    def health(self) -> InsightHealth:
        """Where the rounds run, how many succeeded and failed, and the last one: when it ended, how long it took
        (the child's CPU priority is lower: on a busy machine it takes longer), why it failed."""
        with self._lock:
            last = self._last_round
            return {"worker": self._worker, "rounds": self._rounds_done, "failed_rounds": self._rounds_failed,
                    "last_round_at": None if last is None else round(last[0], 3),
                    "last_round_s": None if last is None else round(last[1], 3),
                    "last_error": None if last is None else last[2],
                    "process_starts": None if isinstance(self._rounds, InsightRounds) else self._rounds.starts}

    def exposition(self) -> bytes:
        """The latest round's insight families in Prometheus' text format (render_insights), for /metrics."""
        with self._lock:
            return self._exposition
