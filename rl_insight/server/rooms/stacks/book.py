"""Stack snapshots of a run: asked of its live processes on their ingest replies, collected, grouped, kept.

`create` records which live processes of the run are expected (server/live/clients.py knows each one's host, pid,
rank, lanes and open states) and lists the request on every ingest reply of the run (`open_requests`) until it is
complete: every expected process answered (`report`), or the deadline passed (`tick`, every half second). Past the
deadline a snapshot waits on (a heartbeat at a time, up to MAX_WAIT_S after it was asked) while a process it asked
holds a state, has not answered and still beats: on a loaded host the stuck ranks are the slow ones to answer, and a
snapshot without them tells the wrong story. A process that did not answer is listed with its last-seen time and the
states it had open: the likely hang when it holds one.

On completion the snapshot is summarised (rooms/stacks/groups.py: groups, the odd ones out in one sentence, who
moved since the run's previous snapshot) and written to `<data_dir>/stacks/<id>.json`; the stored form is what the
API serves. A snapshot still pending at a server stop is completed at the next start with what it had, and says so.

Several servers on one store (a fleet) keep the snapshots in the store instead (server/fleet/shared_book.py): a
snapshot asked through one server is listed on the replies of every server its processes report to (each polls
the store every tick), each answer is stored by the server that heard it, and whichever server completes the
snapshot first (a compare-and-set) summarises every server's answers; the others take its copy.

Bounds: a few pending per run; at most `MAX_KEPT_PER_RUN` kept per run (the oldest deleted); one report's size is
bounded by the protocol, and once a snapshot holds `MAX_SNAPSHOT_BYTES` of reports later ones keep only the threads
that hold lanes and the main thread. Retention deletes a run's snapshots with the run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ....errors import ConflictError, InvalidInputError, NotFoundError
from ....fsutil import atomic_write
from ....protocol import (
    CLIENT_HEARTBEAT_S,
    DEFAULT_STACK_DEADLINE_S,
    MAX_STACK_DEADLINE_S,
    StackRequest,
    decode_stack_report,
)
from ....protocol.stacks import MAX_WAIT_S, thread_bytes
from ...control.processes import picked, refusal
from ...fleet.shared_book import SharedBook
from ...live.clients import LiveProcess
from ...workers.batch_worker import Periodic
from . import groups as stack_groups
from . import verdict as stack_verdict
from .records import StackSnapshot, key_of, run_of

log = logging.getLogger("rl_insight.server.rooms.stacks.book")

SNAPSHOT_ID = re.compile(r"^[0-9a-f]{16}$")
MAX_PENDING_PER_RUN = 4
MAX_KEPT_PER_RUN = 50
MAX_SNAPSHOT_BYTES = 64 * 2**20
MAX_PROCESSES = 4096  # answers kept per snapshot
COMPARE_WITHIN_S = 900.0  # a snapshot says who moved since the run's previous one when that is this recent


class StackBook:
    def __init__(self, root: Path, processes: Callable[[str, str], list[LiveProcess]],
                 tick_s: float = 0.5, shared: SharedBook[StackSnapshot] | None = None,
                 gone: Callable[[str, str], list[LiveProcess]] | None = None,
                 lanes_usual: Callable[[str, str], bool | None] | None = None) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._processes = processes  # the live processes of a run (ClientTracker.processes)
        self._gone = gone  # the run's processes that went silent lately (ClientTracker.gone): listed as not answering
        self._lanes_usual = lanes_usual  # the stall watch's look at a run (RunConditions.lanes_usual)
        self._lock = threading.Lock()
        self._snaps: dict[str, StackSnapshot] = {}  # id -> stored form (pending ones carry their reports)
        self._requests: dict[str, StackRequest] = {}  # pending id -> the request the replies list
        self._bytes: dict[str, int] = {}
        self.on_complete: list[Callable[[StackSnapshot], None]] = []
        self._shared = shared  # a fleet's store, or None: files under root
        self._warned_at = 0.0
        self.refused_answers = 0  # answers from processes a snapshot did not ask
        self._load()
        self._ticker = Periodic("stack-snapshots", tick_s, self.tick)

    def start(self) -> None:
        self._ticker.start()

    def stop(self) -> None:
        self._ticker.stop()

    # ------------------------------------------------------------------ persistence
    def _path(self, sid: str) -> Path:
        return self.root / f"{sid}.json"

    def _load(self) -> None:
        if self._shared is not None:
            for snap in self._shared.load():
                self._index(snap)
            return
        for f in sorted(self.root.glob("*.json")):
            if not SNAPSHOT_ID.match(f.stem):
                continue
            try:
                snap = json.loads(f.read_text())
                if snap.get("id") != f.stem or not isinstance(snap.get("reports"), dict):
                    raise ValueError("not a stack snapshot of this server")
            except (OSError, ValueError) as exc:
                log.warning("skipping unreadable stack snapshot %s: %s", f, exc)
                continue
            self._snaps[f.stem] = snap
            if snap["state"] == "pending":  # the server stopped while it was collected
                snap["note"] = "the server restarted while this snapshot was collected; it has what arrived before"
                self._complete(snap)

    def _save(self, snap: StackSnapshot) -> None:
        atomic_write(self._path(snap["id"]), json.dumps(snap, separators=(",", ":")), 0o600)

    def _index(self, snap: StackSnapshot) -> None:
        """A snapshot from the fleet's store into the book (another server's, or this one's before a restart)."""
        self._snaps[snap["id"]] = snap
        if snap["state"] == "pending":
            self._requests[snap["id"]] = StackRequest.from_wire(snap["request"])
            self._bytes.setdefault(snap["id"], 0)
        else:
            self._requests.pop(snap["id"], None)
            self._bytes.pop(snap["id"], None)

    def refresh(self) -> None:
        """(a fleet, every tick) Snapshots other servers asked for, answers they heard, snapshots they completed."""
        if self._shared is None:
            return
        changes = self._shared.poll()
        with self._lock:
            for sid in changes.gone:
                self._snaps.pop(sid, None)
                self._requests.pop(sid, None)
                self._bytes.pop(sid, None)
            for sid, doc in changes.docs.items():
                snap = self._snaps.get(sid)
                if snap is None:
                    snap = self._shared.record_of(doc)
                else:
                    self._shared.take(snap, doc)
                self._index(snap)
            for sid, part, body in changes.parts:
                if sid in self._snaps:
                    self._shared.merge_part(self._snaps[sid], part, body)
    # ------------------------------------------------------------------ asking
    def create(self, project: str, experiment_name: str, *, run_id: int | None = None, lanes: Sequence[str] = (),
               roles: Sequence[str] = (), ranks: Sequence[int] = (), native: bool = False,
               deadline_s: float = DEFAULT_STACK_DEADLINE_S, origin: str = "api", reason: str = "") -> dict[str, Any]:
        """Ask the run's live processes (those the selectors pick) for their stacks. ConflictError when no process
        of the run is alive or too many snapshots are pending; InvalidInputError when the selectors pick none of
        the live processes (ConflictError too: the message lists them)."""
        if not 1.0 <= deadline_s <= MAX_STACK_DEADLINE_S:
            raise InvalidInputError(f"deadline_s must be between 1 and {MAX_STACK_DEADLINE_S:.0f} seconds")
        live = self._processes(project, experiment_name)
        if not live:
            raise ConflictError(f"no process of run {project}/{experiment_name} is alive: nothing can answer",
                                hint="a stack snapshot needs the job running (its processes send heartbeats)")
        sid = os.urandom(8).hex()
        now = time.time()
        try:  # the one validation of what was asked (protocol/stacks.py), the same a process applies to its reply
            request = StackRequest.from_wire({"id": sid, "lanes": list(lanes), "roles": list(roles),
                                              "ranks": list(ranks), "native": native, "expires_at": now + deadline_s})
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        expected = [p for p in live if picked(request.selector, p)]
        if not expected:
            raise ConflictError(refusal(project, experiment_name, live, request.selector),
                                hint="pick lanes or ranks the run has (the timeline shows its lanes)")
        snap: StackSnapshot = {"id": sid, "project": project, "experiment_name": experiment_name, "run_id": run_id,
                "created_at": now, "deadline_at": now + deadline_s, "origin": origin, "reason": reason[:500],
                "request": request.to_wire(), "state": "pending", "expected": expected, "reports": {}}
        with self._lock:
            pending = [s for s in self._snaps.values() if s["state"] == "pending" and run_of(s) == (project,
                                                                                               experiment_name)]
            if len(pending) >= MAX_PENDING_PER_RUN:
                raise ConflictError(f"run {project}/{experiment_name} already has {len(pending)} stack snapshots "
                                    "being collected", hint="wait a few seconds for them to complete")
            self._snaps[sid] = snap
            self._requests[sid] = request
            self._bytes[sid] = 0
        if self._shared is not None:
            self._shared.create(snap)
        else:
            self._save(snap)
        return self.describe(snap)

    def open_requests(self, project: str | None, experiment_name: str | None) -> list[StackRequest]:
        """The run's snapshots being collected, for its ingest replies (cheap: most runs have none)."""
        if not self._requests or not project or not experiment_name:
            return []
        with self._lock:
            return [r for sid, r in self._requests.items() if run_of(self._snaps[sid]) == (project, experiment_name)]

    # ------------------------------------------------------------------ answers
    def report(self, sid: str, body: Any) -> dict[str, Any]:
        """One process's answer, from a process the snapshot asked (409 otherwise, and once it is complete: a late
        answer changes nothing stored). Bounded by what it holds decoded, not by its size on the wire."""
        try:
            rep = decode_stack_report(body)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        key = f"{rep['process']['host']}:{rep['process']['pid']}"
        size = rep.pop("kept_bytes")  # what it holds decoded (its size on the wire can be far less)
        done = False
        with self._lock:
            snap = self._get(sid)
            if snap["state"] != "pending":
                raise ConflictError(f"stack snapshot {sid} is complete; this answer came too late")
            if key not in {key_of(p) for p in snap["expected"]}:
                self.refused_answers += 1
                raise ConflictError(f"stack snapshot {sid} did not ask process {key[:160]}; only the processes it was "
                                    "sent to answer it", hint="a process started since is asked by the next snapshot")
            if key not in snap["reports"] and len(snap["reports"]) >= MAX_PROCESSES:
                raise ConflictError(f"stack snapshot {sid} already holds {MAX_PROCESSES} processes")
            if self._bytes[sid] + size > MAX_SNAPSHOT_BYTES:  # keep what says where each lane is
                rep["threads"] = [t for t in rep["threads"] if t["lanes"] or t["main"]] or rep["threads"][:1]
                rep["trimmed"] = True
                size = sum(thread_bytes(t) for t in rep["threads"])
            self._bytes[sid] += size
            rep["received_at"] = time.time()
            snap["reports"][key] = rep
            if self._shared is not None:
                self._shared.put_part(snap, "reports", key)
            expected = {key_of(p) for p in snap["expected"]}
            done = expected <= set(snap["reports"])
        # the last answer: grouped on the book's own thread (a thousand processes' stacks take ~0.5 s; the answering
        # process's request does not wait for it), here only when that thread is not running
        if done and not self._ticker.wake():
            self._complete(snap)
        return {"id": sid, "state": snap["state"], "process": key}

    def tick(self, now: float | None = None) -> int:
        """Complete the snapshots whose deadline passed, or (a fleet) whose processes all answered, some through
        other servers; returns how many."""
        try:
            self.refresh()
        except Exception as exc:  # the store is away: snapshots of this server's own processes still complete
            if time.monotonic() - self._warned_at > 60:
                self._warned_at = time.monotonic()
                log.warning("stack snapshots: cannot read the fleet's store (%s: %s)", type(exc).__name__, exc)
        now = time.time() if now is None else now
        with self._lock:
            due = [s for s in self._snaps.values() if s["state"] == "pending" and (
                s["deadline_at"] <= now or {key_of(p) for p in s["expected"]} <= set(s["reports"]))]
        due = [s for s in due if not self._waits_on(s, now)]
        for snap in due:
            self._complete(snap)
        return len(due)

    def _waits_on(self, snap: StackSnapshot, now: float) -> bool:
        """Whether a snapshot past its deadline waits one more heartbeat: a process it asked holds a state, has not
        answered, and was heard from since the snapshot was asked (it got the request, and is alive to answer)."""
        if now >= snap["created_at"] + max(MAX_WAIT_S, snap["deadline_at"] - snap["created_at"]):
            return False
        with self._lock:
            answered = set(snap["reports"])
            waiting = {key_of(p) for p in snap["expected"] if key_of(p) not in answered and p.get("open")}
        if not waiting:
            return False
        beating = {key_of(p) for p in self._processes(snap["project"], snap["experiment_name"])
                   if p["last_seen_ns"] / 1e9 > snap["created_at"]}
        if not waiting & beating:
            return False
        with self._lock:  # the replies list it with the later expiry, so a process that hears it late still answers
            snap["deadline_at"] = min(now + CLIENT_HEARTBEAT_S / 2, snap["created_at"] + MAX_WAIT_S)
            snap["request"]["expires_at"] = snap["deadline_at"]
            if snap["id"] in self._requests:
                self._requests[snap["id"]] = StackRequest.from_wire(snap["request"])
        return True

    def _complete(self, snap: StackSnapshot) -> None:
        if self._shared is not None and snap["state"] == "pending":  # every server's answers, for the summary
            with self._lock:
                self._shared.read_parts(snap)
        with self._lock:
            if snap["state"] != "pending":
                return
            snap["state"] = "complete"  # claimed here: later answers are refused, the ticker passes it by
            self._requests.pop(snap["id"], None)
            self._bytes.pop(snap["id"], None)
            previous = max((s for s in self._snaps.values() if s is not snap and s["state"] == "complete"
                            and run_of(s) == run_of(snap)
                            and 0 < snap["created_at"] - s["created_at"] <= COMPARE_WITHIN_S),
                           key=lambda s: s["created_at"], default=None)

        def summarise(s: StackSnapshot) -> bool:
            """(outside the lock: grouping thousands of answers takes a while, and every ingest reply reads it)"""
            s["state"] = "complete"
            answered = set(s["reports"])
            s["completed_at"] = time.time()
            # beating: heard from since it was asked, or within a heartbeat (a snapshot shorter than a heartbeat gave
            # it no time to); a process gone from the live ones stopped
            heard = {key_of(p): p["last_seen_ns"] / 1e9 for p in self._processes(*run_of(s))}
            s["missing"] = [{**p, "beating": (at := heard.get(key_of(p), 0.0)) > s["created_at"]
                             or s["completed_at"] - at < CLIENT_HEARTBEAT_S}
                            for p in s["expected"] if key_of(p) not in answered]
            asked = {key_of(p) for p in s["expected"]}
            s["missing"] += [{**p, "beating": False, "gone": True} for p in
                             (self._gone(*run_of(s)) if self._gone is not None else []) if key_of(p) not in asked]
            s["lanes_usual"] = self._lanes_usual(*run_of(s)) if self._lanes_usual is not None else None
            stack_groups.summarise(s, previous, time.time_ns())
            s["verdict"] = stack_verdict.decide(s, time.time_ns())
            return True

        summarise(snap)
        done = True
        if self._shared is not None:  # stored unless another server of the fleet completed it first (then: its copy)
            done = self._shared.update(snap, lambda s: s["state"] == "pending" and summarise(s))
            with self._lock:
                self._index(snap)
        if not done:
            return
        if self._shared is None:
            self._save(snap)
        self._prune(run_of(snap))
        for callback in self.on_complete:
            try:
                callback(snap)
            except Exception as exc:  # a listener never loses the snapshot
                log.warning("stack snapshot listener failed: %r", exc)

    def _prune(self, run: tuple[str, str]) -> None:
        with self._lock:
            kept = sorted((s for s in self._snaps.values() if run_of(s) == run and s["state"] == "complete"),
                          key=lambda s: s["created_at"])
            gone = kept[:max(0, len(kept) - MAX_KEPT_PER_RUN)]
            for s in gone:
                self._snaps.pop(s["id"], None)
        self._delete([s["id"] for s in gone])

    def _delete(self, sids: list[str]) -> None:
        if self._shared is not None:
            self._shared.forget(sids)
        for sid in sids:
            self._path(sid).unlink(missing_ok=True)

    # ------------------------------------------------------------------ reading
    def _get(self, sid: str) -> StackSnapshot:
        snap = self._snaps.get(sid) if SNAPSHOT_ID.match(sid) else None
        if snap is None and self._shared is not None and SNAPSHOT_ID.match(sid):  # asked on another server just now
            snap = self._shared.fetch(sid)
            if snap is not None:
                with self._lock:
                    self._index(snap)
        if snap is None:
            raise NotFoundError(f"no stack snapshot {sid!r}", hint="`rl-insight stacks --run RUN --list` lists them")
        return snap

    def project_of(self, sid: str) -> str:
        """The project of the run a snapshot is of (NotFoundError for none)."""
        return run_of(self._get(sid))[0]

    def get(self, sid: str, run: tuple[str, str] | None = None, reports: bool = False,
            exact: bool = False) -> dict[str, Any]:
        """One snapshot; `exact`: grouped again with line numbers (two lines of one function are two places)."""
        snap = self._get(sid)
        if run is not None and run_of(snap) != run:
            raise NotFoundError(f"no stack snapshot {sid!r} in this run")
        out = self.describe(snap, reports)
        if exact and out.get("units") is not None:
            out["groups"] = stack_groups.group(out["units"], exact=True)
            out["summary"] = stack_groups.sentence(out["groups"], int(out["completed_at"] * 1e9)) + \
                " (grouped by line)"
        return out

    def list(self, project: str, experiment_name: str) -> list[dict[str, Any]]:
        with self._lock:
            snaps = [s for s in self._snaps.values() if run_of(s) == (project, experiment_name)]
        out = []
        for s in sorted(snaps, key=lambda s: s["created_at"], reverse=True):
            d = self.describe(s)
            for k in ("units", "groups", "expected", "missing"):
                d.pop(k, None)
            out.append(d)
        return out

    def latest_complete(self, project: str, experiment_name: str) -> StackSnapshot | None:
        """The run's newest complete snapshot (the one a verdict is read from), or None."""
        with self._lock:
            snaps = [s for s in self._snaps.values() if run_of(s) == (project, experiment_name)
                     and s["state"] == "complete"]
        return max(snaps, key=lambda s: s["created_at"], default=None)

    def latest(self, project: str, experiment_name: str, origin: str | None = None) -> dict[str, Any] | None:
        with self._lock:
            snaps = [s for s in self._snaps.values() if run_of(s) == (project, experiment_name)
                     and (origin is None or s["origin"] == origin)]
        best = max(snaps, key=lambda s: s["created_at"], default=None)
        return None if best is None else self.describe(best)

    def describe(self, snap: StackSnapshot, reports: bool = False) -> dict[str, Any]:
        with self._lock:
            out = {k: v for k, v in snap.items() if k != "reports" or reports}
            out["answered"] = len(snap["reports"])
        out["expected_count"] = len(snap["expected"])
        return out

    def forget_runs(self, drop: set[tuple[str, str]]) -> int:
        """Retention: a run's snapshots go with it."""
        with self._lock:
            gone = [sid for sid, s in self._snaps.items() if run_of(s) in drop]
            for sid in gone:
                self._snaps.pop(sid, None)
                self._requests.pop(sid, None)
        self._delete(gone)
        return len(gone)
