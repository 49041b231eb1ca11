"""Email over SMTP: a message per group, its subject the alert and the run."""

from __future__ import annotations

import re
from typing import Any

from .....errors import InvalidInputError
from .base import Field, Receiver, ReceiverKind, optional_text, required_text

SUBJECT = ("[{{ .Status | toUpper }}] {{ .CommonLabels.alertname }}: {{ .CommonLabels.project }}/"
           "{{ .CommonLabels.experiment_name }}")
PASSWORD_ENV = "RL_INSIGHT_SMTP_PASSWORD"
_EMAIL = re.compile(r"^[^@\s,<>\"]{1,64}@[A-Za-z0-9.-]{1,253}$")
_HOSTPORT = re.compile(r"^[A-Za-z0-9.-]{1,253}:\d{1,5}$")


def _address(body: dict[str, Any], key: str) -> str:
    addr = required_text(body, key)
    if not _EMAIL.match(addr):
        raise InvalidInputError(f"{key} {addr[:80]!r} is not an email address")
    return addr


def _smarthost(body: dict[str, Any], key: str) -> str:
    smarthost = required_text(body, key)
    if not _HOSTPORT.match(smarthost) or not 0 < int(smarthost.rsplit(":", 1)[1]) < 65536:
        raise InvalidInputError(f"smarthost {smarthost[:80]!r} must be host:port of the SMTP server")
    return smarthost


def _tls(body: dict[str, Any], key: str) -> bool:
    tls = body.get(key, True)
    if not isinstance(tls, bool):
        raise InvalidInputError("require_tls must be true or false")
    return tls


def _configs(r: Receiver, relay: dict[str, Any] | None, resolved: bool) -> dict[str, Any]:
    email: dict[str, Any] = {"to": r["to"], "from": r["sender"], "smarthost": r["smarthost"],
                             "require_tls": r.get("require_tls", True), "send_resolved": resolved,
                             "headers": {"Subject": SUBJECT}}
    if r.get("username"):
        email["auth_username"] = r["username"]
    if r.get("password"):
        email["auth_password"] = r["password"]
    return {"email_configs": [email]}


KIND = ReceiverKind(
    "email", 30,
    (Field("to", _address, "email: to", flag="--email", metavar="TO", cli_help="Send email to this address."),
     Field("sender", _address, "email: from", flag="--from", metavar="ADDRESS", cli_help="Email: the From address."),
     Field("smarthost", _smarthost, "email: host:port of the SMTP server", flag="--smtp", metavar="HOST:PORT",
           cli_help="Email: the SMTP server."),
     Field("username", optional_text, flag="--smtp-user", cli_help="Email: SMTP login."),
     Field("password", optional_text, "(a secret, never answered back)", flag="--smtp-password", from_file=True,
           env=PASSWORD_ENV, cli_help="Email: the SMTP password"),
     Field("require_tls", _tls, flag="--no-tls", negated=True, boolean=True,
           cli_help="Email: do not require STARTTLS (a relay on localhost).")),
    _configs, lambda r: f"{r.get('to')} via {r.get('smarthost')}")
