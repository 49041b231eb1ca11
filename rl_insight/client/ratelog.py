"""Logging at a limited rate: the client must never flood a training job's logs."""

from __future__ import annotations

import threading
import time


class RateLimitedLog:
    """At most one record per key per `interval_s`; the next one says how many were suppressed."""

    def __init__(self, interval_s: float = 60.0) -> None:
        self._interval = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def log(self, level: int, key: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._interval:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return
            self._last[key] = now
            suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            msg += f" ({suppressed} similar messages suppressed)"
        try:
            import logging  # lazy: most processes never log, and logging costs ~4 ms to import

            logging.getLogger("rl_insight").log(level, msg, *args)
        except Exception:  # a broken handler must not reach the caller
            pass


ratelog = RateLimitedLog()
