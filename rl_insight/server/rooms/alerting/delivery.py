"""A webhook receiver's message, handed over by Alertmanager (am_config.Relay), posted on to the receiver's URL.

Alertmanager reaches webhooks through this server so that their URLs — a secret path or query, often — are in no
configuration it reads and no log it writes (Alertmanager 0.25 logs a failed webhook's URL whole).

Invariants: the receiver's URL is never logged, counted under or answered (only its receiver's name and the status
or error's kind); the answer keeps Alertmanager's retry rule: the receiver's 2xx is 200, its 4xx a 400 (Alertmanager
does not retry), anything else — 5xx, a timeout, a refused connection — a 502 (it retries); failures are counted by
receiver and logged at most once a minute per receiver.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Callable

import httpx

from ....tls import verified
from .kinds import KINDS, Receiver

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0
LOG_EVERY_S = 60.0
MAX_MESSAGE_BYTES = 4 * 1024 * 1024  # Alertmanager's webhook message lists at most MAX_ALERTS_PER_MESSAGE alerts


class WebhookDelivery:
    def __init__(self, receiver_of: Callable[[str], Receiver | None], timeout_s: float = TIMEOUT_S) -> None:
        self._receiver_of = receiver_of
        self.timeout_s = timeout_s
        self.failures: Counter[str] = Counter()  # receiver name -> failed deliveries
        self._logged: dict[str, float] = {}

    def target(self, name: str) -> str | None:
        """The URL of a webhook receiver of that name, or None."""
        r = self._receiver_of(name)
        return r.get("url") if r is not None and KINDS[r["kind"]].relayed else None

    async def deliver(self, name: str, url: str, message: bytes) -> tuple[int, str]:
        """(the status to answer Alertmanager with, what happened in words: no URL in them)."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, trust_env=False, follow_redirects=False,
                                         verify=verified()) as client:
                answer = await client.post(url, content=message, headers={"Content-Type": "application/json",
                                                                          "User-Agent": "rl-insight-alerts"})
        except httpx.HTTPError as exc:
            return self._failed(name, 502, f"not delivered ({type(exc).__name__})")
        if answer.is_success:
            return 200, f"delivered to {name} ({answer.status_code})"
        code = 400 if 400 <= answer.status_code < 500 else 502
        return self._failed(name, code, f"the receiver answered {answer.status_code}")

    def _failed(self, name: str, code: int, said: str) -> tuple[int, str]:
        self.failures[name] += 1
        now = time.monotonic()
        if now - self._logged.get(name, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged[name] = now
            log.warning("alert receiver %r: %s (%d failed so far%s)", name, said, self.failures[name],
                        "; Alertmanager retries" if code == 502 else "")
        return code, f"{name}: {said}"
