"""The fleet registry's table (`fleet_clients`: which ingest server each client process reports to now; several
servers, one store): the latest sighting wins a row, so a server's older view never takes a client back."""

from __future__ import annotations

from typing import Any

_PUBLISH = ("INSERT INTO fleet_clients (client_id, server, project, experiment_name, last_seen) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (client_id) DO UPDATE SET server = excluded.server, project = excluded.project, "
            "experiment_name = excluded.experiment_name, last_seen = excluded.last_seen "
            "WHERE fleet_clients.last_seen <= excluded.last_seen")


def publish(conn: Any, server: str, clients: list[tuple[str, str | None, str | None, float]]) -> None:
    """(client id, project, experiment_name, last seen in unix seconds) of `server`'s live clients."""
    if clients:
        conn.executemany(_PUBLISH, [(cid, server, p, e, seen) for cid, p, e, seen in clients])


def seen_elsewhere(conn: Any, server: str, client_ids: list[str]) -> set[str]:
    """Of these clients, the ones another server has seen since `server` last published them."""
    out: set[str] = set()
    for i in range(0, len(client_ids), 500):
        part = client_ids[i:i + 500]
        out.update(r[0] for r in conn.execute(
            f"SELECT client_id FROM fleet_clients WHERE server != ? AND client_id IN ({','.join('?' * len(part))})",
            (server, *part)))
    return out


def live_runs(conn: Any, since: float) -> set[tuple[str, str]]:
    """Runs with a client seen by any server since `since` (unix seconds)."""
    return {(p or "", e or "") for p, e in conn.execute(
        "SELECT DISTINCT project, experiment_name FROM fleet_clients WHERE last_seen >= ?", (since,))}


def forget_before(conn: Any, before: float) -> int:
    return int(conn.execute("DELETE FROM fleet_clients WHERE last_seen < ?", (before,)).rowcount or 0)
