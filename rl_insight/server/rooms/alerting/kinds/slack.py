"""A Slack-compatible incoming webhook (Slack, Mattermost, Rocket.Chat): a message per group, titled by its alert and
run, each alert's summary, what to check and link."""

from __future__ import annotations

import re
from typing import Any, Optional

from .....errors import InvalidInputError
from .base import Field, Receiver, ReceiverKind, optional_text, shown_url, url

TITLE = ("[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}: {{ .CommonLabels.project }}/"
         "{{ .CommonLabels.experiment_name }}")
TEXT = ("{{ range .Alerts }}{{ .Annotations.summary }}\n"
        "{{ if .Annotations.what_to_check }}What to check: {{ .Annotations.what_to_check }}\n{{ end }}"
        "{{ if .Annotations.url }}{{ .Annotations.url }}\n{{ end }}{{ end }}")
_CHANNEL = re.compile(r"^[#@]?[A-Za-z0-9._-]{1,80}$")


def _channel(body: dict[str, Any], key: str) -> Optional[str]:
    channel = optional_text(body, key)
    if channel is not None and not _CHANNEL.match(channel):
        # Alertmanager renders the channel as a template: a stray `{{` passes its check and then fails every message
        # (the test notification never arrives)
        raise InvalidInputError(f"Slack channel {channel[:80]!r} must be #name, @user or a channel id (letters, "
                                "digits, '.', '_', '-'; at most 80)")
    return channel


def _configs(r: Receiver, relay: dict[str, Any] | None, resolved: bool) -> dict[str, Any]:
    cfg: dict[str, Any] = {"api_url": r["url"], "send_resolved": resolved, "title": TITLE, "text": TEXT}
    if r.get("channel"):
        cfg["channel"] = r["channel"]
    return {"slack_configs": [cfg]}


def _target(r: Receiver) -> str:
    return shown_url(r.get("url") or "") + (f" ({r['channel']})" if r.get("channel") else "")


KIND = ReceiverKind(
    "slack", 20,
    (Field("url", url, "webhook, slack: where to post (a secret)", flag="--slack-url", metavar="URL",
           cli_help="A Slack (or Mattermost, Rocket.Chat) incoming-webhook URL.", from_file=True),
     Field("channel", _channel, "slack: another channel", flag="--channel",
           cli_help="Slack: post to this channel instead.")),
    _configs, _target)
