"""A request's principal: who it is (a token's name), its role and the projects it may see or write.

Roles (docs/access.md): *viewer* reads runs, spans, panels and exports; *operator* also requests profiles and stack
snapshots, silences alerts and manages rules; *ingest* only sends data (ingest, OTLP, profile and stack uploads,
target registration) into its projects; *admin* everything, tokens included. `projects` None: every project.

Invariants: a principal never creates or sees anything wider than itself: an admin is of every project (`admin` with
projects is refused where tokens and the access map are made); a principal is immutable; `can_read`, `can_operate`,
`can_ingest` and `is_admin` are the only questions the server asks of a role.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["viewer", "operator", "ingest", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "operator", "ingest", "admin")


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role
    projects: frozenset[str] | None = None  # None: all projects

    @property
    def is_admin(self) -> bool:
        """Token management and the audit log: only a principal of every project (an admin held to projects, made
        before they were refused, would mint tokens wider than itself: it keeps an operator's and an ingest token's
        rights in its projects and no more)."""
        return self.role == "admin" and self.projects is None

    @property
    def can_read(self) -> bool:
        return self.role in ("viewer", "operator", "admin")

    @property
    def can_operate(self) -> bool:
        return self.role in ("operator", "admin")

    @property
    def can_ingest(self) -> bool:
        return self.role in ("ingest", "admin")

    def sees(self, project: str) -> bool:
        return self.projects is None or project in self.projects


ADMIN = Principal("admin (the server's token)", "admin")  # the single configured token: nothing breaks on upgrade
ANONYMOUS = Principal("anonymous (no token configured)", "admin")  # a server without a token trusts its network
