"""The receivers and Alertmanager (notifications off without one), and the server's own events posted to it (a
stall, a hang verdict, a lost run) by the server that leads: put together from the server's config and parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..config import ServerConfig, reach_host
from ..outbound.alerting.am_config import Grouping
from ..outbound.alerting.notifications import Notifications, relay_of
from ..runstore.reader import RunStoreReader
from .alert_events import AlertEvents
from .run_conditions import RunConditions
from .step_clock import StepClock


def build_notifications(config: ServerConfig, reader: RunStoreReader | None, conditions: RunConditions,
                        step_clock: StepClock, verdict_of: Callable[[str, str], Any], public_url: Callable[[], str],
                        lead: Callable[[], bool]) -> tuple[Notifications, AlertEvents | None]:
    grouping = Grouping(config.alert_group_wait, config.alert_group_interval, config.alert_repeat_interval)
    data_dir = Path(config.data_dir).expanduser()
    relay = relay_of(data_dir, f"http://{reach_host(config.host)}:{config.port}", config.token)
    notifications = Notifications(data_dir, config.alertmanager_url, grouping, amtool=config.amtool, relay=relay)
    if notifications.am is None or reader is None:
        return notifications, None
    events = AlertEvents(notifications.am, conditions, reader, step_clock, public_url=public_url,
                         live_window_s=config.live_window_s, on_finish=config.alert_on_finish, verdict_of=verdict_of,
                         lead=lead, restore_silences=notifications.restore_silences)
    return notifications, events
