"""The audit log: every state-changing action a person or a script takes through the API — tokens created and
revoked, profiles and stack snapshots requested and cancelled, alert receivers, rules and silences changed,
experiments archived — with who, when, from where and what (docs/access.md). Data a job sends (ingest, OTLP, trace and
stack uploads, target registration) is not an action and is not logged.

Entries are kept in the run store (`fleet_records`, kind "audit": every server of a fleet writes to and reads the same
log), written by a background worker (a request never waits for it; past its bound an entry is dropped and counted),
and deleted after the store's retention (`store_retention_days`), like the runs.

Invariant: an entry is written once its answer is known (status < 400: the action happened), and never changed.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..workers.batch_worker import BatchWorker

KIND = "audit"
MAX_QUEUED = 10_000
MAX_LISTED = 5_000
WHAT_KEYS = ("id", "name", "project", "experiment_name", "run_id", "role", "state", "alertname")


def what_of(answer: bytes) -> dict[str, Any]:
    """The identifying fields of a JSON answer (its own, or its `info`'s: a token's), for the log's `what`."""
    try:
        doc = json.loads(answer)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}

    def fields(d: dict[str, Any]) -> dict[str, Any]:
        return {k: (v[:200] if isinstance(v, str) else v) for k in WHAT_KEYS
                if isinstance(v := d.get(k), (str, int, float)) and not isinstance(v, bool)}

    inner = doc.get("info")
    return {**fields(doc), **(fields(inner) if isinstance(inner, dict) else {})}


class AuditLog:
    def __init__(self, records: Any, retention_days: float, clock: Any = time.time) -> None:
        self._records = records  # fleet/records.SharedRecords(backend, "audit")
        self._retention_s = retention_days * 86400
        self._clock = clock
        self._worker: BatchWorker[dict[str, Any]] = BatchWorker("audit", self._write, max_weight=MAX_QUEUED,
                                                                max_batch_weight=500, interval_s=0.2)
        self.write_errors = 0

    @property
    def dropped(self) -> dict[str, int]:
        return self._worker.dropped

    def record(self, who: str, role: str, address: str, method: str, path: str, status: int,
               what: dict[str, Any]) -> None:
        """(a request's thread) Queue one entry; never blocks, never raises."""
        self._worker.put({"at": self._clock(), "who": who[:200], "role": role, "address": address[:64],
                          "method": method, "path": path[:500], "status": status, "what": what})

    def _write(self, entries: list[dict[str, Any]]) -> None:
        for e in entries:
            try:
                self._records.create(f"{e['at']:.6f}-{uuid.uuid4().hex[:8]}", ("", ""), e)
            except Exception:  # a store that restarts: the entry is lost, and counted
                self.write_errors += 1

    def entries(self, limit: int = 200, since: float | None = None, who: str | None = None) -> list[dict[str, Any]]:
        """The newest entries first (every server's), at most `limit`."""
        docs = self._records.load()
        rows = [d.body for d in docs.values() if d.body]
        if since is not None:
            rows = [r for r in rows if r.get("at", 0) >= since]
        if who is not None:
            rows = [r for r in rows if r.get("who") == who]
        return sorted(rows, key=lambda r: -float(r.get("at") or 0))[:min(limit, MAX_LISTED)]

    def prune(self) -> int:
        """Delete entries older than the retention; how many."""
        cutoff = self._clock() - self._retention_s
        try:
            old = [rid for rid, d in self._records.load().items() if float(d.body.get("at") or 0) < cutoff]
            self._records.delete(old)
        except Exception:
            return 0
        return len(old)

    def flush(self, timeout: float = 10.0) -> bool:
        return self._worker.flush(timeout)

    def close(self) -> None:
        self._worker.flush(5.0)
        self._worker.stop(5.0)
