"""Scrape-target registry persisted as one Prometheus file_sd JSON file.

The file is the source of truth: it is read at start-up, rewritten atomically (temp file, fsync,
`os.replace`) on every change, and only ever contains validated groups, so Prometheus never sees
an invalid or half-written file (one bad label name would make it drop *all* targets of the file).
Prometheus watches the file with inotify: no reload is needed.

Each group carries the registered job in `__rl_insight_job`; the rendered prometheus.yml relabels
it into `job`. Labels starting with `__` are dropped by Prometheus after relabelling.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from typing_extensions import TypedDict

from ...errors import InvalidInputError, StoreError
from ...fsutil import atomic_write
from ...protocol import MAX_LABEL_VALUE, clean_text
from ...semantics.names import is_valid_label_name

JOB_LABEL = "__rl_insight_job"
MAX_TARGETS_PER_REQUEST = 1_000
DEFAULT_JOB = "trainer_metrics"
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)


def _ipv6_host_port(t: str) -> tuple[str, str]:
    """`[addr]:port` -> (`[addr]`, port text), the address checked."""
    end = t.find("]")
    if end < 0 or t[end + 1: end + 2] != ":":
        raise InvalidInputError(f"target {t!r}: an IPv6 target must look like '[::1]:8000'")
    host, port_s = t[1:end], t[end + 2:]
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        raise InvalidInputError(f"target {t!r}: {host!r} is not a valid IPv6 address") from None
    return f"[{host}]", port_s


def _host_port(t: str) -> tuple[str, str]:
    """`host:port` -> (host, port text), the host a hostname or a valid IPv4 address."""
    host, sep, port_s = t.rpartition(":")
    if not sep or not host:
        raise InvalidInputError(f"target {t!r} must be 'host:port' (the port is missing)")
    if ":" in host:
        raise InvalidInputError(f"target {t!r}: write IPv6 addresses in brackets, e.g. '[{host}]:{port_s}'")
    if not _HOSTNAME.match(host):
        raise InvalidInputError(f"target {t!r}: {host!r} is not a valid hostname or IPv4 address")
    if host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise InvalidInputError(f"target {t!r}: {host!r} is not a valid IPv4 address") from None
    return host, port_s


def validate_target(value: Any) -> str:
    """Return a normalized `host:port`; raise InvalidInputError naming what is wrong."""
    if not isinstance(value, str) or not value.strip() or len(value) > 300:
        raise InvalidInputError(
            f"target must be a 'host:port' string (at most 300 characters), found {type(value).__name__}"
            f" {clean_text(str(value))[:60]!r}"
        )
    t = value.strip()
    if "://" in t or "/" in t:
        raise InvalidInputError(f"target {t!r} must be 'host:port' without scheme or path (e.g. '10.0.0.5:8000')")
    host, port_s = _ipv6_host_port(t) if t.startswith("[") else _host_port(t)
    if not port_s.isdigit() or not 1 <= int(port_s) <= 65535:
        raise InvalidInputError(f"target {t!r}: port must be a number from 1 to 65535, found {port_s!r}")
    return f"{host}:{int(port_s)}"


def validate_labels(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{where} must be an object of label name -> value, found {type(raw).__name__}")
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not is_valid_label_name(k):
            raise InvalidInputError(
                f"{where}: {k!r} is not a valid Prometheus label name (expected [a-zA-Z_][a-zA-Z0-9_]*, not starting "
                "with '__')"
            )
        if k in ("job", "instance"):
            raise InvalidInputError(f"{where}: label {k!r} is set by Prometheus; use job_name for the job")
        if isinstance(v, (dict, list)) or v is None:
            raise InvalidInputError(f"{where}: label {k!r} must have a string or number value, found "
                                    f"{type(v).__name__}")
        sv = clean_text(v if isinstance(v, str) else str(v))
        if len(sv) > MAX_LABEL_VALUE:
            raise InvalidInputError(f"{where}: label {k!r} value is {len(sv)} characters; at most {MAX_LABEL_VALUE}")
        out[k] = sv
    return out


def validate_job(job: Any) -> str:
    if job is None or job == "":
        return DEFAULT_JOB
    if not isinstance(job, str) or not job.strip():
        raise InvalidInputError(f"job_name must be a non-empty string, found {job!r}")
    job = job.strip()
    if len(job) > 200 or any(ord(c) < 32 for c in job):
        raise InvalidInputError(f"job_name {job[:50]!r} must be at most 200 printable characters")
    return clean_text(job)



class TargetAnswer(TypedDict):
    """A scrape target as the API lists it."""

    job: str
    target: str  # host:port
    labels: dict[str, str]


class TargetHealth(TargetAnswer):
    """A run's target with Prometheus' view of it: up, down, unknown, or null when no Prometheus runs."""

    health: str | None


class TargetList(TypedDict):
    targets: list[TargetAnswer]
    count: int
    targets_file: str


class RunTargets(TypedDict):
    run_id: int
    targets: list[TargetHealth]

@dataclass(frozen=True)
class Target:
    job: str
    address: str
    labels: tuple[tuple[str, str], ...]
    registered_at: float

    def to_group(self) -> dict[str, Any]:
        return {"targets": [self.address], "labels": {JOB_LABEL: self.job, **dict(self.labels)}}

    def identity(self) -> tuple[str | None, str | None]:
        """(project, experiment_name) from its labels: the experiment it belongs to."""
        labels = dict(self.labels)
        return labels.get("project"), labels.get("experiment_name")

    def to_api(self) -> TargetAnswer:
        return {"job": self.job, "target": self.address, "labels": dict(self.labels)}


def registration_identity(payload: dict[str, Any]) -> tuple[str, str] | None:
    """Top-level (project, experiment_name): both or neither (upstream main's rule)."""
    vals = []
    for key in ("project", "experiment_name"):
        val = payload.get(key)
        if val is not None and (not isinstance(val, str) or not val.strip() or len(val) > MAX_LABEL_VALUE):
            raise InvalidInputError(f"{key} must be a non-empty string of at most {MAX_LABEL_VALUE} characters")
        vals.append(clean_text(val.strip()) if isinstance(val, str) else None)
    if (vals[0] is None) != (vals[1] is None):
        raise InvalidInputError("give both project and experiment_name, or neither (found only "
                                f"{'project' if vals[0] is not None else 'experiment_name'})")
    return (vals[0], vals[1]) if vals[0] is not None else None  # type: ignore[return-value]  # both are str here: checked together above


def parse_registration(payload: Any) -> tuple[str, list[tuple[str, dict[str, str]]]]:
    """Upstream's POST /api/v1/prometheus/targets body -> (job, [(address, labels)]). All or nothing."""
    if not isinstance(payload, dict):
        raise InvalidInputError(f"body must be a JSON object, found {type(payload).__name__}")
    job = validate_job(payload.get("job_name"))
    common = validate_labels(payload.get("labels"), "labels")
    identity = registration_identity(payload)
    if identity is not None:
        _refuse_contradicting_labels(payload, common, identity)
        common["project"], common["experiment_name"] = identity
    items = payload.get("targets")
    if isinstance(items, list) and len(items) > MAX_TARGETS_PER_REQUEST:
        raise InvalidInputError(f"at most {MAX_TARGETS_PER_REQUEST} targets per registration, found {len(items)}")
    if not isinstance(items, list) or not items:
        raise InvalidInputError("targets must be a non-empty list of 'host:port' strings or {target, labels} objects")
    return job, [_registered_target(i, item, common) for i, item in enumerate(items)]


def _refuse_contradicting_labels(payload: dict, common: dict[str, str], identity: tuple[str, str]) -> None:
    """A label that names another project or experiment than the registration's top-level fields is refused."""
    for where, labels in [("labels", common)] + [(f"targets[{i}].labels", t.get("labels") or {})
                                                  for i, t in enumerate(payload.get("targets") or [])
                                                  if isinstance(t, dict) and isinstance(t.get("labels"), dict)]:
        for key, value in zip(("project", "experiment_name"), identity):
            if key in labels and str(labels[key]) != value:
                raise InvalidInputError(
                    f"{where}: label {key!r}={str(labels[key])[:100]!r} contradicts the registration's "
                    f"{key} {value!r}; the identity labels are set from the top-level fields"
                )


def _registered_target(i: int, item: Any, common: dict[str, str]) -> tuple[str, dict[str, str]]:
    if isinstance(item, str):
        return validate_target(item), dict(common)
    if isinstance(item, dict):
        if "target" not in item:
            raise InvalidInputError(f"targets[{i}] is an object without 'target'")
        own = validate_labels(item.get("labels"), f"targets[{i}].labels")
        return validate_target(item["target"]), {**common, **own}
    raise InvalidInputError(f"targets[{i}] must be a 'host:port' string or a {{target, labels}} object, "
                            f"found {type(item).__name__}")


class TargetRegistry:
    def __init__(self, path: Path, max_targets: int = 10_000) -> None:
        self.path = path
        self._max = max_targets
        self._lock = threading.Lock()
        self._targets: dict[tuple[str, str], Target] = {}
        self.recovered_from: Path | None = None
        self._load()

    def _load(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the targets directory {self.path.parent}: {exc.strerror or exc}",
                             hint="use a --data-dir you can write (on a mounted, writable file system)") from None
        if not self.path.exists():
            self._write()
            return
        try:
            groups = json.loads(self.path.read_text())
            if not isinstance(groups, list):
                raise ValueError(f"expected a JSON list of groups, found {type(groups).__name__}")
            loaded: dict[tuple[str, str], Target] = {}
            for g in groups:
                labels = dict(g["labels"])
                job = validate_job(labels.pop(JOB_LABEL))
                labels = validate_labels(labels, "stored labels")
                for addr in g["targets"]:
                    addr = validate_target(addr)
                    loaded[(job, addr)] = Target(job, addr, tuple(sorted(labels.items())), self.path.stat().st_mtime)
            self._targets = loaded
        except (ValueError, KeyError, TypeError, InvalidInputError) as exc:
            # Keep the damaged file for inspection instead of overwriting it, then start clean.
            backup = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, backup)
            self.recovered_from = backup
            self._targets = {}
            self._write()
            import logging

            logging.getLogger("rl_insight.server").error(
                "targets file %s could not be read (%s); moved it to %s and started with no targets",
                self.path,
                exc,
                backup,
            )

    def _write(self) -> None:
        groups = [t.to_group() for _, t in sorted(self._targets.items())]
        data = json.dumps(groups, indent=1, sort_keys=True)
        try:
            atomic_write(self.path, data)  # Prometheus sees the old or the new file, never half of one
        except OSError as exc:
            raise StoreError(f"could not write targets file {self.path}: {exc}", hint="check free disk space and "
                                                                                      "permissions") from None

    def upsert(self, job: str, items: Iterable[tuple[str, dict[str, str]]]) -> int:
        """Insert or replace (job, address) entries; returns how many targets the job now has."""
        now = time.time()
        with self._lock:
            updated = dict(self._targets)
            for addr, labels in items:
                updated[(job, addr)] = Target(job, addr, tuple(sorted(labels.items())), now)
            if len(updated) > self._max:
                raise InvalidInputError(f"target registry is full ({self._max} targets); remove old ones with "
                                        "`rl-insight server targets remove` or raise max_targets")
            previous, self._targets = self._targets, updated
            try:
                self._write()
            except StoreError:
                self._targets = previous  # nothing half-applied
                raise
            return sum(1 for (j, _) in self._targets if j == job)

    def remove(self, *, target: str | None = None, job: str | None = None,
               project: str | None = None, experiment_name: str | None = None) -> int:
        if not any((target, job, project, experiment_name)):
            raise InvalidInputError("say what to remove: target, job, or project and experiment_name")
        if target is not None:
            target = validate_target(target)

        def matches(t: Target) -> bool:
            labels = dict(t.labels)
            return ((target is None or t.address == target) and (job is None or t.job == job)
                    and (project is None or labels.get("project") == project)
                    and (experiment_name is None or labels.get("experiment_name") == experiment_name))

        with self._lock:
            keep = {k: t for k, t in self._targets.items() if not matches(t)}
            removed = len(self._targets) - len(keep)
            if removed:
                previous, self._targets = self._targets, keep
                try:
                    self._write()
                except StoreError:
                    self._targets = previous
                    raise
            return removed

    def take(self, project: str, experiment_name: str) -> list[Target]:
        """Remove and return an experiment's targets (archiving); the file is rewritten atomically."""
        with self._lock:
            mine = {k: t for k, t in self._targets.items() if t.identity() == (project, experiment_name)}
            if mine:
                previous = self._targets
                self._targets = {k: t for k, t in self._targets.items() if k not in mine}
                try:
                    self._write()
                except StoreError:
                    self._targets = previous
                    raise
            return list(mine.values())

    def put_back(self, targets: Iterable[Target]) -> None:
        """Re-add targets taken by `take` (restoring), keeping their labels and registration time."""
        with self._lock:
            previous = self._targets
            self._targets = {**self._targets, **{(t.job, t.address): t for t in targets}}
            try:
                self._write()
            except StoreError:
                self._targets = previous
                raise

    def replace_all(self, targets: Iterable[Target]) -> None:
        """Every target replaced (a fleet's shared copy, server/prometheus/experiments.py); written atomically."""
        with self._lock:
            previous = self._targets
            self._targets = {(t.job, t.address): t for t in targets}
            try:
                self._write()
            except StoreError:
                self._targets = previous
                raise

    def list(self, job: str | None = None) -> list[Target]:
        with self._lock:
            return [t for _, t in sorted(self._targets.items()) if job is None or t.job == job]
