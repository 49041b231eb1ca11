"""Background work once per fleet: the store's session lock (PostgreSQL's advisory lock) on a connection of its own.

The holder does the store's background work (per-step statistics and the insight metrics on /metrics, retention,
the tidying of gone clients' open states). When its process dies its connection closes, PostgreSQL releases the
lock, and another server takes it on its next `refresh` (every few seconds). A connection that fails loses the
lease at once (another server may hold it by now); it is asked for again on a new connection. A server that
stops cleanly gives the lock back before it disconnects, so the next holder need not wait for PostgreSQL to
notice the connection gone.
"""

from __future__ import annotations

import logging

from ...errors import StoreError
from ..runstore.backend import Backend, SessionLock, StoreLocation, open_backend

log = logging.getLogger("rl_insight.server.fleet")
LEASE_KEY = 0x524C4942  # "RLIB": the background-work lock (schema migrations use another key)


class FleetLease:
    def __init__(self, store: Backend | StoreLocation, server_id: str) -> None:
        self.backend = open_backend(store)
        self.server_id = server_id
        self._conn: SessionLock | None = None
        self.held = False
        self.changes = 0  # times this server took or lost the lease

    def refresh(self) -> bool:
        """Take the lease if free, or confirm it is still ours; False when another server holds it or the store is
        unreachable."""
        was = self.held
        failures: tuple[type[BaseException], ...] = (OSError, StoreError, *self.backend.errors)
        try:
            if self._conn is None or self._conn.closed:
                self._conn, self.held = self.backend.session_lock(LEASE_KEY), False
            if self.held:
                self._conn.ping()  # still connected: still ours
            else:
                self.held = self._conn.try_take()
        except failures as exc:  # (StoreError: no new connection could be opened)
            self.held = False
            self.close()
            log.warning("fleet lease: the store is unreachable (%s); background work pauses here", exc)
        if self.held != was:
            self.changes += 1
            log.info("this server %s the fleet's background work (%s)", "took" if self.held else "gave up",
                     self.server_id)
        return self.held

    def close(self) -> None:
        """Hand the lease over (a clean stop: another server may take it at its next refresh) and disconnect."""
        if self._conn is not None:
            try:
                if self.held and not self._conn.closed:
                    self._conn.release()
            except Exception:
                pass  # (the connection is going anyway: closing it frees the lock too)
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        self.held = False
