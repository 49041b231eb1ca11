"""The fleet registry's table on one PostgreSQL (runstore/fleet/clients.py): two servers publishing the same
clients at once (a client that moved, or a balancer handing its connections to either) never deadlock, and the
latest sighting wins each row."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rl_insight.server.runstore.backend import open_backend
from rl_insight.server.runstore.backend.location import parse_store
from rl_insight.server.runstore.fleet import clients as table

ROUNDS, CLIENTS = 20, 200


def test_two_servers_publishing_the_same_clients_at_once_never_deadlock(postgres_url: str) -> None:
    loc = parse_store(postgres_url, Path("."))
    conns = [open_backend(loc).connect(), open_backend(loc).connect()]
    together = threading.Barrier(2, timeout=60)
    errors: list[BaseException] = []

    def publish(conn: Any, server: str, reverse: bool, seen: float) -> None:
        try:
            for r in range(ROUNDS):
                clients = [(f"c{r:02d}-{i:03d}", "p", "e", seen + r) for i in range(CLIENTS)]
                together.wait()
                table.publish(conn, server, clients[::-1] if reverse else clients)
        except BaseException as exc:  # noqa: BLE001 - the test reports it below
            errors.append(exc)
            together.abort()

    threads = [threading.Thread(target=publish, args=(conns[0], "a", False, 1000.0)),
               threading.Thread(target=publish, args=(conns[1], "b", True, 1000.5))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        # each client has one owner: the server whose publish came first (b saw it half a second later, within
        # OWNER_STALE_S, so it does not take it over), and a row for every client
        rows = dict(conns[0].execute("SELECT server, count(*) FROM fleet_clients GROUP BY server").fetchall())
        assert sum(rows.values()) == ROUNDS * CLIENTS and set(rows) <= {"a", "b"}
        late = conns[0].execute("SELECT count(*) FROM fleet_clients WHERE last_seen < 1000.0").fetchone()[0]
        assert late == 0
    finally:
        for c in conns:
            c.close()
