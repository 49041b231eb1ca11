"""The table of what the servers of a fleet share besides runs (`fleet_records`, server/fleet/records.py).

A record (part '') changes by compare-and-set on its version, so two servers changing one record at once never
lose either change: the loser reads the record again and reapplies its change. Its parts (one per process that
reported, one per uploaded file) are written by whoever heard them, the last write winning; `changed_at` tells the
other servers which parts to read again.
"""

from __future__ import annotations

from typing import Iterable

from ..backend import StoreConnection

Row = tuple[str, str, str | None, str | None, str, int, float]  # id, part, project, experiment_name, body, version, at

_COLUMNS = "id, part, project, experiment_name, body, version, changed_at"
_PUT_PART = ("INSERT INTO fleet_records (kind, id, part, project, experiment_name, body, version, changed_at) "
             "VALUES (?, ?, ?, ?, ?, ?, 1, ?) ON CONFLICT (kind, id, part) DO UPDATE SET body = excluded.body, "
             "version = fleet_records.version + 1, changed_at = excluded.changed_at")


def insert(conn: StoreConnection, kind: str, rid: str, run: tuple[str, str], body: str, now: float) -> None:
    """A new record, at version 1."""
    conn.execute("INSERT INTO fleet_records (kind, id, part, project, experiment_name, body, version, changed_at) "
                 "VALUES (?, ?, '', ?, ?, ?, 1, ?)", (kind, rid, run[0], run[1], body, now))


def compare_and_set(conn: StoreConnection, kind: str, rid: str, body: str, version: int, now: float) -> bool:
    """The record's body replaced if it is still at `version` (it then moves to version + 1)."""
    cur = conn.execute("UPDATE fleet_records SET body = ?, version = version + 1, changed_at = ? "
                       "WHERE kind = ? AND id = ? AND part = '' AND version = ?", (body, now, kind, rid, version))
    return bool(cur.rowcount)


def put_parts(conn: StoreConnection, kind: str, rid: str, run: tuple[str, str], parts: Iterable[tuple[str, str]],
              now: float) -> None:
    """(part, body) of a record written, each replacing what was there."""
    conn.executemany(_PUT_PART, [(kind, rid, part, run[0], run[1], body, now) for part, body in parts])


def versions(conn: StoreConnection, kind: str) -> dict[str, int]:
    """Every record of `kind` and its version (small: ids only)."""
    return {r[0]: int(r[1]) for r in conn.execute(
        "SELECT id, version FROM fleet_records WHERE kind = ? AND part = ''", (kind,))}


def rows_of(conn: StoreConnection, kind: str, ids: list[str]) -> list[Row]:
    """Records and all their parts."""
    out: list[Row] = []
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        out.extend(tuple(r) for r in conn.execute(
            f"SELECT {_COLUMNS} FROM fleet_records WHERE kind = ? AND id IN ({','.join('?' * len(chunk))})",
            (kind, *chunk)))
    return out


def parts_changed_since(conn: StoreConnection, kind: str, since: float) -> list[Row]:
    return [tuple(r) for r in conn.execute(
        f"SELECT {_COLUMNS} FROM fleet_records WHERE kind = ? AND part != '' AND changed_at >= ?", (kind, since))]


def delete(conn: StoreConnection, kind: str, ids: list[str]) -> None:
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        conn.execute(f"DELETE FROM fleet_records WHERE kind = ? AND id IN ({','.join('?' * len(chunk))})",
                     (kind, *chunk))
