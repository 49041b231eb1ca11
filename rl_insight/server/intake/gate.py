"""A bound on intake work in flight: at most `slots` requests and `max_bytes` of their bodies at once.

Past either bound a request is refused at once with BusyError (503 + Retry-After; OTLP exporters and our
client resend), before its body is read: a burst of large requests can hold no more memory than the bound
allows, and never queues up behind itself. Used by the OTLP/HTTP intake (the gRPC intake is bounded by
gRPC's own `maximum_concurrent_rpcs`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ...errors import BusyError


class IntakeGate:
    def __init__(self, slots: int, max_bytes: int, what: str) -> None:
        self.slots, self.max_bytes, self.what = slots, max_bytes, what
        self._lock = threading.Lock()
        self._in_flight = 0
        self._bytes = 0
        self.refused = 0

    @contextmanager
    def admit(self, size: int) -> Iterator[None]:
        """Hold a slot and `size` bytes for the block; BusyError when either bound would be passed."""
        with self._lock:
            if self._in_flight >= self.slots or (self._in_flight and self._bytes + size > self.max_bytes):
                self.refused += 1
                raise BusyError(
                    f"{self.what}: {self._in_flight} requests ({self._bytes} body bytes) already in progress; "
                    "send it again shortly",
                    hint="exporters resend on 503 (Retry-After)",
                )
            self._in_flight += 1
            self._bytes += size
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                self._bytes -= size
