"""The fleet loop of one ingest server (several servers, one PostgreSQL store), every `interval_s`:

1. publish this server's live clients to the registry, and read again what else the fleet shares (scrape targets);
2. clients another server owns (it heard them first and still does, this one stopped hearing them, or it heard
   their final batch): stop tracking them (nothing of theirs is cut short or finished here) and never show them on
   this server's /metrics; the clients this server owns are shown (`MetricStore.set_owned`), a new client only
   once a round confirmed it, so that Prometheus, which scrapes every server, counts each process once even behind
   a balancer that alternates. Every client a round asks about was published by it first (live, final, or only
   heard), so the registry's row is the one verdict both servers read: a process that finished between two rounds
   of both servers is never claimed by each (before, neither published it and both showed it). A process's final
   batch carries all its totals (client/batching.py), so the server that heard it last shows them complete;
3. take or keep the lease; its holder tidies after what is gone from the whole fleet: states left open in the
   store by runs whose clients no server has seen for the silence timeout are closed as cut short at the run's
   last sign of life, and such runs, unless their processes finished them, are marked finished (lost) — a
   client killed together with its server, or while no server ran. A state still open somewhere is never
   closed: its client is alive and reports it.

Invariant: a failure of the store (unreachable, restarting) only skips a round; ingest never waits on this loop.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

from typing_extensions import TypedDict

from ...protocol import SpanRecord
from ..workers.batch_worker import Periodic
from .lease import FleetLease
from .registry import FleetRegistry

log = logging.getLogger("rl_insight.server.fleet")
REGISTRY_KEEP_S = 86400.0  # registry rows of clients not seen for a day are deleted
FINAL_WATCH_S = 30.0  # a process claimed by its final batch is asked about this long (another final may follow)



class FleetHealth(TypedDict):
    """/healthz's word on this server in the fleet: its id, whether it holds the lease for the background work, the
    clients that moved to another server, the states closed for clients gone, and errors."""

    server: str
    background_work: bool
    clients_moved_away: int
    states_closed_for_gone_clients: int
    errors: int

class FleetCoordinator:
    def __init__(self, registry: FleetRegistry, lease: FleetLease, tracker: Any, metric_store: Any, reader: Any,
                 close_spans: Callable[[list[SpanRecord]], None], mark_finished: Callable[..., None],
                 silence_s: float, interval_s: float = 2.0) -> None:
        self.registry, self.lease, self.tracker, self.metric_store = registry, lease, tracker, metric_store
        self._reader, self._close_spans, self._mark_finished = reader, close_spans, mark_finished
        self.silence_s = silence_s
        self.moved_away = 0  # clients that moved to another server
        self.closed = 0  # states the janitor closed
        self.ended = 0  # runs the janitor marked finished
        self.errors = 0
        self.on_tick: list[Callable[[], None]] = []  # other shared state read again each round (scrape targets)
        self._finals_watched: dict[str, float] = {}  # claimed by a final batch here -> asked about until (monotonic)
        self._loop = Periodic("fleet", interval_s, self.tick)

    @property
    def server_id(self) -> str:
        return self.registry.server_id

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
        self.lease.close()
        self.registry.close()

    def tick(self) -> None:
        try:
            asked = self._publish()
            elsewhere = self.registry.moved(sorted(asked))
            moved = self.metric_store.set_owned(asked - elsewhere, elsewhere)  # owned here before, another's now
            if elsewhere:  # another server's: nothing of theirs is cut short or finished here
                self.tracker.forget(elsewhere)
                for cid in elsewhere:
                    self._finals_watched.pop(cid, None)  # decided: a later round asks no more
            if moved:
                self.moved_away += len(moved)
                dropped = sum(self.metric_store.forget_client(cid) for cid in moved)
                log.info("%d client(s) moved to another server; %d series only they fed left /metrics here",
                         len(moved), dropped)
        except Exception as exc:  # the store is away: the next round tries again
            self.errors += 1
            log.warning("fleet registry round failed: %s: %s", type(exc).__name__, exc)
        for refresh in self.on_tick:
            try:
                refresh()
            except Exception as exc:
                self.errors += 1
                log.warning("fleet round: %s failed: %s: %s", getattr(refresh, "__qualname__", refresh),
                            type(exc).__name__, exc)
        if self.lease.refresh():
            try:
                self.tidy()
            except Exception as exc:
                self.errors += 1
                log.warning("fleet tidying failed: %s: %s", type(exc).__name__, exc)

    def _publish(self) -> set[str]:
        """This server's sightings into the registry: its live clients, the processes whose final batch it heard
        (claimed), and any other client heard since the last round. Returns every client the round decides on."""
        heard = self.metric_store.undecided_clients()  # (before the publish: each one asked is published)
        live = self.tracker.snapshot()
        finals = self.tracker.take_finals()
        now, wall = time.monotonic(), time.time()
        known = {c[0] for c in live} | {c[0] for c in finals}
        self.registry.publish(live + [(cid, None, None, wall) for cid in sorted(heard - known)])
        self.registry.publish(finals, final=True)
        for cid, *_ in finals:
            if len(self._finals_watched) < 100_000:
                self._finals_watched[cid] = now + FINAL_WATCH_S
        self._finals_watched = {c: t for c, t in self._finals_watched.items() if t > now}
        return known | heard | set(self._finals_watched)

    def tidy(self, now: float | None = None) -> None:
        """(the lease holder) Close what runs gone from the whole fleet left open, and finish those runs."""
        now = time.time() if now is None else now
        alive = self.registry.live_runs(now - self.silence_s)
        closing: list[SpanRecord] = []
        runs: dict[tuple[str, str], tuple[float, bool]] = {}  # run -> (last sign of life, finished by its processes)
        for project, experiment, last_seen, finished, (sid, trace, parent, name, lane, start, attrs) in \
                self._reader.runs.open_states(100_000):
            run = (project, experiment)
            if run in alive or last_seen > now - self.silence_s:
                continue  # a client of the run reports somewhere (or did just now): its states are its own
            try:
                a = json.loads(attrs)
            except ValueError:
                a = {}
            a = {**(a if isinstance(a, dict) else {}), "project": project, "experiment_name": experiment,
                 "cut_short": True, "cut_short_reason": "its client stopped reporting to every server of the fleet"}
            closing.append(SpanRecord(sid, trace, parent, name, lane, "state", start, max(start, int(last_seen * 1e9)),
                                      a, 256))
            runs[run] = (last_seen, finished)
        if closing:
            self._close_spans(closing)
            self.closed += len(closing)
        for (project, experiment), (last_seen, finished) in runs.items():
            if finished:  # its processes finished it (the one killed with its server left this state open): closing
                self._mark_finished(project, experiment)  # the state is data that makes a run live; it ends clean again
                continue
            self._mark_finished(project, experiment, {
                "reason": "no server of the fleet heard from its processes for "
                          f"{self.silence_s:.0f} s (they or their server stopped without finishing)", "lanes": [],
                "at": last_seen})
            self.ended += 1
        self.registry.forget_before(now - REGISTRY_KEEP_S)

    def health(self) -> FleetHealth:
        return {"server": self.server_id, "background_work": self.lease.held, "clients_moved_away": self.moved_away,
                "states_closed_for_gone_clients": self.closed, "errors": self.errors}
