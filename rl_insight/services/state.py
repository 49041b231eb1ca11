"""The running stack's state file (`<home>/run/stack.json`), typed.

The supervisor writes it once the stack is up; the CLI (`status`, `stop`, `logs`, `credentials`,
`targets`, `demo`) reads it through these classes instead of indexing a dict by string keys. A
torn, foreign or older file reads as "no state", which `stop` and `status` report as not running.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..fsutil import atomic_write
from . import process
from .home import Home


@dataclass(frozen=True)
class ProcessRecord:
    pid: int | None
    marker: str  # a piece of the command line: a recycled pid is never mistaken for ours

    def alive(self) -> bool:
        return process.is_ours(self.pid, self.marker or "\0never")


@dataclass(frozen=True)
class ServiceRecord:
    name: str
    pid: int | None
    marker: str
    url: str | None
    ready_url: str
    port: int | None
    log: str
    version: str
    state: str

    def alive(self) -> bool:
        return process.is_ours(self.pid, self.marker or "\0never")


@dataclass(frozen=True)
class MissingRecord:
    name: str
    reason: str
    hint: str | None = None


@dataclass(frozen=True)
class StackState:
    version: str
    supervisor: ProcessRecord
    ready: bool
    started_at: float
    home: str
    ingest_url: str
    public_url: str
    token_required: bool
    services: tuple[ServiceRecord, ...] = ()
    missing: tuple[MissingRecord, ...] = ()
    grafana_password_new: bool = False
    # ports --auto-port moved because the asked ones were busy: "port 18080 (ingest) is busy; using 40123 instead"
    moved_ports: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def supervisor_alive(self) -> bool:
        return self.supervisor.alive()

    def service(self, name: str) -> ServiceRecord | None:
        return next((s for s in self.services if s.name == name), None)

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("extra")
        return json.dumps(d, indent=2)

    def write(self, home: Home) -> None:
        atomic_write(home.state_file, self.to_json())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StackState":
        sup = d.get("supervisor") or {}
        return cls(
            version=str(d.get("version", "")),
            supervisor=ProcessRecord(sup.get("pid"), sup.get("marker") or ""),
            ready=bool(d.get("ready")),
            started_at=float(d.get("started_at") or 0.0),
            home=str(d.get("home", "")),
            ingest_url=str(d.get("ingest_url") or ""),
            public_url=str(d.get("public_url") or d.get("ingest_url") or ""),
            token_required=bool(d.get("token_required")),
            services=tuple(
                ServiceRecord(**{k: s.get(k) for k in ServiceRecord.__dataclass_fields__})
                for s in d.get("services", [])
            ),
            missing=tuple(MissingRecord(m["name"], m.get("reason", ""), m.get("hint")) for m in d.get("missing", [])),
            grafana_password_new=bool(d.get("grafana_password_new")),
            moved_ports=tuple(str(x) for x in d.get("moved_ports") or ()),
        )

    @classmethod
    def read(cls, home: Home) -> "StackState | None":
        try:
            return cls.from_dict(json.loads(home.state_file.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # torn or foreign: counts as no state
