"""Prometheus scrape targets a training process registers (upstream's `update_prometheus_config`): kept until the
sender thread posts them to the server (`/api/v1/prometheus/targets`); one the server cannot take now is sent again,
one it refuses is counted and logged, never raised into training."""

from __future__ import annotations

import threading

from ..protocol import ROUTE_TARGETS
from .ratelog import ratelog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

LOG_INFO, LOG_ERROR = 20, 40


class TargetRegistrations:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[dict] = []

    def add(self, payload: dict) -> None:
        with self._lock:
            self._pending.append(payload)

    def take(self) -> list[dict]:
        """Every pending registration, removed (a delivery that replaces another takes them over)."""
        with self._lock:
            todo, self._pending = self._pending, []
        return todo

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def send(self, transport: Any, url: Any, retry_later: Callable[[str], object], drop: Callable[..., None]) -> None:
        """(the sender thread) Post each pending registration; one the server could not take now stays for the
        next cycle (`retry_later` says why), one it refused is counted (`drop`) and logged."""
        from .transport import TransportError

        todo = self.take()
        keep: list[dict] = []
        where = f"{url}{ROUTE_TARGETS}"
        for i, payload in enumerate(todo):
            try:
                from . import wire

                resp = transport.post(ROUTE_TARGETS, wire.encode_json(payload), {})
            except TransportError as exc:
                retry_later(f"target registration: server unreachable at {where} ({exc})")
                keep = todo[i:]
                break
            if resp.status == 429 or resp.status >= 500:
                retry_later(f"target registration: {where} answered HTTP {resp.status}")
                keep = todo[i:]
                break
            if resp.status == 409:
                drop("archived_experiment")
                ratelog.log(LOG_ERROR, "reg-archived", "[rl-insight] %s refused the targets of job %r: %.300s",
                            where, payload.get("job_name"), resp.body.get("detail") or resp.body)
            elif resp.status >= 400:
                drop("registration_refused")
                ratelog.log(
                    LOG_ERROR,
                    "reg-rejected",
                    "[rl-insight] %s refused the targets of job %r (HTTP %s): %.300s",
                    where,
                    payload.get("job_name"),
                    resp.status,
                    resp.body.get("detail") or resp.body,
                )
            else:
                ratelog.log(
                    LOG_INFO,
                    "reg-ok:" + str(payload.get("job_name")),
                    "[rl-insight] Registered %d Prometheus targets with RL-Insight server (job_name=%s)",
                    len(payload.get("targets", [])),
                    payload.get("job_name"),
                )
        if keep:
            with self._lock:
                self._pending[:0] = keep
