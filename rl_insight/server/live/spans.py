"""Span sinks: one interface, one fan-out, and the in-memory sink for open and recent spans.

Every span source (our ingest today; OTLP intake and profile uploads later) hands validated
`SpanRecord`s to a `SpanFanout`, which passes them to each sink. A sink must not block: the run
store and the OTLP forwarder only queue (bounded, drops counted by reason); the memory sink is
bounded by count *and* bytes. A sink that raises is counted and skipped; the others still get the spans.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from typing import Any, Callable, Protocol, Sequence

from ...protocol import SpanRecord

log = logging.getLogger("rl_insight.server.live.spans")


class SpanSink(Protocol):
    name: str

    def put(
        self, starts: Sequence[SpanRecord], ends: Sequence[SpanRecord], host: str, service: str | None = None
    ) -> None:
        """Take span starts and finished spans of one client (its host, its `server.namespace` as service
        name); return at once."""


class SpanFanout:
    def __init__(self, sinks: Sequence[SpanSink] = ()) -> None:
        self.sinks = list(sinks)
        self.errors: dict[str, int] = {}

    def put(
        self, starts: Sequence[SpanRecord], ends: Sequence[SpanRecord], host: str = "", service: str | None = None
    ) -> None:
        if not starts and not ends:
            return
        for sink in self.sinks:
            try:
                sink.put(starts, ends, host, service)
            except Exception as exc:  # one sink's bug never costs the others
                self.errors[sink.name] = self.errors.get(sink.name, 0) + len(starts) + len(ends)
                log.exception("span sink %s failed: %s", sink.name, exc)


class MemorySpanSink:
    """Open states and recently finished spans of all runs, for `/api/v1/spans/*`.

    Bounded by count and by an estimate of bytes (`SpanRecord.size`); past a bound the oldest entry
    is forgotten and counted in `evicted` (the run store keeps everything)."""

    name = "memory"

    def __init__(self, max_open: int = 100_000, max_recent: int = 10_000, max_bytes: int = 64 * 2**20) -> None:
        self._lock = threading.Lock()
        self._open: OrderedDict[str, SpanRecord] = OrderedDict()
        self._recent: deque[SpanRecord] = deque()
        self._max_open = max_open
        self._max_recent = max_recent
        self._max_bytes = max_bytes
        self._open_bytes = 0
        self._recent_bytes = 0
        self.finished_total = 0
        self.evicted: dict[str, int] = {}

    def put(
        self, starts: Sequence[SpanRecord], ends: Sequence[SpanRecord], host: str = "", service: str | None = None
    ) -> None:
        with self._lock:
            for s in starts:
                old = self._open.pop(s.id, None)
                if old is not None:
                    self._open_bytes -= old.size
                self._open[s.id] = s
                self._open_bytes += s.size
                while len(self._open) > self._max_open or self._open_bytes > self._max_bytes // 2:
                    _, gone = self._open.popitem(last=False)
                    self._open_bytes -= gone.size
                    self.evicted["open"] = self.evicted.get("open", 0) + 1
            for s in ends:
                old = self._open.pop(s.id, None)
                if old is not None:
                    self._open_bytes -= old.size
                self._recent.append(s)
                self._recent_bytes += s.size
                while len(self._recent) > self._max_recent or self._recent_bytes > self._max_bytes // 2:
                    gone = self._recent.popleft()
                    self._recent_bytes -= gone.size
                    self.evicted["recent"] = self.evicted.get("recent", 0) + 1
            self.finished_total += len(ends)

    def open_page(self, offset: int, limit: int,
                  visible: Callable[[str | None], bool] | None = None) -> tuple[list[dict[str, Any]], int]:
        """Open states, oldest first: one page, and the total (of the projects `visible` keeps, when given)."""
        with self._lock:
            if visible is None:
                total = len(self._open)
                page = [s for _, s in zip(range(offset + limit), self._open.values())][offset:]
            else:
                kept = [s for s in self._open.values() if visible(s.project or None)]
                total, page = len(kept), kept[offset:offset + limit]
        return [s.to_dict() for s in page], total

    def recent(self, limit: int, visible: Callable[[str | None], bool] | None = None) -> list[dict[str, Any]]:
        """The latest `limit` finished spans, oldest first (of the projects `visible` keeps, when given)."""
        with self._lock:
            if visible is None:
                n = len(self._recent)
                items = [self._recent[i] for i in range(max(0, n - limit), n)]
            else:
                items = [s for s in self._recent if visible(s.project or None)][-limit:]
        return [s.to_dict() for s in items]

    def open_count(self) -> int:
        with self._lock:
            return len(self._open)


class RunStoreSpanSink:
    """Adapter: the run store's batching writer as a span sink."""

    name = "runstore"

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    def put(
        self, starts: Sequence[SpanRecord], ends: Sequence[SpanRecord], host: str = "", service: str | None = None
    ) -> None:
        self._writer.put_spans(list(starts), list(ends))


class OtlpSpanSink:
    """Adapter: finished spans to the OTLP forwarder (Tempo stores completed spans only)."""

    name = "otlp"

    def __init__(self, forwarder: Any) -> None:
        self.forwarder = forwarder

    def put(
        self, starts: Sequence[SpanRecord], ends: Sequence[SpanRecord], host: str = "", service: str | None = None
    ) -> None:
        if ends:
            self.forwarder.add(ends, host, service)
