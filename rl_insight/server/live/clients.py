"""Client liveness: which training processes are alive, and what they left open when they went silent.

verl's workers are Ray actors that never call `finish()`; `ray.shutdown()` kills them, so no final
batch arrives. Clients send a heartbeat while idle (`client/delivery.py`), so silence for
`silence_s` means the process is gone. Its open states are then closed at its last-seen time and
marked `cut_short` (the RL state timeline shows where a process died instead of a state open
forever), and a run whose clients have all finished or gone silent is marked finished.

Across a restart: the tracker starts empty, so states the previous boot stored as open are handed to it
(`inherit`). A live client announces its open states again when it sees the new boot id; whatever nobody
claims (announced again or ended) within `silence_s` of the boot belonged to a process that died while the
server was down, and is closed as cut short at its run's last sign of life before the restart.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

from typing_extensions import TypedDict

from ...protocol import ClientInfo, SpanRecord
from ..workers.batch_worker import Periodic

MAX_CLIENTS = 100_000
MAX_OPEN_PER_CLIENT = 10_000
MAX_LANES_PER_CLIENT = 64
GONE_KEPT_S = 900.0  # a process that went silent is remembered this long (a stack snapshot names it: the likely hang)
MAX_GONE_PER_RUN = 64


class OpenState(TypedDict):
    lane: str
    state: str
    since_ns: int


class LiveProcess(TypedDict):
    """A live process of a run as `ClientTracker.processes` describes it: who it is, its last word, its open states
    (what a control request's selector picks from, and what a stack snapshot lists of a process that did not
    answer)."""

    client_id: str
    host: str
    pid: int | None  # (a client that did not say: an OTLP exporter, a hand-made batch)
    rank: int | None
    lanes: list[str]
    last_seen_ns: int
    open: list[OpenState]


class _Client:
    __slots__ = ("last_seen_mono", "last_seen_ns", "run", "open", "final", "host", "pid", "rank", "lanes", "steps")

    def __init__(self) -> None:
        self.host: str = ""
        self.pid: int | None = None
        self.rank: int | None = None
        self.lanes: set[str] = set()  # lanes this client reported states on (bounded): who a request selects
        self.steps = False  # it logs the run's step metric (the trainer's driver): its silence ends the run, lost
        self.last_seen_mono = 0.0
        self.last_seen_ns = 0
        self.run: tuple[str, str] | None = None
        self.open: dict[str, SpanRecord] = {}
        self.final = False


class ClientTracker:
    def __init__(self, silence_s: float, close_spans: Callable[[list[SpanRecord]], None],
                 mark_finished: Callable[..., None]) -> None:
        self.silence_s = silence_s
        self._close_spans = close_spans
        self._mark_finished = mark_finished
        # told (host, pid) of each client that went silent: what else it left half-done (a profiling window)
        self.on_silent: list[Callable[[str, int], None]] = []
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        # states open at the previous boot, by (project, experiment, span id): (record, end if nobody claims it)
        self._orphans: dict[tuple[str, str, str], tuple[SpanRecord, int]] = {}
        self._orphans_due = 0.0
        self._lost: dict[tuple[str, str], dict[str, Any]] = {}  # runs whose step logger went silent: how they end
        # processes that went silent without a goodbye, by run: as they were last seen, with when they were dropped
        self._gone: dict[tuple[str, str], list[tuple[float, LiveProcess]]] = {}
        # a fleet's server: the processes whose final batch came here since its last round (id, run, unix s)
        self.keeps_finals = False
        self._finals: dict[str, tuple[str, str | None, str | None, float]] = {}
        self.cut_short = 0  # spans closed because their client went silent or finished with them open
        self.untracked = 0  # open spans or clients beyond the bounds (not closed automatically)
        self._reaper = Periodic("liveness", max(0.2, min(5.0, self.silence_s / 4)), self.reap)

    def start(self) -> None:
        self._reaper.start()

    def stop(self) -> None:
        self._reaper.stop()

    def inherit(self, spans: Sequence[tuple[SpanRecord, int]]) -> None:
        """States the previous boot left open, each with the end it gets if no client claims it in `silence_s`."""
        with self._lock:
            for s, end_ns in spans:
                self._orphans[(s.project, s.experiment_name, s.id)] = (s, end_ns)
            self._orphans_due = time.monotonic() + self.silence_s

    def orphans(self) -> int:
        with self._lock:
            return len(self._orphans)

    def seen(self, client: ClientInfo, starts: Sequence[SpanRecord], ends: Sequence[SpanRecord], final: bool,
             logs_steps: bool = False) -> None:
        """Record one batch of a client (called by ingest); `logs_steps`: the batch carried the run's step."""
        now_mono, now_ns = time.monotonic(), time.time_ns()
        closed: list[SpanRecord] = []
        finished_run: tuple[str, str] | None = None
        with self._lock:
            if self._orphans:  # announced again or ended: claimed by a live process
                for s in (*starts, *ends):
                    self._orphans.pop((s.project, s.experiment_name, s.id), None)
            c = self._clients.get(client.id)
            if c is None:
                if len(self._clients) >= MAX_CLIENTS:
                    self.untracked += 1
                    return
                c = self._clients[client.id] = _Client()
            c.last_seen_mono, c.last_seen_ns = now_mono, now_ns
            c.host, c.pid = client.host, client.pid
            c.steps = c.steps or logs_steps
            if logs_steps and c.run is not None:
                self._lost.pop(c.run, None)  # a step logger of the run is here: whatever was lost came back
            if client.rank is not None:
                c.rank = client.rank
            for s in starts:
                if s.lane and len(c.lanes) < MAX_LANES_PER_CLIENT:
                    c.lanes.add(s.lane)
            if client.project is not None or client.experiment_name is not None:
                c.run = (client.project or "", client.experiment_name or "")
            for s in starts:  # starts first: a state may start and end within one batch
                if s.kind != "state":
                    continue
                if len(c.open) >= MAX_OPEN_PER_CLIENT:
                    self.untracked += 1
                    continue
                c.open[s.id] = s
            for s in ends:
                c.open.pop(s.id, None)
            if final:
                # finish() / exit: states still open were abandoned by the process (e.g. an exception)
                closed = self._cut(c, now_ns, "client finished")
                c.final = True
                finished_run = self._run_done(c)
                del self._clients[client.id]
                if self.keeps_finals and len(self._finals) < MAX_CLIENTS:
                    self._finals[client.id] = (client.id, c.run[0] if c.run else None, c.run[1] if c.run else None,
                                               now_ns / 1e9)
        if closed:
            self._close_spans(closed)
        if finished_run is not None:
            self._end(finished_run)

    def reap(self, now_mono: float | None = None) -> int:
        """Close the open states of clients silent for `silence_s`; returns how many were closed."""
        now_mono = time.monotonic() if now_mono is None else now_mono
        closed: list[SpanRecord] = []
        runs: set[tuple[str, str]] = set()
        silent: list[tuple[str, int]] = []
        lost_now: list[tuple[str, str]] = []
        with self._lock:
            if self._orphans and now_mono >= self._orphans_due:
                for s, end_ns in self._orphans.values():
                    closed.append(
                        SpanRecord(
                            s.id,
                            s.trace_id,
                            s.parent_id,
                            s.name,
                            s.lane,
                            s.kind,
                            s.start_ns,
                            max(s.start_ns, end_ns),
                            {
                                **s.attributes,
                                "cut_short": True,
                                "cut_short_reason": "client silent across a server restart",
                            },
                            s.size + 48,
                        )
                    )
                    orphan_run = (s.project, s.experiment_name)
                    if not any(c.run == orphan_run for c in self._clients.values()):
                        runs.add(orphan_run)
                self.cut_short += len(self._orphans)
                self._orphans.clear()
            for stale in [r for r, g in self._gone.items() if now_mono - g[-1][0] > GONE_KEPT_S]:
                del self._gone[stale]  # (bounded by the runs that lost a process in the last GONE_KEPT_S)
            for cid in [cid for cid, c in self._clients.items() if now_mono - c.last_seen_mono > self.silence_s]:
                c = self._clients.pop(cid)
                if c.run is not None:
                    gone = self._gone.setdefault(c.run, [])
                    gone.append((now_mono, self._describe(cid, c, now_mono, time.time_ns())))
                    del gone[:-MAX_GONE_PER_RUN]
                if c.pid is not None:
                    silent.append((c.host, c.pid))
                if c.steps and c.run is not None and c.run not in self._lost:
                    # the process that logs the run's steps is gone without a word: the run ends lost, with what was
                    # open then (its own states and its peers')
                    lanes = sorted({s.lane for x in (c, *self._clients.values()) if x.run == c.run
                                    for s in x.open.values() if s.lane})[:64]
                    self._lost[c.run] = {"reason": f"the process logging the run's steps ({c.host}:{c.pid}) stopped "
                                                   f"reporting without finishing: killed, crashed, or its node gone",
                                         "lanes": lanes, "at": c.last_seen_ns / 1e9}
                    if not any(x.run == c.run for x in self._clients.values()):
                        lost_now.append(c.run)
                closed.extend(self._cut(c, c.last_seen_ns, "client silent"))
                run = self._run_done(c)
                if run is not None:
                    runs.add(run)
        if closed:
            self._close_spans(closed)
        for run in runs | set(lost_now):
            self._end(run)
        for host, pid in silent:
            for callback in self.on_silent:
                callback(host, pid)
        return len(closed)

    def processes(self, project: str, experiment_name: str) -> list[LiveProcess]:
        """The live processes of a run: who they are (host, pid, rank, lanes), when each was last heard from,
        and the states it has open (lane, state, since): what a request selects and whom a snapshot expects."""
        run = (project, experiment_name)
        now_mono, now_ns = time.monotonic(), time.time_ns()
        with self._lock:
            return [self._describe(cid, c, now_mono, now_ns) for cid, c in self._clients.items() if c.run == run]

    def gone(self, project: str, experiment_name: str) -> list[LiveProcess]:
        """The run's processes that went silent (no goodbye) in the last GONE_KEPT_S, as they were last seen: their
        open states then included. A stack snapshot lists them as not answering (the likely hang)."""
        now_mono = time.monotonic()
        with self._lock:  # (reap forgets the runs whose losses are all older than GONE_KEPT_S)
            live = {(c.host, c.pid) for c in self._clients.values() if c.run == (project, experiment_name)}
            return [p for at, p in self._gone.get((project, experiment_name), [])
                    if now_mono - at <= GONE_KEPT_S and (p["host"], p["pid"]) not in live]

    @staticmethod
    def _describe(cid: str, c: Any, now_mono: float, now_ns: int) -> LiveProcess:
        return {"client_id": cid, "host": c.host, "pid": c.pid, "rank": c.rank, "lanes": sorted(c.lanes),
                "last_seen_ns": now_ns - int((now_mono - c.last_seen_mono) * 1e9),
                "open": [OpenState(lane=s.lane, state=s.name, since_ns=s.start_ns)
                         for s in sorted((s for s in c.open.values() if s.lane), key=lambda s: s.lane or "")][:64]}

    def _end(self, run: tuple[str, str]) -> None:
        """The run's last client is gone: finished, or lost when its step logger had gone silent."""
        with self._lock:
            lost = self._lost.pop(run, None)
        if lost is None:
            self._mark_finished(*run)
        else:
            self._mark_finished(*run, lost=lost)

    def snapshot(self) -> list[tuple[str, str | None, str | None, float, LiveProcess]]:
        """(client id, project, experiment_name, last seen in unix seconds, the process as `processes` describes
        it) of every tracked client: the fleet registry's view of this server, whom another server's stack
        snapshot may ask."""
        now_mono, now_ns = time.monotonic(), time.time_ns()
        with self._lock:
            return [(cid, c.run[0] if c.run else None, c.run[1] if c.run else None, c.last_seen_ns / 1e9,
                     self._describe(cid, c, now_mono, now_ns)) for cid, c in self._clients.items()]

    def take_finals(self) -> list[tuple[str, str | None, str | None, float]]:
        """(client id, project, experiment_name, unix seconds) of the processes whose final batch this server heard
        since the last call (a fleet round claims them: this server holds their final totals)."""
        with self._lock:
            out, self._finals = list(self._finals.values()), {}
            return out

    def forget(self, client_ids: set[str]) -> int:
        """Clients that moved to another server: no longer tracked here, and nothing of theirs is closed or finished
        (they are alive, and the server they moved to has their open states). Returns how many were tracked."""
        with self._lock:
            return sum(self._clients.pop(cid, None) is not None for cid in client_ids)

    def live_clients(self) -> int:
        with self._lock:
            return len(self._clients)

    def _cut(self, c: _Client, end_ns: int, why: str) -> list[SpanRecord]:
        out = []
        for s in c.open.values():
            attrs = {**s.attributes, "cut_short": True, "cut_short_reason": why}
            out.append(SpanRecord(s.id, s.trace_id, s.parent_id, s.name, s.lane, s.kind, s.start_ns,
                                  max(s.start_ns, end_ns), attrs, s.size + 48))
        c.open.clear()
        self.cut_short += len(out)
        return out

    def _run_done(self, gone: _Client) -> tuple[str, str] | None:
        """The gone client's run, when no other tracked client still belongs to it (lock held)."""
        if gone.run is None:
            return None
        if any(c.run == gone.run for c in self._clients.values() if c is not gone):
            return None
        return gone.run
