"""The fleet registry's table (`fleet_clients`: which ingest server owns each client process now; several servers, one
store). The server that owns a row keeps it while its sighting is fresh: another server that also hears the process
(a load balancer alternating between them) takes it over only once the owner has not heard from it for
OWNER_STALE_S (the process moved, or its server died); so a process has one owner, which alone shows it on
/metrics. A server's older view never takes a client back. A process's final batch is its last word: the server that
heard it claims the row from any sighting no later than it (that server holds the process's final totals)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from ..backend import StoreConnection

OWNER_STALE_S = 6.0  # three fleet rounds without hearing from a process: its owner let it go
_PUBLISH = ("INSERT INTO fleet_clients (client_id, server, project, experiment_name, last_seen, process) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (client_id) DO UPDATE SET server = excluded.server, "
            "project = COALESCE(excluded.project, fleet_clients.project), "
            "experiment_name = COALESCE(excluded.experiment_name, fleet_clients.experiment_name), "
            "last_seen = excluded.last_seen, process = excluded.process "
            "WHERE (fleet_clients.server = excluded.server AND fleet_clients.last_seen <= excluded.last_seen) "
            f"OR fleet_clients.last_seen < excluded.last_seen - {OWNER_STALE_S}")
_CLAIM_FINAL = _PUBLISH + " OR fleet_clients.last_seen <= excluded.last_seen"


def publish(conn: StoreConnection, server: str, clients: Sequence[Sequence[Any]], final: bool = False) -> None:
    """(client id, project, experiment_name, last seen in unix seconds[, the process's description]) of `server`'s
    clients, in client id order: two servers publishing the same clients (one that moved, or a balancer handing
    its connections to either) take the rows' locks in one order (in their own orders they deadlocked).
    `final`: processes whose final batch `server` heard at `last seen`: claimed from any sighting no later."""
    if clients:
        conn.executemany(_CLAIM_FINAL if final else _PUBLISH,
                         [(c[0], server, c[1], c[2], c[3], json.dumps(c[4]) if len(c) > 4 else None)
                          for c in sorted(clients, key=lambda c: c[0])])


def processes_elsewhere(conn: StoreConnection, server: str, run: tuple[str, str], since: float) -> list[dict[str, Any]]:
    """The run's processes other servers have seen since `since`, as they described them."""
    out = []
    for (process,) in conn.execute("SELECT process FROM fleet_clients WHERE project = ? AND experiment_name = ? AND "
                                   "last_seen >= ? AND server != ? AND process IS NOT NULL", (*run, since, server)):
        try:
            out.append(json.loads(process))
        except ValueError:
            continue
    return out


def seen_elsewhere(conn: StoreConnection, server: str, client_ids: list[str]) -> set[str]:
    """Of these clients, the ones another server owns (it heard them first, or `server` stopped hearing them)."""
    out: set[str] = set()
    for i in range(0, len(client_ids), 500):
        part = client_ids[i:i + 500]
        out.update(r[0] for r in conn.execute(
            f"SELECT client_id FROM fleet_clients WHERE server != ? AND client_id IN ({','.join('?' * len(part))})",
            (server, *part)))
    return out


def live_runs(conn: StoreConnection, since: float) -> set[tuple[str, str]]:
    """Runs with a client seen by any server since `since` (unix seconds)."""
    return {(p or "", e or "") for p, e in conn.execute(
        "SELECT DISTINCT project, experiment_name FROM fleet_clients WHERE last_seen >= ?", (since,))}


def forget_before(conn: StoreConnection, before: float) -> int:
    return int(conn.execute("DELETE FROM fleet_clients WHERE last_seen < ?", (before,)).rowcount or 0)
