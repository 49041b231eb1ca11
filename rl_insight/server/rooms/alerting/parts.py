"""What the alerting room holds while the server runs: the receivers and the managed Alertmanager (notifications),
the server's own alerts it posts there (None without an Alertmanager or a run store), and the webhooks it relays."""

from __future__ import annotations

from dataclasses import dataclass

from ...state import AppState
from .alert_events import AlertEvents
from .delivery import WebhookDelivery
from .notifications import Notifications


@dataclass(frozen=True)
class Alerting:
    notifications: Notifications
    events: AlertEvents | None
    webhooks: WebhookDelivery


def alerting_of(st: AppState) -> Alerting:
    """The alerting room's parts (for the core routes that show them: health, a run's alerts)."""
    alerting: Alerting = st.rooms["alerting"]
    return alerting
