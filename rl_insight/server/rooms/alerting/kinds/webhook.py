"""A generic webhook: Alertmanager's JSON message posted to a URL (whose path is often its secret). Alertmanager hands
it to this server, which posts it on (delivery.py), so the URL is in no Alertmanager configuration or log."""

from __future__ import annotations

from typing import Any

from .base import Field, Receiver, ReceiverKind, shown_url, url

MAX_ALERTS_PER_MESSAGE = 20  # a message lists at most this many alerts (the rest are counted in it)


def _configs(r: Receiver, relay: dict[str, Any] | None, resolved: bool) -> dict[str, Any]:
    target = relay if relay is not None else {"url": r["url"]}
    return {"webhook_configs": [{**target, "send_resolved": resolved, "max_alerts": MAX_ALERTS_PER_MESSAGE}]}


KIND = ReceiverKind(
    "webhook", 10,
    (Field("url", url, "webhook, slack: where to post (a secret)", flag="--webhook", metavar="URL",
           cli_help="POST each notification as JSON (Alertmanager's webhook format).", from_file=True),),
    _configs, lambda r: shown_url(r.get("url") or ""), relayed=True)
