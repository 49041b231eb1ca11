"""What a receiver kind is: its fields (each checked, documented, given on the command line), how Alertmanager
delivers to it, and how it is shown without its secrets. One module of this package per kind (`__init__` finds them).
Stdlib only: the CLI reads the kinds to build `alerts receivers add`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional
from urllib.parse import urlsplit

from .....errors import InvalidInputError

MAX_FIELD = 2048
_HOSTNAME = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")  # a DNS name or an IP literal (IPv6 without its brackets)
Receiver = dict[str, Any]  # as stored: name, kind, project, and its kind's fields


@dataclass(frozen=True)
class Field:
    """One field of a kind: its key in the API and the stored receiver, its check, and its command-line option."""

    key: str
    check: Callable[[dict[str, Any], str], Any]  # (the body, the key) -> the stored value; InvalidInputError if bad
    description: str | None = None  # in /openapi.json (None: none)
    flag: str | None = None  # `alerts receivers add`'s option (the kind's first flagged field selects the kind)
    metavar: str | None = None
    cli_help: str = ""
    from_file: bool = False  # also `<flag>-file`: a secret kept off the command line (and `ps`)
    env: str | None = None  # or this environment variable, when neither is given
    negated: bool = False  # a bool true by default, given as `<flag>` to make it false (`--no-tls`)
    boolean: bool = False


@dataclass(frozen=True)
class ReceiverKind:
    name: str
    order: int  # where it is listed (help, errors, the API's enum)
    fields: tuple[Field, ...]
    configs: Callable[[Receiver, dict[str, Any] | None, bool], dict[str, Any]]  # Alertmanager's `<kind>_configs`
    # entry: (the receiver, where the server relays it or None, send_resolved)
    target: Callable[[Receiver], str]  # where it delivers, without secrets
    relayed: bool = False  # Alertmanager hands its messages to this server, which posts them on (delivery.py)


def text(body: dict[str, Any], key: str, *, required: bool = True) -> Optional[str]:
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


def optional_text(body: dict[str, Any], key: str) -> Optional[str]:
    return text(body, key, required=False)


def required_text(body: dict[str, Any], key: str) -> str:
    value = text(body, key)
    assert value is not None
    return value


def url(body: dict[str, Any], key: str) -> str:
    """An http(s) URL that can be reached: what Alertmanager accepts but can never deliver to (port 0, a host with a
    space) would fail every notification, silently."""
    value = required_text(body, key)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(f"{shown_url(value)!r} is not an http(s)://host/… URL",
                                hint="a webhook receiver posts JSON to that address")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or " " in (parts.hostname or "") or not _HOSTNAME.match(parts.hostname or ""):
        raise InvalidInputError(f"{shown_url(value)!r}: the host or port can never be reached (a port is 1 to 65535)",
                                hint="check the URL the chat or webhook service gave you")
    return value


def shown_url(value: str) -> str:
    """A URL without what makes it a secret (the path of a Slack webhook is its key): scheme://host/…"""
    try:
        parts = urlsplit(value)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an invalid URL)"
    return f"{parts.scheme}://{host}{port}/…"
