"""The fleet loop put together (several servers on one PostgreSQL store; None on SQLite, one server): background work
on the lease holder only, clients that move between servers counted once, the scrape targets and the stalled/hung
runs shared.

The parts it joins live above this layer (the client tracker, the metric store, the run conditions, the insight
service); they come in as arguments, so this module names none of them.
"""

from __future__ import annotations

from typing import Any, Callable

from ..runstore.backend import Backend
from ..runstore.hand_over import HandOver
from ..runstore.reader import RunStoreReader
from .coordinator import FleetCoordinator
from .lease import FleetLease
from .records import SharedDocument, SharedRecords
from .registry import FleetRegistry


def build_fleet(backend: Backend | None, writer: HandOver | None, reader: RunStoreReader | None, boot_id: str, *,
                clients: Any, metric_store: Any, conditions: Any, insight: Any,
                refresh_targets: Callable[[], None], close_spans: Callable[..., None],
                mark_finished: Callable[..., None], silence_s: float) -> FleetCoordinator | None:
    if backend is None or writer is None or reader is None or not backend.shared:
        return None
    lease = FleetLease(backend, boot_id)
    fleet = FleetCoordinator(FleetRegistry(backend, boot_id), lease, clients, metric_store, reader, close_spans,
                             mark_finished, silence_s)
    fleet.on_tick.append(refresh_targets)  # another server's targets into this one's file_sd
    shared_conditions = SharedDocument(SharedRecords(backend, "conditions"), "fleet")  # the leader's stalled/hung
    fleet.on_tick.append(lambda: conditions.share(shared_conditions, lease.held))
    metric_store.own_clients()  # /metrics shows the processes this server owns (FleetCoordinator.tick)
    clients.keeps_finals = True  # a process's final batch claims it for the server that heard it
    writer.lead = lambda: lease.held
    if insight is not None:
        insight.lead = lambda: lease.held

    return fleet


def processes_elsewhere(fleet: FleetCoordinator | None, local: list[Any], project: str, experiment_name: str,
                        since: float, log: Any) -> list[Any]:
    """A run's live processes: this server's (`local`), and in a fleet those reporting to the other servers (a stack
    snapshot asks them all); the store being away leaves this server's."""
    if fleet is None:
        return local
    try:
        others = fleet.registry.processes_elsewhere(project, experiment_name, since)
    except Exception as exc:
        log.warning("cannot read the fleet's other processes of %s/%s: %s", project, experiment_name, exc)
        return local
    mine = {p["client_id"] for p in local}
    # (the other servers' are the same descriptions, stored by their trackers: fleet/registry.py)
    return local + [p for p in others if p.get("client_id") not in mine]
