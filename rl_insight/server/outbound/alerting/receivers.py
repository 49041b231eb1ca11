"""Where notifications go: receivers (a generic webhook, a Slack-compatible incoming webhook, email over SMTP), each
for every project or one, kept in `<data_dir>/alerting/receivers.json`.

Invariants: the file is written whole (atomically) and readable by this user only (0600): webhook URLs and SMTP
passwords are secrets. What leaves this module for people (`shown`) never carries them: a URL is reduced to its
scheme and host, a password to whether one is set. A receiver is validated here, field by field, before anything
is written; Alertmanager's own check (outbound/alerting/notifications.py) comes after.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, Optional
from urllib.parse import urlsplit

from typing_extensions import TypedDict

from ....errors import InvalidInputError
from ....fsutil import atomic_write

Kind = Literal["webhook", "slack", "email"]
KINDS: tuple[Kind, ...] = ("webhook", "slack", "email")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
RESERVED_PREFIX = "rl-insight-"  # the configuration's own receivers (the one that drops what no route takes)
MAX_RECEIVERS = 100
MAX_FIELD = 2048
_EMAIL = re.compile(r"^[^@\s,<>\"]{1,64}@[A-Za-z0-9.-]{1,253}$")
_HOSTPORT = re.compile(r"^[A-Za-z0-9.-]{1,253}:\d{1,5}$")


class Receiver(TypedDict, total=False):
    """One receiver as stored. `url` (webhook, slack) and `password` (email) are secrets."""

    name: str
    kind: Kind
    project: Optional[str]  # only this project's alerts; None: every project
    url: str  # webhook, slack
    channel: Optional[str]  # slack: overrides the webhook's own channel
    to: str  # email
    sender: str  # email: From
    smarthost: str  # email: host:port of the SMTP server
    username: Optional[str]
    password: Optional[str]
    require_tls: bool


class ShownReceiver(TypedDict):
    """A receiver as the API, the CLI and the UI show it: no secret in it."""

    name: str
    kind: str
    project: Optional[str]
    target: str  # where it delivers: the webhook's scheme://host/…, or the email address and SMTP server
    password_set: bool


_CHANNEL = re.compile(r"^[#@]?[A-Za-z0-9._-]{1,80}$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")  # a DNS name or an IP literal (IPv6 without its brackets)


def _text(body: dict[str, Any], key: str, *, required: bool = True) -> Optional[str]:
    v = body.get(key)
    if v is None or v == "":
        if required:
            raise InvalidInputError(f"a receiver needs {key!r}")
        return None
    if not isinstance(v, str):
        raise InvalidInputError(f"receiver field {key!r} must be a string, found {type(v).__name__}")
    if len(v) > MAX_FIELD or any(ord(c) < 32 for c in v):
        raise InvalidInputError(f"receiver field {key!r} must be one line of at most {MAX_FIELD} characters")
    return v


def _url(body: dict[str, Any]) -> str:
    url = _text(body, "url")
    assert url is not None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(f"{shown_url(url)!r} is not an http(s)://host/… URL",
                                hint="a webhook receiver posts JSON to that address")
    try:  # what Alertmanager accepts but can never deliver to (it would fail every notification, silently)
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or " " in (parts.hostname or "") or not _HOSTNAME.match(parts.hostname or ""):
        raise InvalidInputError(f"{shown_url(url)!r}: the host or port can never be reached (a port is 1 to 65535)",
                                hint="check the URL the chat or webhook service gave you")
    return url


def validate(body: Any) -> Receiver:
    """A receiver from what a user sent, every field checked; InvalidInputError naming the first problem."""
    if not isinstance(body, dict):
        raise InvalidInputError("a receiver must be a JSON object")
    unknown = sorted(set(body) - set(Receiver.__annotations__))
    if unknown:
        raise InvalidInputError(f"unknown receiver field(s): {', '.join(map(repr, unknown[:5]))}",
                                hint=f"known: {', '.join(Receiver.__annotations__)}")
    name = _text(body, "name")
    assert name is not None
    if not NAME.match(name) or name.startswith(RESERVED_PREFIX):
        raise InvalidInputError(f"receiver name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-' "
                                f"(not starting with {RESERVED_PREFIX!r})")
    kind = body.get("kind")
    if kind not in KINDS:
        raise InvalidInputError(f"receiver kind {str(kind)[:40]!r} is not one of {', '.join(KINDS)}")
    out: Receiver = {"name": name, "kind": kind, "project": _text(body, "project", required=False)}
    if kind in ("webhook", "slack"):
        out["url"] = _url(body)
        if kind == "slack":
            channel = _text(body, "channel", required=False)
            if channel is not None and not _CHANNEL.match(channel):
                # Alertmanager renders the channel as a template: a stray `{{` passes its check and then fails every
                # message (the test notification never arrives)
                raise InvalidInputError(f"Slack channel {channel[:80]!r} must be #name, @user or a channel id "
                                        "(letters, digits, '.', '_', '-'; at most 80)")
            out["channel"] = channel
        return out
    for key in ("to", "sender"):
        addr = _text(body, key)
        assert addr is not None
        if not _EMAIL.match(addr):
            raise InvalidInputError(f"{key} {addr[:80]!r} is not an email address")
        out[key] = addr  # "to" or "sender"
    smarthost = _text(body, "smarthost")
    assert smarthost is not None
    if not _HOSTPORT.match(smarthost) or not 0 < int(smarthost.rsplit(":", 1)[1]) < 65536:
        raise InvalidInputError(f"smarthost {smarthost[:80]!r} must be host:port of the SMTP server")
    out["smarthost"] = smarthost
    out["username"] = _text(body, "username", required=False)
    out["password"] = _text(body, "password", required=False)
    tls = body.get("require_tls", True)
    if not isinstance(tls, bool):
        raise InvalidInputError("require_tls must be true or false")
    out["require_tls"] = tls
    return out


def shown_url(url: str) -> str:
    """A URL without what makes it a secret (the path of a Slack webhook is its key): scheme://host/…"""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an invalid URL)"
    return f"{parts.scheme}://{host}{port}/…"


def shown(r: Receiver) -> ShownReceiver:
    target = (shown_url(r.get("url") or "") if r["kind"] != "email"
              else f"{r.get('to')} via {r.get('smarthost')}")
    if r["kind"] == "slack" and r.get("channel"):
        target += f" ({r.get('channel')})"
    return {"name": r["name"], "kind": r["kind"], "project": r.get("project"), "target": target,
            "password_set": bool(r.get("password"))}


class ReceiverFile:
    """The receivers on disk (0600). Not locked: its one writer is the server's change path (apply.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> list[Receiver]:
        try:
            doc = json.loads(self.path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"{self.path} is not a receivers file: {exc}",
                                    hint="fix or remove it; `rl-insight alerts receivers add` writes it") from None
        items = doc.get("receivers") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise InvalidInputError(f"{self.path} has no 'receivers' list")
        return [validate(r) for r in items]

    def save(self, receivers: list[Receiver]) -> None:
        atomic_write(self.path, json.dumps({"receivers": receivers}, indent=1), mode=0o600)
