"""One bounded batch worker and one periodic service: the background threads of the server, written once.

`BatchWorker` is the shape of OpenTelemetry's batch processor: producers `put` items into a bounded
queue and return at once; one thread takes them out in batches and hands each batch to `export`.
Its invariants, for every user (the run store writer, the live exporters, the OTLP forwarder):

- `put` never blocks and never raises. Past the bound (items by weight, and optionally bytes) an item is
  refused (`drop_new`) or the oldest queued items make room (`drop_oldest`); either way the loss is
  counted in `dropped[reason]`, and `put` says whether the item was kept.
- `export` runs on the worker thread only, one batch at a time, in queue order. What it raises is
  counted (`export_error`) and logged; the thread keeps going. An export that returns False asks to
  back off: the rest of the queue waits for the next interval (a receiver that is down is not hammered).
- `flush(timeout)` returns True once everything put before the call was exported; `stop` flushes,
  then ends the thread. Nothing here sleeps while there is work: a batch starts as soon as the queue
  holds `wake_at` weight, else every `interval_s`. The one exception is `min_gap_s`: a batch starts
  no sooner than that after the previous one started (unless `wake_at` weight waits or the worker is
  stopping), so a stream of small wakes (one per waiting answer) becomes fewer, larger exports.

`Periodic` runs a function every `interval_s` on its own thread until stopped; an exception is logged
and the next tick still comes. Stdlib only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable, Generic, Literal, TypeVar

log = logging.getLogger("rl_insight.worker")

T = TypeVar("T")
Overflow = Literal["drop_new", "drop_oldest"]


class BatchWorker(Generic[T]):
    def __init__(self, name: str, export: Callable[[list[T]], bool | None], *, max_weight: int, max_batch_weight: int,
                 interval_s: float = 0.2, weight: Callable[[T], int] = lambda _item: 1,
                 max_bytes: int | None = None, size: Callable[[T], int] = lambda _item: 0,
                 overflow: Overflow = "drop_new", wake_at: int | None = None,
                 on_idle: Callable[[], None] | None = None, min_gap_s: float = 0.0) -> None:
        self.name = name
        self.dropped: dict[str, int] = {}
        self._export = export
        self._max_weight = max_weight
        self._max_batch = max(1, max_batch_weight)
        self._max_bytes = max_bytes
        self._weight = weight
        self._size = size
        self._overflow = overflow
        self._wake_at = wake_at if wake_at is not None else max_batch_weight
        self._interval = interval_s
        self._min_gap = min_gap_s
        self._last_export = float("-inf")  # monotonic start of the latest export
        self._on_idle = on_idle  # called on the worker thread after each round (periodic upkeep beside the work)
        self._queue: deque[tuple[T, int, int]] = deque()  # (item, weight, bytes)
        self._weight_queued = 0
        self._bytes_queued = 0
        self._put_count = 0  # items put so far: flush waits for this many to be done
        self._done_count = 0
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"rl-insight-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ producers
    @property
    def queued_weight(self) -> int:
        return self._weight_queued

    def __len__(self) -> int:
        return len(self._queue)

    def drop(self, reason: str, n: int) -> None:
        """Count `n` items lost for `reason` (also for losses the export function sees itself)."""
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    def put(self, item: T) -> bool:
        """Queue one item; False when it was refused (counted as `queue_full`)."""
        w, b = self._weight(item), self._size(item)
        with self._lock:
            self._put_count += 1
            if not self._make_room(w, b):
                self._done_count += 1  # refused: nothing left to wait for
                self.drop("queue_full", w)
                return False
            self._queue.append((item, w, b))
            self._weight_queued += w
            self._bytes_queued += b
            wake = self._weight_queued >= self._wake_at
        if wake:
            self._wake.set()
        return True

    def _make_room(self, w: int, b: int) -> bool:
        def full() -> bool:
            return self._weight_queued + w > self._max_weight or \
                (self._max_bytes is not None and self._bytes_queued + b > self._max_bytes)

        if not full():
            return True
        too_big = w > self._max_weight or (self._max_bytes is not None and b > self._max_bytes)
        if self._overflow == "drop_new" or too_big:  # an item past the whole bound never empties the queue
            return False
        while self._queue and full():  # drop_oldest: the newest data is what an operator is looking at
            _, gone_w, gone_b = self._queue.popleft()
            self._weight_queued -= gone_w
            self._bytes_queued -= gone_b
            self._done_count += 1
            self.drop("queue_full", gone_w)
        return not full()

    def wake(self) -> None:
        """Start a round now instead of at the next interval (someone waits for what is queued)."""
        self._wake.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """True once everything put before this call was exported (or counted as lost)."""
        with self._lock:
            target = self._put_count
        self._wake.set()
        with self._done:
            return self._done.wait_for(lambda: self._done_count >= target, timeout)

    def stop(self, timeout: float = 10.0) -> bool:
        flushed = self.flush(timeout)
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)
        return flushed

    # ------------------------------------------------------------------ the worker thread
    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval)
            self._wake.clear()
            self._drain()
            if self._on_idle is not None:
                try:
                    self._on_idle()
                except Exception:  # upkeep failing never stops the work
                    log.exception("%s: periodic upkeep failed", self.name)
        self._drain()

    def _space_out(self) -> None:
        """Wait out what is left of `min_gap_s` since the previous export started, so what queues meanwhile
        joins this batch; a backlog of `wake_at` weight or a stop does not wait."""
        if self._min_gap <= 0:
            return
        left = self._last_export + self._min_gap - time.monotonic()
        while left > 0 and not self._stopping and self._weight_queued < self._wake_at:
            time.sleep(min(left, 0.002))  # short naps: a backlog reaching wake_at meanwhile starts at once
            left = self._last_export + self._min_gap - time.monotonic()

    def _drain(self) -> None:
        while True:
            if not self._queue:
                return
            self._space_out()
            with self._lock:
                if not self._queue:
                    return
                batch: list[T] = []
                weight = 0
                while self._queue and (not batch or weight + self._queue[0][1] <= self._max_batch):
                    item, w, b = self._queue.popleft()
                    batch.append(item)
                    weight += w
                    self._weight_queued -= w
                    self._bytes_queued -= b
            back_off = False
            self._last_export = time.monotonic()
            try:
                back_off = self._export(batch) is False
            except Exception as exc:  # one bad batch never ends the worker
                self.drop("export_error", weight)
                log.exception("%s: a batch of %d failed: %s", self.name, len(batch), exc)
            with self._done:
                self._done_count += len(batch)
                self._done.notify_all()
            if back_off and not self._stopping:
                return


class Periodic:
    """`fn` every `interval_s` on its own daemon thread, from `start()` until `stop()`; `wake()` runs it at once."""

    def __init__(self, name: str, interval_s: float, fn: Callable[[], object]) -> None:
        self.name = name
        self._interval = interval_s
        self._fn = fn
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Periodic:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"rl-insight-{self.name}", daemon=True)
            self._thread.start()
        return self

    def wake(self) -> bool:
        """Run `fn` now on the thread instead of at the next interval (work a caller must not wait for); False when
        the thread is not running (the caller then does the work itself)."""
        if self._thread is None or not self._thread.is_alive() or self._stop.is_set():
            return False
        self._wake.set()
        return True

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._fn()
            except Exception:  # the next tick still comes
                log.exception("%s: periodic task failed", self.name)
