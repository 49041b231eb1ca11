"""The alerting room: receivers (webhook, Slack, email) written into the managed Alertmanager's configuration, silences,
user rules, and the server's own alerts (a stalled, hung or lost run, with the hang's verdict) posted to it by the
server that leads (`rl-insight alerts`, the Alerts page)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from fastapi import APIRouter

from ...config import reach_host
from ...state import AppState
from ..house import Room
from ..stacks.feature import stacks_of
from .alert_events import AlertEvents
from .am_config import Grouping
from .delivery import WebhookDelivery
from .notifications import Notifications, relay_of
from .parts import Alerting
from .routes import build_router


def assemble(st: AppState) -> Alerting:
    cfg = st.config
    grouping = Grouping(cfg.alert_group_wait, cfg.alert_group_interval, cfg.alert_repeat_interval)
    data_dir = Path(cfg.data_dir).expanduser()
    relay = relay_of(data_dir, f"http://{reach_host(cfg.host)}:{cfg.port}", cfg.token)
    notifications = Notifications(data_dir, cfg.alertmanager_url, grouping, amtool=cfg.amtool, relay=relay)
    st.life.add("notifications", stop=notifications.close)
    events = None
    if notifications.am is not None and st.reader is not None:
        stacks, insight = stacks_of(st), st.insight

        def verdict_of(project: str, experiment_name: str) -> Any:
            snap = stacks.latest_complete(project, experiment_name)
            return snap.get("verdict") if snap is not None else None

        events = AlertEvents(notifications.am, st.conditions, st.reader, st.step_clock,
                             public_url=lambda: st.public_url, live_window_s=cfg.live_window_s,
                             on_finish=cfg.alert_on_finish, verdict_of=verdict_of,
                             lead=lambda: insight.lead() if insight is not None else True,
                             restore_silences=notifications.restore_silences)
        st.life.add("alert events", events.start, events.stop)
    return Alerting(notifications, events, WebhookDelivery(notifications.receiver))


def routes(st: AppState, alerting: Alerting) -> Iterable[APIRouter]:
    return [build_router(st, alerting)]


FEATURE: Room[Alerting] = Room("alerting", __doc__ or "", assemble, routes, after=("stacks",), cli=("alerts",))
