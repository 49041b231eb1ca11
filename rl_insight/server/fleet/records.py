"""Records the servers of a fleet share through the store (`fleet_records`, server/runstore/fleet/records.py):
what a user or a process asked of one server and another server must see — a profile request created through the
UI on one server, armed by processes reporting to another, its files uploaded to a third.

Each server keeps its working copy in memory (every ingest reply reads it) and `poll`s the store every second:
records whose version moved are read again whole, parts changed since the last poll (with an overlap, for
transactions that committed late and clocks a little apart) are merged, records gone from the store are dropped.
A change to a record is a compare-and-set on its version (`update`): when another server changed it first the
caller gets the stored copy back and reapplies its change, so concurrent changes (a cancel here, a finished
analysis there) are both kept. `SharedDocument` is one such record the whole fleet edits (the scrape targets).

Invariant: the store being away never reaches ingest — a failed poll is counted and retried; a failed write is
the caller's error (the API answers 503 and the caller retries).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..runstore.backend import Backend, StoreLocation, open_backend
from ..runstore.fleet import records as table

POLL_OVERLAP_S = 10.0  # parts changed this long before the last poll are read again


@dataclass
class Doc:
    body: dict[str, Any]
    version: int
    parts: dict[str, Any] = field(default_factory=dict)


@dataclass
class Changes:
    docs: dict[str, Doc]  # new or changed records, read whole (with all their parts)
    parts: list[tuple[str, str, Any]]  # (id, part, body) changed in records otherwise unchanged
    gone: set[str]  # records deleted from the store


class SharedRecords:
    def __init__(self, store: Backend | StoreLocation, kind: str) -> None:
        self.backend = open_backend(store)
        self.location = self.backend.location
        self.kind = kind
        self._conn: Any = None
        self._lock = threading.Lock()  # one connection, used by request threads, the analysis and the poll
        self._versions: dict[str, int] = {}
        self._since: float | None = None
        self.poll_errors = 0

    def _c(self) -> Any:
        if self._conn is None or getattr(self._conn, "closed", False):
            self._conn = self.backend.connect()
        return self._conn

    # ------------------------------------------------------------------ writes
    def create(self, rid: str, run: tuple[str, str], body: dict[str, Any]) -> Doc:
        with self._lock:
            table.insert(self._c(), self.kind, rid, run, json.dumps(body), time.time())
            self._versions[rid] = 1
        return Doc(body, 1)

    def update(self, rid: str, body: dict[str, Any], version: int) -> Doc | None:
        """None when the record is now at `version + 1` with `body`; else the stored record (changed by another
        server since `version`, or deleted: then an empty Doc at version 0)."""
        with self._lock:
            if table.compare_and_set(self._c(), self.kind, rid, json.dumps(body), version, time.time()):
                self._versions[rid] = version + 1
                return None
            fresh = self._read([rid]).get(rid)
            if fresh is not None:
                self._versions[rid] = fresh.version
        return fresh if fresh is not None else Doc({}, 0)

    def put_parts(self, rid: str, run: tuple[str, str], parts: dict[str, Any]) -> None:
        with self._lock:
            table.put_parts(self._c(), self.kind, rid, run, [(k, json.dumps(v)) for k, v in parts.items()], time.time())

    def delete(self, ids: list[str]) -> None:
        if ids:
            with self._lock:
                table.delete(self._c(), self.kind, ids)
                for rid in ids:
                    self._versions.pop(rid, None)

    # ------------------------------------------------------------------ reads
    def load(self) -> dict[str, Doc]:
        """Every record, whole (at start)."""
        with self._lock:
            self._since = time.time()
            ids = list(table.versions(self._c(), self.kind))
            docs = self._read(ids)
            self._versions = {rid: d.version for rid, d in docs.items()}
        return docs

    def fetch(self, rid: str) -> Doc | None:
        """One record, whole: a record another server created since the last poll."""
        with self._lock:
            doc = self._read([rid]).get(rid)
            if doc is not None:
                self._versions[rid] = doc.version
        return doc

    def poll(self) -> Changes:
        with self._lock:
            start = time.time()
            stored = table.versions(self._c(), self.kind)
            gone = set(self._versions) - set(stored)
            moved = [rid for rid, v in stored.items() if self._versions.get(rid) != v]
            docs = self._read(moved)
            since = (self._since if self._since is not None else start) - POLL_OVERLAP_S
            parts = [(rid, part, json.loads(body)) for rid, part, _p, _e, body, _v, _at in
                     table.parts_changed_since(self._c(), self.kind, since) if rid not in docs and rid in stored]
            self._versions = {**{rid: v for rid, v in self._versions.items() if rid in stored},
                              **{rid: d.version for rid, d in docs.items()}}
            self._since = start
        return Changes(docs, parts, gone)

    def _read(self, ids: list[str]) -> dict[str, Doc]:
        docs: dict[str, Doc] = {}
        parts: list[tuple[str, str, str]] = []
        for rid, part, _project, _experiment, body, version, _at in table.rows_of(self._c(), self.kind, ids):
            if part == "":
                docs[rid] = Doc(json.loads(body), int(version))
            else:
                parts.append((rid, part, body))
        for rid, part, body in parts:
            if rid in docs:
                docs[rid].parts[part] = json.loads(body)
        return docs

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class SharedDocument:
    """One record the whole fleet shares (the scrape targets and experiments): `pull` gives it when another server
    changed it since, `push` stores this server's copy if nobody changed it meanwhile (else: pull and redo)."""

    def __init__(self, records: SharedRecords, rid: str) -> None:
        self.records, self.rid = records, rid
        self._base = -1  # the version this server's copy was made from; -1: none yet (read it whole)

    def pull(self) -> dict[str, Any] | None:
        """The stored body, when it moved past this server's copy (None: unchanged, or nothing stored yet)."""
        doc = self.records.fetch(self.rid)
        if doc is None or doc.version == self._base:
            return None
        self._base = doc.version
        return doc.body

    def push(self, body: dict[str, Any]) -> bool:
        """Stored (True), or another server changed it first (False: pull, apply the change again, push)."""
        try:
            if self._base <= 0:
                try:
                    self._base = self.records.create(self.rid, ("", ""), body).version
                    return True
                except Exception:  # another server created it first (a unique key); its copy is read next
                    self._base = -1
                    return False
            if self.records.update(self.rid, body, self._base) is None:
                self._base += 1
                return True
            self._base = -1
            return False
        except Exception:
            self._base = -1  # the store is away: this copy is read again whole once it is back
            raise
