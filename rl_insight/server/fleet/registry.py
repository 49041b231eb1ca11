"""Which ingest server each client process reports to now, in the shared store (`fleet_clients`).

Each server publishes its live clients every few seconds (the latest sighting wins a row). A client found on
another server since is one that moved (its server died, or a load balancer sent it elsewhere): the server it left
stops counting it (client/transport.py fails over; the new server gets its totals and open states again). A run
with no client seen anywhere for the silence timeout is gone from the whole fleet.
"""

from __future__ import annotations

from typing import Any

from ..runstore.location import StoreLocation
from ..runstore.schema import connect

_PUBLISH = ("INSERT INTO fleet_clients (client_id, server, project, experiment_name, last_seen) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (client_id) DO UPDATE SET server = excluded.server, project = excluded.project, "
            "experiment_name = excluded.experiment_name, last_seen = excluded.last_seen "
            "WHERE fleet_clients.last_seen <= excluded.last_seen")


class FleetRegistry:
    def __init__(self, location: StoreLocation, server_id: str) -> None:
        self.location = location
        self.server_id = server_id
        self._conn: Any = None

    def _c(self) -> Any:
        if self._conn is None or getattr(self._conn, "closed", False):
            self._conn = connect(self.location)
        return self._conn

    def publish(self, clients: list[tuple[str, str | None, str | None, float]]) -> None:
        """(client id, project, experiment_name, last seen in unix seconds) of this server's live clients."""
        if clients:
            self._c().executemany(_PUBLISH, [(cid, self.server_id, p, e, seen) for cid, p, e, seen in clients])

    def moved(self, client_ids: list[str]) -> set[str]:
        """Of these clients, the ones another server has seen since."""
        out: set[str] = set()
        for i in range(0, len(client_ids), 500):
            part = client_ids[i:i + 500]
            out.update(r[0] for r in self._c().execute(
                f"SELECT client_id FROM fleet_clients WHERE server != ? AND client_id IN ({','.join('?' * len(part))})",
                (self.server_id, *part)))
        return out

    def live_runs(self, since: float) -> set[tuple[str, str]]:
        """Runs with a client seen by any server since `since` (unix seconds)."""
        return {(p or "", e or "") for p, e in self._c().execute(
            "SELECT DISTINCT project, experiment_name FROM fleet_clients WHERE last_seen >= ?", (since,))}

    def forget_before(self, before: float) -> int:
        return int(self._c().execute("DELETE FROM fleet_clients WHERE last_seen < ?", (before,)).rowcount or 0)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
