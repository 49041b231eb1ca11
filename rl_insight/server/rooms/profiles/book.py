"""Profile requests and the traces they bring back: the server side of "profile step N on these ranks".

A request is created by the CLI or the UI, rides on the ingest replies of its run's clients (they match
it to their lanes, role and rank), and collects what each matching process reports and uploads. Each
request lives in its own directory under `<data_dir>/profiles/<id>/` (`request.json` plus the uploaded
`.json.gz` traces, partial uploads under `.partial/`, the analysis under `report/`), so requests,
statuses and half-done uploads survive a server restart; the in-memory index is rebuilt from disk.
Several servers on one store (a fleet) keep the records in the store instead (rooms/profiles/shared.py) and the
traces in a directory they all mount; each polls the store every second (`refresh`), so a request made through
one server is armed by processes reporting to another, and its statuses and files are seen from all.

What processes report is appended to `processes.jsonl` (one line per report, compacted now and then), so a
status report costs the same with 1,000 processes as with one; `request.json` is rewritten only when the
request itself changes (cancelled, a file completed, the analysis moved).

Every completed trace is analysed by the offline analysis (the same code as `rl-insight analyze`) in a child
process bounded in time and memory (analysis/isolated.py), one request at a time: no upload can freeze or
exhaust the server, and a burst of uploads never competes with ingest for more than one core. An analysis
that fails or is killed ends `failed` with the reason; one interrupted by a server stop runs once more at
the next start, never more.
"""

from __future__ import annotations

import builtins
import logging
import os
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence, cast

from ....analysis.isolated import REPORT_FILES
from ....errors import ConflictError, InvalidInputError, NotFoundError, PayloadTooLargeError
from ....protocol import (
    CLIENT_HEARTBEAT_S,
    DEFAULT_PROFILE_ACTIVITIES,
    DEFAULT_PROFILE_BYTES,
    DEFAULT_PROFILE_TOOL,
    DEFAULT_PROFILE_TTL_S,
    DEFAULT_PROFILE_WINDOW_S,
    MAX_PROFILE_TTL_S,
    PROCESS_TERMINAL,
    ProfileRequest,
)
from ....protocol.profiles import decode_process_report
from ...live.step_clock import StepClock
from ...workers.batch_worker import Periodic
from .analysis import REQUEST_FILES_FACTOR, ProfileAnalysis
from .files import RequestFiles
from .records import ProcessEntry, ProfileRecord, RequestState, RequestWire, run_of
from .shared import SharedRequests

log = logging.getLogger("rl_insight.server.rooms.profiles.book")

# gzip'd torch / trace_view JSON, nsys SQLite exports, torch_memory snapshot pickles (read by the analysis' safe
# unpickler)
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]{0,180}\.(?:json\.gz|sqlite|pickle|pkl)$")
REQUEST_ID = re.compile(r"^[0-9a-f]{16}$")
MAX_ACTIVE_PER_RUN = 8
MAX_PROCESSES_PER_REQUEST = 1024
MAX_UNKNOWN_RUN_REQUESTS = 64  # active requests for runs the store has not seen yet (a job about to start)
ORPHAN_GRACE_S = 86400.0  # an ended request of a run that never appeared is deleted this long after it expired
POLL_S = 1.0  # a fleet's servers read what the others changed this often
PASSED_GRACE_S = CLIENT_HEARTBEAT_S + 5.0  # after its first step ended, a request no process took is over


def _now() -> float:
    return time.time()


