"""Single sign-on through a trusted proxy: the proxy a company already runs (oauth2-proxy, an ingress with OIDC)
signs people in and names them in a header; this maps the name and groups to a role and projects (docs/access.md).

Invariants: a user header is believed only on a connection from a `--trusted-proxy` network — from anywhere else it
is ignored, as if absent (a forged header gets the answer a request without credentials gets); a person signed in
by the proxy whom the access map gives no role is refused (403), never given a default they were not granted; where a
user is in several groups, the strongest role among their grants holds, over the projects of the grants with that
role only (a weaker grant never widens a stronger one). The map is read again when its file changes (checked at most
once a second), so access changes need no restart; a map that no longer parses keeps the last good one and says so.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError, ForbiddenError
from .principal import ROLES, Principal, Role

log = logging.getLogger(__name__)
MAX_HEADER_CHARS = 512  # a user or group list longer than this is not one a proxy sent
RANK: dict[str, int] = {"ingest": 0, "viewer": 1, "operator": 2, "admin": 3}  # a person reads rather than sends
MAP_KEYS = {"users", "groups", "default", "groups_separator"}


@dataclass(frozen=True)
class Grant:
    role: Role
    projects: frozenset[str] | None  # None: every project


def _grant(raw: Any, where: str) -> Grant:
    if not isinstance(raw, dict) or set(raw) - {"role", "projects"}:
        raise ConfigError(f"access map: {where} must be {{role: …, projects: […]}}, found {str(raw)[:120]!r}")
    role = raw.get("role")
    if role not in ROLES:
        raise ConfigError(f"access map: {where}: role must be one of {', '.join(ROLES)}, found {role!r}")
    projects = raw.get("projects")
    if projects is None:
        return Grant(role, None)
    if not isinstance(projects, list) or not projects or not all(isinstance(p, str) and p.strip() for p in projects):
        raise ConfigError(f"access map: {where}: projects must be a non-empty list of project names (leave it out "
                          "for every project)")
    if role == "admin":
        raise ConfigError(f"access map: {where}: an admin is of every project (it manages every token and reads the "
                          "whole audit log): leave out projects, or grant operator for those projects")
    return Grant(role, frozenset(p.strip() for p in projects))


@dataclass(frozen=True)
class AccessMap:
    """Users and groups → grants; `default` for a signed-in user named nowhere (None: refused)."""

    users: dict[str, Grant]
    groups: dict[str, Grant]
    default: Grant | None = None
    separator: str = ","

    @classmethod
    def parse(cls, doc: Any) -> AccessMap:
        if doc is None:
            doc = {}
        if not isinstance(doc, dict) or set(doc) - MAP_KEYS:
            extra = sorted(set(doc) - MAP_KEYS) if isinstance(doc, dict) else type(doc).__name__
            raise ConfigError(f"access map: expected the keys {', '.join(sorted(MAP_KEYS))}, found {extra}")
        sections: dict[str, dict[str, Grant]] = {}
        for key in ("users", "groups"):
            entries = doc.get(key) or {}
            if not isinstance(entries, dict):
                raise ConfigError(f"access map: {key} must map names to grants")
            sections[key] = {str(name): _grant(raw, f"{key}.{name}") for name, raw in entries.items()}
        separator = doc.get("groups_separator", ",")
        if not isinstance(separator, str) or not separator:
            raise ConfigError("access map: groups_separator must be a non-empty string")
        default = _grant(doc["default"], "default") if doc.get("default") is not None else None
        return cls(sections["users"], sections["groups"], default, separator)

    def grant(self, user: str, groups: list[str]) -> Grant | None:
        if user in self.users:
            return self.users[user]
        held = [self.groups[g] for g in groups if g in self.groups]
        if not held:
            return self.default
        role = max((g.role for g in held), key=RANK.__getitem__)
        strongest = [g for g in held if g.role == role]
        if any(g.projects is None for g in strongest):
            return Grant(role, None)
        return Grant(role, frozenset().union(*(g.projects or () for g in strongest)))


def load_map(path: Path) -> AccessMap:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"access map {path} does not exist",
                          hint="--access-map names a YAML file (docs/access.md)") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"access map {path} cannot be read: {str(exc)[:300]}") from None
    return AccessMap.parse(doc)


class ProxySignOn:
    """The people a trusted proxy names (`user_header`, `groups_header`) as principals, by the access map."""

    def __init__(self, networks: tuple[str, ...] | list[str], user_header: str, groups_header: str | None,
                 map_path: str | None) -> None:
        try:
            self.networks = [ipaddress.ip_network(n.strip(), strict=False) for n in networks]
        except ValueError as exc:
            raise ConfigError(f"--trusted-proxy: {exc}", hint="give a network as CIDR, e.g. 10.0.0.5/32") from None
        if not user_header.strip():
            raise ConfigError("--user-header must name a header")
        self.user_header, self.groups_header = user_header.lower(), (groups_header or "").lower() or None
        self.map_path = Path(map_path).expanduser() if map_path else None
        self._map = load_map(self.map_path) if self.map_path else AccessMap({}, {})
        self._stamp = self._mtime()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def _mtime(self) -> float | None:
        try:
            return os.stat(self.map_path).st_mtime_ns if self.map_path else None
        except OSError:
            return None

    def current_map(self) -> AccessMap:
        """The map, read again when its file changed (checked at most once a second)."""
        now = time.monotonic()
        if self.map_path is None or now - self._checked < 1.0:
            return self._map
        with self._lock:
            self._checked = now
            stamp = self._mtime()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._map = load_map(self.map_path)
                    log.info("access map %s read again", self.map_path)
                except ConfigError as exc:
                    log.error("access map %s kept as it was: %s", self.map_path, exc.message)
        return self._map

    def trusted(self, peer: str | None) -> bool:
        if not peer:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # a server on `::` sees an IPv4 proxy as ::ffff:a.b.c.d
        return any(address in n for n in self.networks)

    def _header(self, request: Any, name: str) -> str | None:
        """One header's value as the proxy sent it: UTF-8 (HTTP hands it over as latin-1); ForbiddenError when it
        comes twice (which one the proxy meant cannot be known: a proxy that adds instead of replacing)."""
        values = request.headers.getlist(name)
        if len(values) > 1:
            raise ForbiddenError(f"the request carries {len(values)} {name} headers",
                                 hint="the proxy must replace what a client sends, not add to it (docs/access.md)")
        if not values:
            return None
        try:
            return str(values[0]).encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            return str(values[0])

    def limiter_key(self, request: Any) -> str:
        """Whom wrong sign-ins are counted against: the client's address, or — through a trusted proxy, where every
        person shares the proxy's address — the person it names, else the client it forwarded for."""
        peer = request.client.host if request.client else "?"
        if not self.trusted(peer):
            return peer
        user = request.headers.get(self.user_header)
        forwarded = [x.strip() for x in request.headers.get("x-forwarded-for", "").split(",") if x.strip()]
        return f"{peer} for " + (f"user {user[:200]}" if user else forwarded[-1][:64] if forwarded else "?")

    def principal(self, request: Any) -> Principal | None:
        """The person the proxy names, or None (no header, or not from a trusted proxy: the header is ignored).
        ForbiddenError for a person the map gives no role, or a request with two of the proxy's headers."""
        if not self.trusted(request.client.host if request.client else None):
            return None
        user = self._header(request, self.user_header)
        if not user:
            return None
        user = user.strip()[:MAX_HEADER_CHARS]
        access = self.current_map()
        raw_groups = (self._header(request, self.groups_header) or "") if self.groups_header else ""
        groups = [g.strip() for g in raw_groups[:MAX_HEADER_CHARS * 8].split(access.separator) if g.strip()]
        grant = access.grant(user, groups)
        if grant is None:
            raise ForbiddenError(f"{user!r} is signed in by the proxy but the access map gives them no role",
                                 hint="an admin adds them, or one of their groups, to the access map "
                                      "(--access-map, docs/access.md)")
        return Principal(f"{user} (sso)", grant.role, grant.projects)


def proxy_sign_on(networks: tuple[str, ...] | list[str], token: str | None, user_header: str,
                  groups_header: str | None, map_path: str | None) -> ProxySignOn | None:
    """People a trusted proxy signs in, when `networks` names the proxy's; refused without a server token (every
    request would be trusted and the proxy's header would mean nothing)."""
    if not networks:
        return None
    if not token:
        raise ConfigError("--trusted-proxy needs the server to have a token: without one every request is "
                          "trusted and the proxy's header would mean nothing",
                          hint="start with --token (or let `rl-insight server start` generate one)")
    return ProxySignOn(networks, user_header, groups_header, map_path)
