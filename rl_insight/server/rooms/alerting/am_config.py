"""The Alertmanager configuration made from the receivers (rooms/alerting/receivers.py): written by `server
start` and by every receiver change, never edited by hand.

* **Grouping**: one notification per alert name and run (`group_by: [alertname, project, experiment_name]`), so a
  stall of a thousand ranks is one message. Intervals suit training jobs: the first message 30 s after the first
  alert of a group (others that fire meanwhile join it), changes to a group at most every 5 min, a still-firing
  group repeated every 4 h.
* **Routes**: every receiver gets what it matches (`continue: true`), a receiver with a project only that project's
  alerts; what no receiver takes goes to `rl-insight-none`, which delivers nothing.
* **Tests**: an alert labelled `rl_insight_test=<receiver>` (`rl-insight alerts receivers test`) goes to that
  receiver alone, at once, and is not followed by a "resolved" message.
* **Webhooks through this server** (`Relay`): their URLs carry secrets and Alertmanager logs a failed one's URL.
* **One stall, one message**: Prometheus' lane-level stall alert (`RLInsightLaneStalled`) goes to `rl-insight-none`:
  the server's `RLInsightRunStalled` tells the same stall, with the verdict. Not an inhibition alone: Alertmanager,
  reloaded for a new receiver while both fire, flushes their groups at once (their group_wait is long past), before
  its new inhibitor has read the server's alert, and sent both (issue 64). The inhibition stays, for Prometheus'
  trainer-stalled alert, which its rule already holds back while a lane is stalled.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from ....errors import ConfigError
from .kinds import KINDS, Receiver
from .receivers import RESERVED_PREFIX

NONE_RECEIVER = RESERVED_PREFIX + "none"
TEST_PREFIX = RESERVED_PREFIX + "test-"
TEST_LABEL = "rl_insight_test"
GROUP_BY = ["alertname", "project", "experiment_name"]
TOLD_BY_THE_SERVER = ["RLInsightLaneStalled"]  # Prometheus' alerts that the server's own alert tells, never delivered
DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")  # Alertmanager's model.Duration
@dataclass(frozen=True)
class Grouping:
    """How Alertmanager batches notifications (the server's alert_group_wait / _interval / alert_repeat_interval)."""

    wait: str = "30s"
    interval: str = "5m"
    repeat: str = "4h"

    def __post_init__(self) -> None:
        for what, value in (("alert_group_wait", self.wait), ("alert_group_interval", self.interval),
                            ("alert_repeat_interval", self.repeat)):
            if not value or not DURATION.match(value):
                raise ConfigError(f"{what} {value!r} is not a duration like 30s, 5m or 4h")


DELIVER_PATH = "/api/v1/alerting/deliver/"  # + a receiver's name: this server posts the message on (Relay)


@dataclass(frozen=True)
class Relay:
    """Where Alertmanager hands a webhook receiver's messages: this server, which posts them on to the receiver's URL
    (rooms/alerting/delivery.py). Alertmanager 0.25 writes a failed webhook's URL, its secret path included, into
    its log (Slack's it redacts; `url_file` came later), so the secret URL is never in its configuration."""

    base_url: str  # this server, as Alertmanager on this host reaches it
    token_file: str | None = None  # the server's token (0600), None when the server has none

    def webhook(self, receiver: str) -> dict[str, Any]:
        cfg: dict[str, Any] = {"url": self.base_url.rstrip("/") + DELIVER_PATH + receiver}
        if self.token_file:
            cfg["http_config"] = {"authorization": {"type": "Bearer", "credentials_file": self.token_file}}
        return cfg


def _matcher(label: str, value: str) -> str:
    return f"{label}={json.dumps(value)}"  # a double-quoted Go string: quotes and backslashes escaped


def _receiver(r: Receiver, name: str, relay: Relay | None, resolved: bool = True) -> dict[str, Any]:
    kind = KINDS[r["kind"]]  # (its entry: kinds/<kind>.py)
    return {"name": name, **kind.configs(r, relay.webhook(r["name"]) if relay is not None and kind.relayed else None,
                                         resolved)}


def render(receivers: list[Receiver], grouping: Grouping = Grouping(), relay: Relay | None = None) -> str:
    """alertmanager.yml for these receivers (the module docstring says what it does); webhooks through `relay` (None:
    straight to their URLs, which then show in Alertmanager's log when a delivery fails)."""
    routes: list[dict[str, Any]] = [
        {"receiver": TEST_PREFIX + r["name"], "matchers": [_matcher(TEST_LABEL, r["name"])], "group_wait": "0s",
         "group_by": ["..."]} for r in receivers]
    routes.append({"receiver": NONE_RECEIVER, "matchers": [f"alertname=~{json.dumps('|'.join(TOLD_BY_THE_SERVER))}"]})
    for r in receivers:
        route: dict[str, Any] = {"receiver": r["name"], "continue": True}
        if r.get("project"):
            route["matchers"] = [_matcher("project", r["project"] or "")]
        routes.append(route)
    config = {
        "route": {"receiver": NONE_RECEIVER, "group_by": GROUP_BY, "group_wait": grouping.wait,
                  "group_interval": grouping.interval, "repeat_interval": grouping.repeat, "routes": routes},
        "receivers": [{"name": NONE_RECEIVER}, *(_receiver(r, r["name"], relay) for r in receivers),
                      *(_receiver(r, TEST_PREFIX + r["name"], relay, resolved=False) for r in receivers)],
        "inhibit_rules": [
            {"source_matchers": ['alertname="RLInsightRunStalled"'],
             "target_matchers": ['alertname=~"RLInsightLaneStalled|RLInsightTrainerStalled"'],
             "equal": ["project", "experiment_name"]},
        ],
    }
    header = ("# Written by rl-insight from <data_dir>/alerting/receivers.json at every start and receiver change;\n"
              "# change receivers with `rl-insight alerts receivers`, not here. Holds secrets: keep it 0600.\n")
    return header + yaml.safe_dump(config, sort_keys=False, width=1000)
