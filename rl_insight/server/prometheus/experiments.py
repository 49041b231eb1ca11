"""Experiments: the scrape targets of one run (project + experiment_name) as a unit that can be archived
and restored (upstream main's experiment partitions).

Archiving takes the experiment's targets out of the file_sd file Prometheus watches (it stops
scraping them; what it stored stays) and keeps them, with their labels, in `archived-targets.json`;
restoring puts them back. Registering into an archived experiment is refused (409). A manifest
(`experiments.json`) keeps each experiment's state and timestamps. Files are written atomically.

Several servers on one PostgreSQL store share all three as one document in the store (`shared`,
server/fleet/records.SharedDocument): a change is made on the latest stored copy and stored by compare-and-set
(redone when another server changed it first); every server reads the document again when it moved (`refresh`,
each fleet round) and rewrites its files from it, so a target registered or an experiment archived through any
server is in every server's file_sd file. A server joining the fleet adds what its files held that the store lacks.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable, Iterable, Literal, TypeVar

from ...errors import ConflictError, NotFoundError, StoreError
from ...fsutil import atomic_write
from .answers import Experiment, ExperimentTargets
from .targets import Target, TargetRegistry

State = Literal["active", "archived"]
Key = tuple[str, str]
T = TypeVar("T")
SHARED_ATTEMPTS = 8


class ExperimentBook:
    def __init__(self, registry: TargetRegistry, shared: Any = None) -> None:
        self.registry = registry
        self.shared = shared  # a fleet's SharedDocument, or None (one server: the files are the truth)
        d = registry.path.parent
        self.manifest_path = d / "experiments.json"
        self.archived_path = d / "archived-targets.json"
        self._lock = threading.Lock()
        self._manifest: dict[Key, dict[str, Any]] = {}
        self._archived: dict[Key, list[Target]] = {}
        self._load()
        if shared is not None:
            self._join()

    # ------------------------------------------------------------------ files
    def _load(self) -> None:
        try:
            self._read_rows(json.loads(self.archived_path.read_text()) if self.archived_path.exists() else [],
                            json.loads(self.manifest_path.read_text()) if self.manifest_path.exists() else [])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(
                f"experiment files in {self.manifest_path.parent} cannot be read ({exc})",
                hint="move experiments.json and archived-targets.json aside; targets stay registered",
            ) from None

    def _read_rows(self, archived: list[dict[str, Any]], manifest: list[dict[str, Any]]) -> None:
        self._archived = {(r["project"], r["experiment_name"]): [_target_of(t) for t in r["targets"]]
                          for r in archived}
        self._manifest = {(r["project"], r["experiment_name"]): {k: r[k] for k in ("state", "created_at", "updated_at")}
                          for r in manifest}

    def _rows(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(archived targets, manifest) as their files and the fleet's copy hold them."""
        return ([{"project": k[0], "experiment_name": k[1], "targets": [_target_row(t) for t in ts]}
                 for k, ts in sorted(self._archived.items())],
                [{"project": k[0], "experiment_name": k[1], **v} for k, v in sorted(self._manifest.items())])

    def _save(self) -> None:
        archived, manifest = self._rows()
        try:
            atomic_write(self.archived_path, json.dumps(archived, indent=1))
            atomic_write(self.manifest_path, json.dumps(manifest, indent=1))
        except OSError as exc:
            raise StoreError(f"could not write {self.manifest_path.parent}: {exc}", hint="check free disk space and "
                                                                                         "permissions") from None

    # ------------------------------------------------------------------ a fleet's copy
    def export_state(self) -> dict[str, Any]:
        archived, manifest = self._rows()
        return {"targets": [_target_row(t) for t in self.registry.list()], "archived": archived, "manifest": manifest}

    def _import(self, body: dict[str, Any]) -> None:
        """The fleet's copy into this server's files (file_sd first: what Prometheus scrapes)."""
        self.registry.replace_all([_target_of(t) for t in body.get("targets", [])])
        self._read_rows(body.get("archived", []), body.get("manifest", []))
        self._save()

    def _join(self) -> None:
        """Joining a fleet: the store's copy, plus what this server's files held that it lacks."""
        mine = self.export_state()

        def add_mine() -> None:
            have = {(t.job, t.address) for t in self.registry.list()}
            self.registry.put_back(_target_of(t) for t in mine["targets"] if (t["job"], t["target"]) not in have)
            for r in mine["archived"]:
                self._archived.setdefault((r["project"], r["experiment_name"]), [_target_of(t) for t in r["targets"]])
            for r in mine["manifest"]:
                self._manifest.setdefault((r["project"], r["experiment_name"]),
                                          {k: r[k] for k in ("state", "created_at", "updated_at")})
            self._save()

        self._change(add_mine)

    def refresh(self) -> None:
        """(a fleet, each round) Another server's changes into this server's files."""
        if self.shared is None:
            return
        with self._lock:
            body = self.shared.pull()
            if body is not None:
                self._import(body)

    def _change(self, op: Callable[[], T]) -> T:
        """`op` applied to the latest copy and, in a fleet, stored by compare-and-set (redone on a newer copy when
        another server changed it first). Under the lock."""
        if self.shared is None:
            return op()
        for _ in range(SHARED_ATTEMPTS):
            body = self.shared.pull()
            if body is not None:
                self._import(body)
            result = op()
            if self.shared.push(self.export_state()):
                return result
        raise StoreError("the fleet's scrape targets kept changing on other servers; try again")

    # ------------------------------------------------------------------ operations
    def state(self, key: Key) -> State:
        return self._manifest.get(key, {}).get("state", "active")

    def register(self, job: str, items: list[tuple[str, dict[str, str]]], identity: Key | None) -> int:
        """Upsert targets; refused (409) when their experiment is archived."""
        with self._lock:
            return self._change(lambda: self._register(job, items, identity))

    def _register(self, job: str, items: list[tuple[str, dict[str, str]]], identity: Key | None) -> int:
        if identity is not None and self.state(identity) == "archived":
            raise ConflictError(
                f"experiment {identity[0]!r}/{identity[1]!r} is archived; its targets are not registered",
                hint="restore it first (POST /api/v1/experiments/restore or "
                "`rl-insight server experiments restore`), or use another experiment_name",
            )
        count = self.registry.upsert(job, items)
        if identity is not None:
            self._touch(identity, "active")
            self._save()
        return count

    def archive(self, project: str, experiment_name: str) -> Experiment:
        key = (project, experiment_name)

        def archive() -> Experiment:
            self._require_known(key)
            if self.state(key) != "archived":
                taken = self.registry.take(*key)
                self._archived[key] = self._archived.get(key, []) + taken
                self._touch(key, "archived")
                self._save()
            return self._row(key)

        with self._lock:
            return self._change(archive)

    def restore(self, project: str, experiment_name: str) -> Experiment:
        key = (project, experiment_name)

        def restore() -> Experiment:
            self._require_known(key)
            if self.state(key) == "archived":
                self.registry.put_back(self._archived.pop(key, []))
                self._touch(key, "active")
                self._save()
            return self._row(key)

        with self._lock:
            return self._change(restore)

    def remove(self, *, target: str | None = None, job: str | None = None, project: str | None = None,
               experiment_name: str | None = None) -> int:
        """Targets removed from the registry (TargetRegistry.remove), in every server's file in a fleet."""
        with self._lock:
            return self._change(lambda: self.registry.remove(target=target, job=job, project=project,
                                                             experiment_name=experiment_name))

    def list(self, project: str | None = None) -> list[Experiment]:
        with self._lock:
            keys = set(self._manifest) | set(self._archived) | {k for k in (t.identity() for t in self.registry.list())
                                                                 if k[0] is not None and k[1] is not None}
            return [self._row(k) for k in sorted(keys) if project is None or k[0] == project]  # type: ignore[arg-type]  # keys without None parts only (filtered above)

    def targets(self, project: str, experiment_name: str) -> ExperimentTargets:
        key = (project, experiment_name)
        with self._lock:
            self._require_known(key)
            return {**self._row(key), "targets": [t.to_api() for t in self._targets_of(key)]}

    # ------------------------------------------------------------------ helpers
    def _targets_of(self, key: Key) -> Iterable[Target]:
        if self.state(key) == "archived":
            return list(self._archived.get(key, []))
        return [t for t in self.registry.list() if t.identity() == key]

    def _require_known(self, key: Key) -> None:
        if key not in self._manifest and key not in self._archived and not any(
                t.identity() == key for t in self.registry.list()):
            raise NotFoundError(f"no experiment {key[0]!r}/{key[1]!r} has registered targets",
                                hint="GET /api/v1/experiments lists them")

    def _touch(self, key: Key, state: State) -> None:
        now = time.time()
        row = self._manifest.setdefault(key, {"state": state, "created_at": now, "updated_at": now})
        row["state"], row["updated_at"] = state, now

    def _row(self, key: Key) -> Experiment:
        m = self._manifest.get(key, {})
        return {"project": key[0], "experiment_name": key[1], "state": self.state(key),
                "target_count": sum(1 for _ in self._targets_of(key)),
                "created_at": m.get("created_at"), "updated_at": m.get("updated_at")}

    def archived_keys(self) -> set[Key]:
        with self._lock:
            return {k for k, v in self._manifest.items() if v.get("state") == "archived"}


def _target_row(t: Target) -> dict[str, Any]:
    return {"job": t.job, "target": t.address, "labels": dict(t.labels), "registered_at": t.registered_at}


def _target_of(row: dict[str, Any]) -> Target:
    return Target(row["job"], row["target"], tuple(sorted(row["labels"].items())), row["registered_at"])
