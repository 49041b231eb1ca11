"""Which ingest server each client process reports to now, in the shared store (`fleet_clients`,
server/runstore/fleet/clients.py).

Each server publishes its live clients every few seconds (the latest sighting wins a row). A client found on
another server since is one that moved (its server died, or a load balancer sent it elsewhere): the server it left
stops counting it (client/transport.py fails over; the new server gets its totals and open states again). A run
with no client seen anywhere for the silence timeout is gone from the whole fleet.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from ..runstore.backend import Backend, StoreLocation, open_backend
from ..runstore.fleet import clients as table


class FleetRegistry:
    def __init__(self, store: Backend | StoreLocation, server_id: str) -> None:
        self.backend = open_backend(store)
        self.location = self.backend.location
        self.server_id = server_id
        self._conn: Any = None
        self._lock = threading.Lock()  # the fleet loop publishes; a request thread asks for another server's clients

    def _c(self) -> Any:
        if self._conn is None or getattr(self._conn, "closed", False):
            self._conn = self.backend.connect()
        return self._conn

    def publish(self, clients: Sequence[Sequence[Any]], final: bool = False) -> None:
        """(client id, project, experiment_name, last seen in unix seconds[, the process's description]) of this
        server's clients; `final`: those whose final batch this server heard (it claims them)."""
        with self._lock:
            table.publish(self._c(), self.server_id, clients, final)

    def moved(self, client_ids: list[str]) -> set[str]:
        """Of these clients, the ones another server has seen since."""
        with self._lock:
            return table.seen_elsewhere(self._c(), self.server_id, client_ids)

    def processes_elsewhere(self, project: str, experiment_name: str, since: float) -> list[dict[str, Any]]:
        """The run's live processes that report to other servers (seen since `since`), as those described them."""
        with self._lock:
            return table.processes_elsewhere(self._c(), self.server_id, (project, experiment_name), since)

    def live_runs(self, since: float) -> set[tuple[str, str]]:
        with self._lock:
            return table.live_runs(self._c(), since)

    def forget_before(self, before: float) -> int:
        with self._lock:
            return table.forget_before(self._c(), before)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
