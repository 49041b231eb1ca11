"""Where notifications go: receivers of the kinds in kinds/ (a generic webhook, a Slack-compatible incoming webhook,
email over SMTP), each for every project or one, kept in `<data_dir>/alerting/receivers.json`.

Invariants: the file is written whole (atomically) and readable by this user only (0600): webhook URLs and SMTP
passwords are secrets. What leaves this module for people (`shown`) never carries them: a URL is reduced to its
scheme and host, a password to whether one is set. A receiver is validated here, field by field, before anything
is written; Alertmanager's own check (rooms/alerting/notifications.py) comes after.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from typing_extensions import TypedDict

from ....errors import InvalidInputError
from ....fsutil import atomic_write
from .kinds import KINDS, Receiver, fields
from .kinds.base import optional_text, required_text

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
RESERVED_PREFIX = "rl-insight-"  # the configuration's own receivers (the one that drops what no route takes)
MAX_RECEIVERS = 100
COMMON = ("name", "kind", "project")  # every receiver's; the rest are its kind's (kinds/)


class ShownReceiver(TypedDict):
    """A receiver as the API, the CLI and the UI show it: no secret in it."""

    name: str
    kind: str
    project: Optional[str]
    target: str  # where it delivers: the webhook's scheme://host/…, or the email address and SMTP server
    password_set: bool


def validate(body: Any) -> Receiver:
    """A receiver from what a user sent, every field checked (its kind's by its kind, kinds/); InvalidInputError
    naming the first problem."""
    if not isinstance(body, dict):
        raise InvalidInputError("a receiver must be a JSON object")
    known = [*COMMON, *(f.key for f in fields())]
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise InvalidInputError(f"unknown receiver field(s): {', '.join(map(repr, unknown[:5]))}",
                                hint=f"known: {', '.join(known)}")
    name = required_text(body, "name")
    if not NAME.match(name) or name.startswith(RESERVED_PREFIX):
        raise InvalidInputError(f"receiver name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-' "
                                f"(not starting with {RESERVED_PREFIX!r})")
    given = body.get("kind")
    kind = KINDS.get(given) if isinstance(given, str) else None
    if kind is None:
        raise InvalidInputError(f"receiver kind {str(body.get('kind'))[:40]!r} is not one of {', '.join(KINDS)}")
    out: Receiver = {"name": name, "kind": kind.name, "project": optional_text(body, "project")}
    for f in kind.fields:
        out[f.key] = f.check(body, f.key)
    return out


def shown(r: Receiver) -> ShownReceiver:
    return {"name": r["name"], "kind": r["kind"], "project": r.get("project"), "target": KINDS[r["kind"]].target(r),
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
