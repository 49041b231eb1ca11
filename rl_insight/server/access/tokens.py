"""Named tokens kept in the run store (`fleet_records`, kind "token"), so every server on one store agrees: created,
listed and revoked through any of them, seen by all within `REFRESH_S`.

A token is `rli_` and 32 random bytes (URL-safe base64), printed once at creation; only its SHA-256 is stored (the
secret is random and long, so a plain hash is as good as a slow one). A record's body: name, role, projects (None:
all), created, created_by, expires (None: never), revoked (a time, or None). `last_used` is a part of the record,
written at most once a minute per token and server.

Invariant: `resolve` answers from memory (a dict from hash to record) that `poll` refreshes from the store every
`REFRESH_S` on the server's background thread (never on a request's path, which runs on the event loop), so a revoked
or expired token stops working on every server within about `REFRESH_S`, and a check costs one hash and one dict
look-up. The server's own writes (create, revoke) refresh at once.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import threading
import time
from typing import Any, Sequence

from ...errors import ConflictError, InvalidInputError, NotFoundError
from .principal import ROLES, Principal

KIND = "token"
PREFIX = "rli_"
REFRESH_S = 2.0
LAST_USED_EVERY_S = 60.0
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
PROJECT = re.compile(r"^[^\x00-\x1f\x7f]{1,256}$")


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "replace")).hexdigest()


def new_secret() -> str:
    return PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def check_fields(name: str, role: str, projects: Sequence[str] | None, expires_s: float | None) -> None:
    if not NAME.match(name):
        raise InvalidInputError(f"invalid token name {name[:80]!r}",
                                hint="1 to 64 letters, digits, '_', '.', '@' or '-', starting with a letter or digit")
    if role not in ROLES:
        raise InvalidInputError(f"unknown role {role[:40]!r}", hint="one of " + ", ".join(ROLES))
    if role == "admin" and projects is not None:
        raise InvalidInputError("an admin token is for every project: it manages every token and reads the whole "
                                "audit log", hint="for one project's people give role operator (and an ingest token "
                                "for its jobs), or leave out the projects")
    for p in projects or ():
        if not PROJECT.match(p):
            raise InvalidInputError(f"invalid project {p[:80]!r}", hint="1 to 256 printable characters")
    if expires_s is not None and not 60 <= expires_s <= 10 * 366 * 86400:
        raise InvalidInputError("a token expires between a minute and ten years from now", hint="e.g. --expires 90d")


class TokenBook:
    """The named tokens of one store, as this server knows them (see the module docstring)."""

    def __init__(self, records: Any, clock: Any = time.time) -> None:
        self._records = records  # fleet/records.SharedRecords(backend, "token")
        self._clock = clock
        self._lock = threading.Lock()
        self._by_name: dict[str, dict[str, Any]] = {}
        self._by_hash: dict[str, dict[str, Any]] = {}
        self._used: dict[str, float] = {}  # name -> when this server last noted its use
        self._pending_use: dict[str, float] = {}  # uses not written yet (the poll writes them)
        self.refresh_errors = 0

    # ------------------------------------------------------------------ reads
    def refresh(self) -> None:
        """Every token record from the store (few: read whole)."""
        try:
            docs = self._records.load()
        except Exception:  # a store that restarts: keep what is known until it answers again
            self.refresh_errors += 1
            return
        by_name = {rid: {**d.body, **({"last_used": d.parts["last_used"]} if "last_used" in d.parts else {})}
                   for rid, d in docs.items() if d.body}
        with self._lock:
            self._by_name = by_name
            self._by_hash = {b["hash"]: b for b in by_name.values() if "hash" in b}

    def poll(self) -> None:
        """(the background thread) The store's tokens again, and the last uses noted since the last poll."""
        with self._lock:
            used, self._pending_use = self._pending_use, {}
        for name, when in used.items():
            try:
                self._records.put_parts(name, ("", ""), {"last_used": when})
            except Exception:  # bookkeeping: never worth an error
                pass
        self.refresh()

    def resolve(self, secret: str) -> Principal | None:
        """The principal of a live token with this secret; None for anything else (unknown, revoked, expired)."""
        if not secret.startswith(PREFIX):
            return None
        now = self._clock()
        body = self._by_hash.get(digest(secret))
        if body is None or body.get("revoked") is not None:
            return None
        if body.get("expires") is not None and now >= body["expires"]:
            return None
        self._note_use(body["name"], now)
        projects = body.get("projects")
        return Principal(body["name"], body["role"], frozenset(projects) if projects is not None else None)

    def list(self) -> list[dict[str, Any]]:
        """Every token, newest first, without its hash."""
        self.refresh()
        with self._lock:
            rows = [{k: v for k, v in b.items() if k != "hash"} for b in self._by_name.values()]
        return sorted(rows, key=lambda r: -float(r.get("created") or 0))

    # ------------------------------------------------------------------ writes
    def create(self, name: str, role: str, projects: Sequence[str] | None, expires_s: float | None,
               by: str) -> tuple[str, dict[str, Any]]:
        """(the secret, shown once; the stored record without its hash)."""
        check_fields(name, role, projects, expires_s)
        self.refresh()
        if name in self._by_name:
            raise ConflictError(f"a token named {name!r} exists", hint="choose another name, or revoke that one first "
                                                                      "(`rl-insight server tokens revoke NAME`)")
        secret, now = new_secret(), self._clock()
        body = {"name": name, "role": role, "projects": sorted(set(projects)) if projects else None,
                "created": now, "created_by": by, "expires": now + expires_s if expires_s else None,
                "revoked": None, "hash": digest(secret)}
        try:
            self._records.create(name, ("", ""), body)
        except Exception as exc:  # (two servers creating one name at once: the store's key refuses the second)
            raise ConflictError(f"a token named {name!r} exists", hint="choose another name") from exc
        self.refresh()
        return secret, {k: v for k, v in body.items() if k != "hash"}

    def revoke(self, name: str, by: str) -> dict[str, Any]:
        """Revoked from now on, on every server within REFRESH_S (the record stays, for the audit trail)."""
        for _ in range(5):  # compare-and-set: another server's write in between makes us read again
            doc = self._records.fetch(name)
            if doc is None or not doc.body:
                raise NotFoundError(f"no token named {name[:80]!r}", hint="`rl-insight server tokens list`")
            if doc.body.get("revoked") is not None:
                return {k: v for k, v in doc.body.items() if k != "hash"}
            body = {**doc.body, "revoked": self._clock(), "revoked_by": by}
            if self._records.update(name, body, doc.version) is None:
                self.refresh()
                return {k: v for k, v in body.items() if k != "hash"}
        raise ConflictError(f"token {name!r} kept changing; try again", hint="another server is changing it")

    def _note_use(self, name: str, now: float) -> None:
        """Kept in memory; the background poll writes it (at most once a LAST_USED_EVERY_S per token)."""
        if now - self._used.get(name, float("-inf")) < LAST_USED_EVERY_S:
            return
        with self._lock:
            self._used[name] = now
            self._pending_use[name] = now
