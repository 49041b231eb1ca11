"""The audit log: every state-changing action a person or a script takes through the API — tokens created and
revoked, profiles and stack snapshots requested and cancelled, alert receivers, rules and silences changed,
experiments archived — with who, when, from where and what (docs/access.md). Data a job sends (ingest, OTLP, trace and
stack uploads, target registration) is not an action and is not logged.

Entries are kept in the run store (`fleet_records`, kind "audit": every server of a fleet writes to and reads the same
log), written by a background worker (a request never waits for it; past its bound an entry is dropped and counted),
and deleted after the store's retention (`store_retention_days`), like the runs.

Refused attempts on action routes (401: no or a wrong token, 403: a role or project that may not; a wrong sign-in)
are logged too (`refused: true`, with the status), at most REFUSED_PER_MINUTE an address, the rest counted in its
next entry (`refused_not_logged`): someone trying tokens is seen, and cannot flood the log.

Invariants: an action's entry is written once its answer is known (status < 400: the action happened) and before
the answer's end goes out (http/audit_trail.py): an action that was answered is in the log, whatever happens to the
server after; entries are never changed.
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
WHAT_KEYS = ("id", "name", "project", "experiment_name", "run_id", "role", "state", "alertname", "kind")
REFUSED_PER_MINUTE = 20  # refused attempts logged per address a minute (the rest counted)
MAX_ADDRESSES = 10_000


def what_of(answer: bytes) -> dict[str, Any]:
    """The identifying fields of a JSON answer (its own, or its `info`'s: a token's), for the log's `what`."""
    try:
        doc = json.loads(answer)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}

    def fields(d: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {k: (v[:200] if isinstance(v, str) else v) for k in WHAT_KEYS
               if isinstance(v := d.get(k), (str, int, float)) and not isinstance(v, bool)}
        if isinstance(d.get("projects"), list):  # a token's projects (None: every project, said as such)
            out["projects"] = [str(p)[:200] for p in d["projects"][:50]]
        elif "projects" in d and d["projects"] is None and "role" in d:
            out["projects"] = "every project"
        return out

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
        self._refused: dict[str, list[float]] = {}  # address -> [minute began, logged in it, not logged]

    @property
    def dropped(self) -> dict[str, int]:
        return self._worker.dropped

    def entry(self, who: str, role: str, address: str, method: str, path: str, status: int,
              what: dict[str, Any]) -> dict[str, Any]:
        return {"at": self._clock(), "who": who[:200], "role": role, "address": address[:64], "method": method,
                "path": path[:500], "status": status, "what": what}

    def write(self, entry: dict[str, Any]) -> None:
        """(a worker thread; the answer waits for it) The entry in the store now; when the store cannot take it, it
        is queued for the background writer (and counted), never lost silently."""
        try:
            self._records.create(f"{entry['at']:.6f}-{uuid.uuid4().hex[:8]}", ("", ""), entry)
        except Exception:
            self.write_errors += 1
            self._worker.put(entry)

    def refused(self, who: str, role: str, address: str, method: str, path: str, status: int,
                what: dict[str, Any]) -> bool:
        """A refused attempt, queued when its address is within REFUSED_PER_MINUTE (True), else counted for its next
        entry (False). Never blocks, never raises."""
        now = self._clock()
        if len(self._refused) >= MAX_ADDRESSES and address not in self._refused:
            self._refused.clear()
        slot = self._refused.setdefault(address, [now, 0, 0])
        if now - slot[0] >= 60:
            slot[0], slot[1] = now, 0
        if slot[1] >= REFUSED_PER_MINUTE:
            slot[2] += 1
            return False
        slot[1] += 1
        if slot[2]:
            what = {**what, "refused_not_logged": int(slot[2])}
            slot[2] = 0
        self._worker.put({**self.entry(who, role, address, method, path, status, what), "refused": True})
        return True

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
