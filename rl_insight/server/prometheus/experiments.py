"""Experiments: the scrape targets of one run (project + experiment_name) as a unit that can be archived
and restored (upstream main's experiment partitions).

Archiving takes the experiment's targets out of the file_sd file Prometheus watches (it stops
scraping them; what it stored stays) and keeps them, with their labels, in `archived-targets.json`;
restoring puts them back. Registering into an archived experiment is refused (409). A manifest
(`experiments.json`) keeps each experiment's state and timestamps. Files are written atomically.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterable, Literal

from ...errors import ConflictError, NotFoundError, StoreError
from ...fsutil import atomic_write
from .targets import Target, TargetRegistry

State = Literal["active", "archived"]
Key = tuple[str, str]


class ExperimentBook:
    def __init__(self, registry: TargetRegistry) -> None:
        self.registry = registry
        d = registry.path.parent
        self.manifest_path = d / "experiments.json"
        self.archived_path = d / "archived-targets.json"
        self._lock = threading.Lock()
        self._manifest: dict[Key, dict[str, Any]] = {}
        self._archived: dict[Key, list[Target]] = {}
        self._load()

    # ------------------------------------------------------------------ files
    def _load(self) -> None:
        try:
            for row in json.loads(self.manifest_path.read_text()) if self.manifest_path.exists() else []:
                self._manifest[(row["project"], row["experiment_name"])] = {
                    "state": row["state"], "created_at": row["created_at"], "updated_at": row["updated_at"]}
            for row in json.loads(self.archived_path.read_text()) if self.archived_path.exists() else []:
                key = (row["project"], row["experiment_name"])
                self._archived[key] = [
                    Target(t["job"], t["target"], tuple(sorted(t["labels"].items())), t["registered_at"])
                    for t in row["targets"]
                ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(
                f"experiment files in {self.manifest_path.parent} cannot be read ({exc})",
                hint="move experiments.json and archived-targets.json aside; targets stay registered",
            ) from None

    def _save(self) -> None:
        archived = [
            {
                "project": k[0],
                "experiment_name": k[1],
                "targets": [
                    {"job": t.job, "target": t.address, "labels": dict(t.labels), "registered_at": t.registered_at}
                    for t in ts
                ],
            }
            for k, ts in sorted(self._archived.items())
        ]
        manifest = [{"project": k[0], "experiment_name": k[1], **v} for k, v in sorted(self._manifest.items())]
        try:
            atomic_write(self.archived_path, json.dumps(archived, indent=1))
            atomic_write(self.manifest_path, json.dumps(manifest, indent=1))
        except OSError as exc:
            raise StoreError(f"could not write {self.manifest_path.parent}: {exc}", hint="check free disk space and "
                                                                                         "permissions") from None

    # ------------------------------------------------------------------ operations
    def state(self, key: Key) -> State:
        return self._manifest.get(key, {}).get("state", "active")

    def register(self, job: str, items: list[tuple[str, dict[str, str]]], identity: Key | None) -> int:
        """Upsert targets; refused (409) when their experiment is archived."""
        with self._lock:
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

    def archive(self, project: str, experiment_name: str) -> dict[str, Any]:
        key = (project, experiment_name)
        with self._lock:
            self._require_known(key)
            if self.state(key) != "archived":
                taken = self.registry.take(*key)
                self._archived[key] = self._archived.get(key, []) + taken
                self._touch(key, "archived")
                self._save()
            return self._row(key)

    def restore(self, project: str, experiment_name: str) -> dict[str, Any]:
        key = (project, experiment_name)
        with self._lock:
            self._require_known(key)
            if self.state(key) == "archived":
                self.registry.put_back(self._archived.pop(key, []))
                self._touch(key, "active")
                self._save()
            return self._row(key)

    def list(self, project: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            keys = set(self._manifest) | set(self._archived) | {k for k in (t.identity() for t in self.registry.list())
                                                                 if k[0] is not None and k[1] is not None}
            return [self._row(k) for k in sorted(keys) if project is None or k[0] == project]  # type: ignore[arg-type]  # keys without None parts only (filtered above)

    def targets(self, project: str, experiment_name: str) -> dict[str, Any]:
        key = (project, experiment_name)
        with self._lock:
            self._require_known(key)
            row = self._row(key)
            row["targets"] = [t.to_api() for t in self._targets_of(key)]
            return row

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

    def _row(self, key: Key) -> dict[str, Any]:
        m = self._manifest.get(key, {})
        return {"project": key[0], "experiment_name": key[1], "state": self.state(key),
                "target_count": sum(1 for _ in self._targets_of(key)),
                "created_at": m.get("created_at"), "updated_at": m.get("updated_at")}

    def archived_keys(self) -> set[Key]:
        with self._lock:
            return {k for k, v in self._manifest.items() if v.get("state") == "archived"}