class ProfileBook:
    def __init__(self, root: Path, *, analyze: bool = True, max_active_per_run: int = MAX_ACTIVE_PER_RUN,
                 clock: StepClock | None = None, analysis_timeout_s: float = 600.0,
                 analysis_max_memory_bytes: int = 8 * 2**30,
                 run_exists: Callable[[str, str], bool] | None = None,
                 shared: SharedRequests | None = None) -> None:
        self.root = root
        # whether the run store knows a run: requests for runs that never appear are bounded and swept
        self.run_exists = run_exists
        self.analysis_timeout_s = analysis_timeout_s
        self.analysis_max_memory_bytes = analysis_max_memory_bytes
        # where the records live: request.json and a process journal per request, or a fleet's store
        self._files: RequestFiles | SharedRequests = shared or RequestFiles(root, lambda d: bool(REQUEST_ID.match(d)))
        self._shared = shared
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._records: dict[str, ProfileRecord] = {}
        self._requests: dict[str, ProfileRequest] = {}  # each record's request, decoded once (every reply lists them)
        self._by_run: dict[tuple[str, str], list[str]] = {}  # request ids per run: every ingest reply looks one run up
        self.clock = clock if clock is not None else StepClock()  # each run's step clock, from its clients' samples
        self._max_active = max_active_per_run
        self._load()
        self.analysis = ProfileAnalysis(self, analyze)  # completed traces analysed on a thread of their own
        self.refresh_errors = 0
        self._warned_at = 0.0
        self._poll = Periodic("profile-requests", POLL_S, self._refresh_quietly).start() if shared else None

    # ------------------------------------------------------------------ persistence
    def _dir(self, rid: str) -> Path:
        if not REQUEST_ID.match(rid):
            raise NotFoundError(f"no profile request {rid!r}")
        return self.root / rid

    def _load(self) -> None:
        for rec in self._files.load():
            self._index(rec)

    def _index(self, rec: ProfileRecord) -> None:
        rid = rec["request"]["id"]
        self._requests[rid] = ProfileRequest.from_wire(rec["request"])
        ids = self._by_run.setdefault(run_of(rec), [])
        if rid not in ids:  # (a request read from the store by two threads at once is listed once)
            ids.append(rid)
        self._records[rid] = rec

    def _update(self, rec: ProfileRecord, mutate: Callable[[ProfileRecord], bool]) -> bool:
        """`mutate` applied to the request and stored (in a fleet, applied again to the stored copy when another
        server changed it first); False when it had nothing to do. Under the book's lock."""
        return mutate(rec) and self._files.update(rec, mutate)

    def _journal(self, rec: ProfileRecord, key: str) -> None:
        self._files.journal(rec, key)

    def _refresh_quietly(self) -> None:
        try:
            self.refresh()
        except Exception as exc:  # the store is away: the next poll tries again (ingest never waits on this)
            self.refresh_errors += 1
            if time.monotonic() - self._warned_at > 60:
                self._warned_at = time.monotonic()
                log.warning("profile requests: cannot read the fleet's store (%s: %s); retrying every %.0f s",
                            type(exc).__name__, exc, POLL_S)

    def reanalyse(self, rid: str) -> ProfileRecord:
        """Analyse a request's traces again (profiles/analysis.py: `ProfileAnalysis.reanalyse`)."""
        return self.analysis.reanalyse(rid)

    def close(self) -> None:
        if self._poll is not None:
            self._poll.stop()
        self.analysis.close()
        if self._shared is not None:
            self._shared.close()

    def refresh(self) -> None:
        """(a fleet, every second) What other servers changed: requests made or cancelled, processes' reports,
        files, analyses; an analysis whose server died mid-way is taken over."""
        if self._shared is None:
            return
        with self._lock:
            changes = self._shared.poll()
            for rid in changes.gone:
                self._unindex(rid)
            for rid, doc in changes.docs.items():
                rec = self._records.get(rid)
                if rec is None:
                    rec = cast(ProfileRecord, {"processes": {}, "files": {}})  # (take fills in the rest)
                self._shared.take(rec, doc)
                self._index(rec)
            for rid, part, body in changes.parts:
                if rid in self._records:
                    self._shared.merge_part(self._records[rid], part, body)
            waiting = [rid for rid, rec in self._records.items() if self.analysis.due(rec)]
        if self.analysis.running:
            for rid in waiting:
                self.analysis.enqueue(rid)

    # ------------------------------------------------------------------ requests
    def create(
        self,
        project: str,
        experiment_name: str,
        first_step: int,
        last_step: int,
        *,
        lanes: Sequence[str] = (),
        roles: Sequence[str] = (),
        ranks: Sequence[int] = (),
        activities: Sequence[str] = DEFAULT_PROFILE_ACTIVITIES,
        memory: bool = False,
        stack: bool = False,
        ttl_s: float = DEFAULT_PROFILE_TTL_S,
        max_window_s: float = DEFAULT_PROFILE_WINDOW_S,
        max_bytes: int = DEFAULT_PROFILE_BYTES,
        origin: str = "api",
        stage: str = "",
    ) -> dict[str, Any]:
        if not project or not experiment_name:
            raise InvalidInputError("a profile request needs the run: project and experiment_name")
        if not 1 <= ttl_s <= MAX_PROFILE_TTL_S:  # the server's policy: the request itself carries expires_at
            raise InvalidInputError("ttl_s must be between 1 s and 7 days")
        asked = {"id": os.urandom(8).hex(), "project": project, "experiment_name": experiment_name,
                 "steps": [first_step, last_step], "lanes": list(lanes), "roles": list(roles), "ranks": list(ranks),
                 "tool": DEFAULT_PROFILE_TOOL, "activities": list(activities), "memory": memory, "stack": stack,
                 "expires_at": _now() + ttl_s, "max_window_s": max_window_s, "max_bytes": max_bytes, "stage": stage}
        try:
            request = ProfileRequest.from_wire(asked)  # the one validation, the same a process applies to its reply
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        wire = cast(RequestWire, request.to_wire())
        rec: ProfileRecord = {"request": wire, "created_at": _now(), "origin": origin, "cancelled_at": None,
                              "processes": {}, "files": {}, "analysis": {"state": "none"}}
        self.sweep()
        unknown_run = self.run_exists is not None and not self.run_exists(project, experiment_name)
        with self._lock:
            if unknown_run:
                waiting = sum(1 for r in self._records.values() if r.get("unknown_run") and _state(r) == "pending")
                if waiting >= MAX_UNKNOWN_RUN_REQUESTS:
                    raise ConflictError(f"{waiting} profile requests already wait for runs that have not sent data yet",
                                        hint="start the job, or cancel requests for runs that will not come")
                rec["unknown_run"] = True
            active = [r for r in self._of_run((project, experiment_name)) if _state(r) in ("pending", "running")]
            if len(active) >= self._max_active:
                raise ConflictError(
                    f"run {project}/{experiment_name} already has {len(active)} active profile requests",
                    hint="cancel one (`rl-insight profile cancel ID`) or wait for them to finish",
                )
            self._files.create(rec)
            self._index(rec)
        return self.describe(rec)

    def get(self, rid: str) -> dict[str, Any]:
        return self.describe(self._record(rid))

    def _record(self, rid: str) -> ProfileRecord:
        rec = self._records.get(rid)
        if rec is None and self._shared is not None and REQUEST_ID.match(rid):  # made on another server just now
            rec = self._shared.fetch(rid)
            if rec is not None:
                self._index(rec)
        if rec is None:
            raise NotFoundError(f"no profile request {rid!r}", hint="`rl-insight profile list` shows them")
        return rec

    def list(self, project: str | None = None, experiment_name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            recs = list(self._records.values())
        out = [self.describe(r) for r in recs if (project is None or r["request"]["project"] == project)
               and (experiment_name is None or r["request"]["experiment_name"] == experiment_name)]
        return sorted(out, key=lambda r: r["created_at"], reverse=True)

    def cancel(self, rid: str) -> dict[str, Any]:
        def cancel(r: ProfileRecord) -> bool:
            if _state(r) not in ("pending", "running"):
                return False
            r["cancelled_at"] = _now()
            return True

        with self._lock:
            rec = self._record(rid)
            self._update(rec, cancel)
        return self.describe(rec)

    def describe(self, rec: ProfileRecord) -> dict[str, Any]:
        self._note_passed(rec)
        return {**rec, "id": rec["request"]["id"], "state": _state(rec)}

    def _note_passed(self, rec: ProfileRecord) -> bool:
        """A request no process took before its first step ended is over: it says so (once) instead of waiting
        for its ttl. True when it is."""
        if rec.get("passed") is not None:
            return True
        if rec["processes"] or rec["cancelled_at"] is not None or rec.get("origin") == "upload":
            return False
        req = rec["request"]
        ended = self.clock.reached_at(req["project"], req["experiment_name"], req["steps"][0])
        # a process that armed it says so within a cycle of hearing it, and every process hears within a heartbeat
        if ended is None or _now() - ended < PASSED_GRACE_S:
            return False
        clock = self.clock.current(req["project"], req["experiment_name"])
        passed = {"at": _now(), "message": f"step {req['steps'][0]} ended (the run is at step "
                  f"{clock[0] if clock else '?'}) before any process of the run took the request: none "
                  "matched it, or none heard of it in time"}

        def mark(r: ProfileRecord) -> bool:
            if r.get("passed") is not None or r["processes"] or r["cancelled_at"] is not None:
                return False
            r["passed"] = passed
            return True

        with self._lock:
            self._update(rec, mark)
        return rec.get("passed") is not None

    def profiled_steps(self, project: str, experiment_name: str) -> builtins.list[int]:
        """The steps a profiling window covered in some process of the run: disturbed by the profiler."""
        steps: set[int] = set()
        for rec in self._of_run((project, experiment_name)):
            for proc in list(rec["processes"].values()):
                steps.update((proc.get("window") or {}).get("steps") or ())
        return sorted(steps)

    # ------------------------------------------------------------------ delivery (every ingest reply)
    def open_requests(self, project: str | None, experiment_name: str | None) -> builtins.list[ProfileRequest]:
        """The run's active requests, as every ingest reply of the run carries them (authoritative: a request missing
        from the list is cancelled or over; control/run_control.py builds the reply's RunControl)."""
        if not project or not experiment_name:
            return []
        key = (project, experiment_name)
        now = _now()
        return [self._requests[r["request"]["id"]] for r in self._of_run(key)
                if r["cancelled_at"] is None and r.get("origin") != "upload" and r["request"]["expires_at"] > now
                and not self._note_passed(r) and _state(r) in ("pending", "running")]

    # ------------------------------------------------------------------ what processes report
    def report(self, rid: str, body: dict[str, Any]) -> dict[str, Any]:
        """Record what one process did; the answer is that process's entry and the request's state (never the
        whole request: a report costs the same with 1,000 processes as with one)."""
        try:
            key, reported = decode_process_report(body, lambda name: bool(FILE_NAME.match(name)))
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from None
        entry = cast(ProcessEntry, {**reported, "updated_at": _now()})
        state = entry["state"]
        with self._lock:
            rec = self._record(rid)
            procs = rec["processes"]
            if key not in procs and len(procs) >= MAX_PROCESSES_PER_REQUEST:
                raise ConflictError(f"profile request {rid} already has {MAX_PROCESSES_PER_REQUEST} processes")
            previous = procs.get(key)
            if previous is None or not (previous["state"] in PROCESS_TERMINAL and state not in PROCESS_TERMINAL):
                # a late, out-of-order report never reopens a finished process
                procs[key] = entry if previous is None else {**previous, **entry}
                self._journal(rec, key)
            return {"id": rid, "state": _state(rec), "process": procs[key]}

    def process_silent(self, host: str, pid: int) -> None:
        """A client went silent (killed, crashed: no exit handler ran): its unfinished part of any request
        ends as failed, with the reason, instead of "profiling" until the request expires."""
        key = f"{host[:128]}:{pid}"
        with self._lock:
            for rec in self._records.values():
                proc = rec["processes"].get(key)
                if proc is not None and proc["state"] not in PROCESS_TERMINAL:
                    proc["message"] = (f"the process went silent while {proc['state']} (killed or crashed); nothing "
                                       "more will come from it")
                    proc["state"], proc["updated_at"] = "failed", _now()
                    self._journal(rec, key)

    # ------------------------------------------------------------------ uploads
    def upload(self, rid: str, name: str, offset: int, total: int, data: bytes) -> dict[str, Any]:
        """Appends one chunk of a gzip'd trace at `offset` of `total` bytes. ConflictError carries the size
        the server has when the offset is not it (resume from there)."""
        if not FILE_NAME.match(name):
            raise InvalidInputError(
                f"file name {name[:80]!r}: letters, digits, . _ = + - only, ending in .json.gz, .sqlite, "
                ".pickle or .pkl"
            )
        with self._lock:
            rec = self._record(rid)
            cap = rec["request"]["max_bytes"]
            if not 0 < total <= cap:
                raise PayloadTooLargeError(f"a trace of {total} bytes exceeds this request's cap of {cap} bytes",
                                           hint="profile fewer steps, or request a larger --max-bytes")
            if rec["cancelled_at"] is not None:
                raise ConflictError(f"profile request {rid} was cancelled")
            done = rec["files"].get(name)
            if done and done.get("complete"):
                raise ConflictError(f"{name} is already complete", hint="nothing to resend")
            if done is None and rec["request"]["expires_at"] <= _now() and _state(rec) != "done":
                raise ConflictError(
                    f"profile request {rid} expired at "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(rec['request']['expires_at']))} UTC; "
                    "it takes no new traces",
                    hint="request the profile again",
                )
            if done is not None and done.get("total") != total:
                raise InvalidInputError(f"{name} was declared as {done.get('total')} bytes; a chunk now says {total}",
                                        hint="an upload keeps its total; start a new file name to send another trace")
            if not data:
                raise InvalidInputError(f"empty chunk for {name} at byte {offset}: send at least one byte")
            budget = REQUEST_FILES_FACTOR * cap
            committed = sum(f.get("total", 0) for n, f in rec["files"].items() if n != name)
            if done is None and committed + total > budget:
                raise PayloadTooLargeError(f"profile request {rid} already holds {committed} bytes of traces; {name} "
                                           f"({total} bytes) would pass its limit of {budget} bytes "
                                           f"({REQUEST_FILES_FACTOR} x the per-file cap)")
            partial = self._dir(rid) / ".partial" / name
            partial.parent.mkdir(parents=True, exist_ok=True)
            size = partial.stat().st_size if partial.exists() else 0
            if offset != size:
                err = ConflictError(f"upload of {name} continues at byte {size}, not {offset}")
                err.size = size  # type: ignore[attr-defined]  # the 409 answer carries where to resume (read in app.py)
                raise err
            if size + len(data) > total:
                raise InvalidInputError(f"chunk ends at byte {size + len(data)}, past the declared total {total}")
            with open(partial, "ab") as f:
                f.write(data)
            size += len(data)
            complete = size == total
            if complete:
                os.replace(partial, self._dir(rid) / name)
            first = done is None
            rec["files"][name] = {"bytes": size, "total": total, "complete": complete, "updated_at": _now()}
            if complete or first:  # the declared total is what later chunks are held to; progress is `.partial`'s size
                self._files.put_file(rec, name)
            if complete:  # new input: analysed again (attempts start over)
                self._update(rec, lambda r: _set_analysis_state(r, {"state": "pending"}))
        if complete and self.analysis.running:
            self.analysis.enqueue(rid)
        return {"size": size, "complete": complete}

    def file(self, rid: str, name: str) -> Path:
        rec = self._record(rid)
        if name not in rec["files"] or not rec["files"][name].get("complete"):
            raise NotFoundError(f"no complete trace {name[:80]!r} in profile request {rid}")
        return self._dir(rid) / name

    def report_file(self, rid: str, name: str) -> Path:
        self._record(rid)
        if name not in REPORT_FILES:
            raise NotFoundError(f"no report file {name[:80]!r}")
        p = self._dir(rid) / "report" / name
        if not p.is_file():
            raise NotFoundError(f"the analysis of profile request {rid} has no {name} yet",
                                hint="it is written when the first trace has arrived and been analysed")
        return p

    # ------------------------------------------------------------------ retention
    def _of_run(self, key: tuple[str, str]) -> builtins.list[ProfileRecord]:
        return [self._records[rid] for rid in list(self._by_run.get(key, ())) if rid in self._records]

    def sweep(self, now: float | None = None) -> int:
        """Delete ended requests (expired, cancelled) of runs the store never saw, a day after they expired:
        retention deletes a run's requests with the run, and these have no run to go with."""
        if self.run_exists is None:
            return 0
        now = _now() if now is None else now
        with self._lock:
            stale = [
                (rid, rec)
                for rid, rec in self._records.items()
                if rec.get("unknown_run")
                and rec["request"]["expires_at"] + ORPHAN_GRACE_S < now
                and _state(rec) in ("expired", "cancelled")
            ]
        gone = {run_of(rec) for rid, rec in stale if not self.run_exists(*run_of(rec))}
        return self._forget([rid for rid, rec in stale if run_of(rec) in gone])

    def _forget(self, rids: builtins.list[str]) -> int:
        with self._lock:
            for rid in rids:
                rec = self._records.pop(rid, None)
                self._requests.pop(rid, None)
                if rec is not None:
                    ids = self._by_run.get(run_of(rec), [])
                    if rid in ids:
                        ids.remove(rid)
                shutil.rmtree(self.root / rid, ignore_errors=True)
            self._files.forget(rids)
        return len(rids)

    def forget_runs(self, drop: set[tuple[str, str]]) -> int:
        """Delete the requests (and their traces) of runs retention removed."""
        with self._lock:
            gone = [rid for key in drop for rid in self._by_run.pop(key, [])]
            for rid in gone:
                self._records.pop(rid, None)
                self._requests.pop(rid, None)
                shutil.rmtree(self.root / rid, ignore_errors=True)
            self._files.forget(gone)
        return len(gone)

    def _unindex(self, rid: str) -> None:
        """A request another server deleted (with its run, by retention): forgotten here too."""
        rec = self._records.pop(rid, None)
        self._requests.pop(rid, None)
        if rec is not None and rid in self._by_run.get(run_of(rec), []):
            self._by_run[run_of(rec)].remove(rid)


def _set_analysis_state(rec: ProfileRecord, analysis: dict[str, Any]) -> bool:
    rec["analysis"] = analysis
    return True


def _state(rec: ProfileRecord) -> RequestState:
    """pending (no process has answered) → running → done / failed; cancelled; expired (nobody answered in time)."""
    if rec.get("cancelled_at") is not None:
        return "cancelled"
    procs = list(rec["processes"].values())
    if not procs:
        return "expired" if rec["request"]["expires_at"] <= _now() or rec.get("passed") else "pending"
    if any(p["state"] not in PROCESS_TERMINAL for p in procs):
        return "running" if rec["request"]["expires_at"] > _now() else "expired"
    return "done" if any(p["state"] == "uploaded" for p in procs) else "failed"
