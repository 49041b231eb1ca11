"""A book of records (profile requests, stack snapshots) kept in a fleet's store instead of one server's files
(server/fleet/records.py): each record a dict, some of whose fields are maps filled by many writers (the processes
of a profile request, the answers to a stack snapshot) and stored as parts, one row per entry, so that two servers
hearing two processes never overwrite each other.

The record itself changes by compare-and-set (`update`): when another server changed it first, its stored copy is
taken into the book's dict (`take`, in place: other threads may hold it) and the change applied again.

Generic in the book's record type (`SharedBook[StackSnapshot]`, a TypedDict): a record is a JSON object at run
time, which this module reads and writes by its keys; the book's own code is typed by its record.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar, cast

from ...errors import StoreError
from .records import Changes, Doc, SharedRecords

CAS_ATTEMPTS = 8
Record = dict[str, Any]
R = TypeVar("R")  # the book's record (a dict at run time)


class SharedBook(Generic[R]):
    def __init__(self, records: SharedRecords, id_of: Callable[[R], str],
                 run_of: Callable[[R], tuple[str, str]], fields: tuple[str, ...],
                 merge: Callable[[R, str, str, Any], None] | None = None) -> None:
        self.records = records
        self.id_of, self.run_of = id_of, run_of
        self.fields = fields  # the record's maps stored as parts "<field>:<key>"
        self._merge = merge  # (record, field, key, stored entry): how another server's entry joins the book's copy
        self._base: dict[str, int] = {}  # the stored version each in-memory record was last made equal to

    def record_of(self, doc: Doc) -> R:
        rec = cast(R, {**doc.body, **{f: {} for f in self.fields}})
        for part, body in doc.parts.items():
            self.merge_part(rec, part, body)
        return rec

    def merge_part(self, rec: R, part: str, body: Any) -> None:
        field, _, key = part.partition(":")
        if field not in self.fields:
            return
        if self._merge is not None:
            self._merge(rec, field, key, body)
        else:
            cast(Record, rec)[field][key] = body

    def _body(self, rec: R) -> Record:
        return {k: v for k, v in cast(Record, rec).items() if k not in self.fields}

    def load(self) -> list[R]:
        docs = self.records.load()
        self._base = {rid: d.version for rid, d in docs.items()}
        return [self.record_of(d) for d in docs.values()]

    def fetch(self, rid: str) -> R | None:
        doc = self.records.fetch(rid)
        if doc is None:
            return None
        self._base[rid] = doc.version
        return self.record_of(doc)

    def create(self, rec: R) -> None:
        rid = self.id_of(rec)
        self._base[rid] = self.records.create(rid, self.run_of(rec), self._body(rec)).version
        for field in self.fields:
            for key in cast(Record, rec)[field]:
                self.put_part(rec, field, key)

    def update(self, rec: R, mutate: Callable[[R], bool]) -> bool:
        """`mutate` has been applied to `rec`; stored, or applied again to the stored copy another server changed
        first. False when, applied to that copy, it had nothing left to do (someone else did it)."""
        rid = self.id_of(rec)
        for _ in range(CAS_ATTEMPTS):
            fresh = self.records.update(rid, self._body(rec), self._base.get(rid, 1))
            if fresh is None:
                self._base[rid] = self._base.get(rid, 1) + 1
                return True
            if fresh.version == 0:
                raise StoreError(f"{self.records.kind} {rid} was deleted by another server of the fleet")
            self.take(rec, fresh)
            if not mutate(rec):
                return False
        raise StoreError(f"{self.records.kind} {rid} kept changing on other servers; try again")

    def take(self, rec: R, doc: Doc) -> None:
        """The stored copy into the book's (the same dict: the analysis thread and requests may hold it)."""
        d = cast(Record, rec)
        kept = {f: d.get(f, {}) for f in self.fields}
        d.clear()
        d.update(doc.body, **kept)
        for part, body in doc.parts.items():
            self.merge_part(rec, part, body)
        self._base[self.id_of(rec)] = doc.version

    def read_parts(self, rec: R) -> None:
        """Every part the store holds of `rec` merged into it (what other servers heard, before summing it up)."""
        doc = self.records.fetch(self.id_of(rec))
        for part, body in (doc.parts.items() if doc is not None else ()):
            self.merge_part(rec, part, body)

    def put_part(self, rec: R, field: str, key: str) -> None:
        self.records.put_parts(self.id_of(rec), self.run_of(rec), {f"{field}:{key}": cast(Record, rec)[field][key]})

    def forget(self, rids: list[str]) -> None:
        self.records.delete(rids)
        for rid in rids:
            self._base.pop(rid, None)

    def poll(self) -> Changes:
        return self.records.poll()

    def close(self) -> None:
        self.records.close()
