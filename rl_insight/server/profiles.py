"""Profile requests and the traces they bring back: the server side of "profile step N on these ranks".

A request is created by the CLI or the UI, rides on the ingest replies of its run's clients (they match
it to their lanes, role and rank), and collects what each matching process reports and uploads. Each
request lives in its own directory under `<data_dir>/profiles/<id>/` (`request.json` plus the uploaded
`.json.gz` traces, partial uploads under `.partial/`, the analysis under `report/`), so requests,
statuses and half-done uploads survive a server restart; the in-memory index is rebuilt from disk.

Every completed trace is analysed by the offline analysis (the same code as `rl-insight analyze`) in
one background thread, so a burst of uploads never competes with ingest for more than one core.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import ConflictError, InvalidInputError, NotFoundError, PayloadTooLargeError
from ..fsutil import atomic_write
from .step_clock import StepClock
from ..protocol import (DEFAULT_PROFILE_BYTES, MAX_PROFILE_BYTES, MAX_PROFILE_STEPS, MAX_PROFILE_WINDOW_S,
                        PROCESS_STATES, PROCESS_TERMINAL, PROFILE_ACTIVITIES, ProfileRequest)

log = logging.getLogger("rl_insight.server.profiles")

# gzip'd torch / trace_view JSON, nsys SQLite exports, torch_memory snapshot pickles (read by the analysis' safe unpickler)
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]{0,180}\.(?:json\.gz|sqlite|pickle|pkl)$")
REQUEST_ID = re.compile(r"^[0-9a-f]{16}$")
MAX_ACTIVE_PER_RUN = 8
MAX_PROCESSES_PER_REQUEST = 1024
DEFAULT_TTL_S = 3600.0


_STEPS = re.compile(r"^\s*(\d{1,15})\s*(?:-\s*(\d{1,15})\s*)?$")


def parse_steps(text: str) -> tuple[int, int]:
    """`120` or `120-121` as (first, last); the CLI and the route read steps the same way."""
    m = _STEPS.match(text)
    if not m:
        raise InvalidInputError(f"steps {text[:40]!r}: give one step (120) or a range (120-121)")
    first = int(m.group(1))
    return first, int(m.group(2)) if m.group(2) else first


def _now() -> float:
    return time.time()


class ProfileBook:
    def __init__(self, root: Path, *, analyze: bool = True, max_active_per_run: int = MAX_ACTIVE_PER_RUN,
                 clock: StepClock | None = None) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._records: dict[str, dict[str, Any]] = {}
        self._by_run: dict[tuple[str, str], list[str]] = {}  # request ids per run: every ingest reply looks one run up
        self.clock = clock if clock is not None else StepClock()  # each run's step clock, from its clients' samples
        self._max_active = max_active_per_run
        self._load()
        self._analyze = analyze
        self._work: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        if analyze:
            self._thread = threading.Thread(target=self._analysis_loop, name="rl-insight-profile-analysis", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ persistence
    def _dir(self, rid: str) -> Path:
        if not REQUEST_ID.match(rid):
            raise NotFoundError(f"no profile request {rid!r}")
        return self.root / rid

    def _load(self) -> None:
        for d in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            f = d / "request.json"
            if not REQUEST_ID.match(d.name) or not f.is_file():
                continue
            try:
                rec = json.loads(f.read_text())
                ProfileRequest.from_wire(rec["request"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("skipping unreadable profile request %s: %s", d, exc)
                continue
            if rec.get("analysis", {}).get("state") == "running":
                rec["analysis"]["state"] = "pending"  # interrupted by the restart: done again below
            self._records[d.name] = rec
            self._by_run.setdefault(_run_of(rec), []).append(d.name)

    def _save(self, rec: dict[str, Any]) -> None:
        d = self.root / rec["request"]["id"]
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / "request.json", json.dumps(rec, indent=1))

    # ------------------------------------------------------------------ requests
    def create(self, project: str, experiment_name: str, first_step: int, last_step: int, *, lanes: list[str] = (),
               roles: list[str] = (), ranks: list[int] = (), activities: list[str] = ("cpu", "cuda"),
               memory: bool = False, stack: bool = False, ttl_s: float = DEFAULT_TTL_S, max_window_s: float = 300.0,
               max_bytes: int = DEFAULT_PROFILE_BYTES, origin: str = "api", stage: str = "") -> dict[str, Any]:
        if not project or not experiment_name:
            raise InvalidInputError("a profile request needs the run: project and experiment_name")
        if first_step < 0 or last_step < first_step or last_step - first_step >= MAX_PROFILE_STEPS:
            raise InvalidInputError(f"steps {first_step}-{last_step}: give first <= last, at most {MAX_PROFILE_STEPS} steps "
                                    "(a profile of more steps is too large to be useful)")
        bad = [a for a in activities if a not in PROFILE_ACTIVITIES]
        if bad or not activities:
            raise InvalidInputError(f"activities {bad or activities}: choose from {', '.join(PROFILE_ACTIVITIES)}")
        if not 1 <= max_window_s <= MAX_PROFILE_WINDOW_S:
            raise InvalidInputError(f"max_window_s must be in [1, {MAX_PROFILE_WINDOW_S:.0f}]")
        if not 1 <= max_bytes <= MAX_PROFILE_BYTES:
            raise InvalidInputError(f"max_bytes must be in [1, {MAX_PROFILE_BYTES}]")
        if stage and first_step != last_step:
            raise InvalidInputError(f"stage {stage[:60]!r}: a stage is profiled in one step; give one step, not {first_step}-{last_step}")
        if not 1 <= ttl_s <= 7 * 86400:
            raise InvalidInputError("ttl_s must be between 1 s and 7 days")
        rid = os.urandom(8).hex()
        wire = ProfileRequest(rid, project, experiment_name, first_step, last_step, tuple(lanes), tuple(roles),
                              tuple(ranks), "torch", tuple(activities), memory, stack, _now() + ttl_s, max_window_s,
                              max_bytes, stage).to_wire()
        ProfileRequest.from_wire(wire)  # the same validation a client applies
        rec = {"request": wire, "created_at": _now(), "origin": origin, "cancelled_at": None, "processes": {},
               "files": {}, "analysis": {"state": "none"}}
        with self._lock:
            active = [r for r in self._of_run((project, experiment_name)) if _state(r) in ("pending", "running")]
            if len(active) >= self._max_active:
                raise ConflictError(f"run {project}/{experiment_name} already has {len(active)} active profile requests",
                                    hint="cancel one (`rl-insight profile cancel ID`) or wait for them to finish")
            self._records[rid] = rec
            self._by_run.setdefault((project, experiment_name), []).append(rid)
            self._save(rec)
        return self.describe(rec)

    def get(self, rid: str) -> dict[str, Any]:
        return self.describe(self._record(rid))

    def _record(self, rid: str) -> dict[str, Any]:
        rec = self._records.get(rid)
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
        with self._lock:
            rec = self._record(rid)
            if _state(rec) in ("pending", "running"):
                rec["cancelled_at"] = _now()
                self._save(rec)
        return self.describe(rec)

    def describe(self, rec: dict[str, Any]) -> dict[str, Any]:
        return {**rec, "id": rec["request"]["id"], "state": _state(rec)}

    # ------------------------------------------------------------------ delivery (every ingest reply)
    def note_step(self, project: str | None, experiment_name: str | None, step: float | None, at: float | None = None) -> None:
        self.clock.note(project, experiment_name, step, at)

    def run_step(self, project: str, experiment_name: str) -> int | None:
        """The run's step clock as its clients' latest samples say (fresher than the run store)."""
        clock = self.clock.current(project, experiment_name)
        return None if clock is None else clock[0]

    def for_client(self, project: str | None, experiment_name: str | None) -> dict[str, Any]:
        """What rides on an ingest reply: the run's active requests (authoritative: a request missing from
        the list is cancelled or over) and the run's step clock, for processes that do not log the step."""
        if not project or not experiment_name:
            return {"profile": []}
        key = (project, experiment_name)
        now = _now()
        active = [r["request"] for r in self._of_run(key)
                  if r["cancelled_at"] is None and r.get("origin") != "upload" and r["request"]["expires_at"] > now
                  and _state(r) in ("pending", "running")]
        out: dict[str, Any] = {"profile": active}
        clock = self.clock.current(*key)
        if clock is not None:  # and when it moved: a process can tell whether a step began before it heard
            out["run_step"], out["run_step_at"] = clock
        return out

    # ------------------------------------------------------------------ what processes report
    def report(self, rid: str, body: dict[str, Any]) -> dict[str, Any]:
        state = body.get("state")
        if state not in PROCESS_STATES:
            raise InvalidInputError(f"state must be one of {', '.join(PROCESS_STATES)}, found {str(state)[:40]!r}")
        proc = body.get("process")
        if not isinstance(proc, dict) or not isinstance(proc.get("host"), str) or type(proc.get("pid")) is not int:
            raise InvalidInputError("process must be an object with host (string) and pid (integer)")
        key = f"{proc['host'][:128]}:{proc['pid']}"
        entry = {"host": proc["host"][:128], "pid": proc["pid"], "rank": proc.get("rank") if type(proc.get("rank")) is int else None,
                 "lanes": [str(x)[:256] for x in proc.get("lanes", [])[:64]] if isinstance(proc.get("lanes"), list) else [],
                 "roles": [str(x)[:128] for x in proc.get("roles", [])[:16]] if isinstance(proc.get("roles"), list) else [],
                 "state": state, "message": str(body.get("message") or "")[:2000], "updated_at": _now()}
        window = body.get("window")
        if isinstance(window, dict) and all(type(window.get(k)) is int for k in ("start_ns", "end_ns")):
            entry["window"] = {"start_ns": window["start_ns"], "end_ns": window["end_ns"],
                               "steps": window.get("steps") if isinstance(window.get("steps"), list) else None}
        if isinstance(body.get("file"), str) and FILE_NAME.match(body["file"]):
            entry["file"] = body["file"]
        with self._lock:
            rec = self._record(rid)
            procs = rec["processes"]
            if key not in procs and len(procs) >= MAX_PROCESSES_PER_REQUEST:
                raise ConflictError(f"profile request {rid} already has {MAX_PROCESSES_PER_REQUEST} processes")
            previous = procs.get(key, {})
            if previous.get("state") in PROCESS_TERMINAL and state not in PROCESS_TERMINAL:
                return self.describe(rec)  # a late, out-of-order report never reopens a finished process
            procs[key] = {**previous, **entry}
            self._save(rec)
        return self.describe(rec)

    def process_silent(self, host: str, pid: int) -> None:
        """A client went silent (killed, crashed: no exit handler ran): its unfinished part of any request
        ends as failed, with the reason, instead of "profiling" until the request expires."""
        key = f"{host[:128]}:{pid}"
        with self._lock:
            for rec in self._records.values():
                proc = rec["processes"].get(key)
                if proc is not None and proc["state"] not in PROCESS_TERMINAL:
                    proc.update(state="failed", updated_at=_now(),
                                message=f"the process went silent while {proc['state']} (killed or crashed); nothing more "
                                        "will come from it")
                    self._save(rec)

    # ------------------------------------------------------------------ uploads
    def upload(self, rid: str, name: str, offset: int, total: int, data: bytes) -> dict[str, Any]:
        """Appends one chunk of a gzip'd trace at `offset` of `total` bytes. ConflictError carries the size
        the server has when the offset is not it (resume from there)."""
        if not FILE_NAME.match(name):
            raise InvalidInputError(f"file name {name[:80]!r}: letters, digits, . _ = + - only, ending in .json.gz, .sqlite, "
                                    ".pickle or .pkl")
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
            partial = self._dir(rid) / ".partial" / name
            partial.parent.mkdir(parents=True, exist_ok=True)
            size = partial.stat().st_size if partial.exists() else 0
            if offset != size:
                err = ConflictError(f"upload of {name} continues at byte {size}, not {offset}")
                err.size = size  # type: ignore[attr-defined]
                raise err
            if size + len(data) > total:
                raise InvalidInputError(f"chunk ends at byte {size + len(data)}, past the declared total {total}")
            with open(partial, "ab") as f:
                f.write(data)
            size += len(data)
            complete = size == total
            if complete:
                final = self._dir(rid) / name
                os.replace(partial, final)
                rec["analysis"] = {"state": "pending"}
            rec["files"][name] = {"bytes": size, "total": total, "complete": complete, "updated_at": _now()}
            self._save(rec)
        if complete and self._analyze:
            self._work.put(rid)
        return {"size": size, "complete": complete}

    def file(self, rid: str, name: str) -> Path:
        rec = self._record(rid)
        if name not in rec["files"] or not rec["files"][name].get("complete"):
            raise NotFoundError(f"no complete trace {name[:80]!r} in profile request {rid}")
        return self._dir(rid) / name

    def report_file(self, rid: str, name: str) -> Path:
        self._record(rid)
        if name not in ("timeline.html", "summary.json", "trace.perfetto.json", "summary.md"):
            raise NotFoundError(f"no report file {name[:80]!r}")
        p = self._dir(rid) / "report" / name
        if not p.is_file():
            raise NotFoundError(f"the analysis of profile request {rid} has no {name} yet",
                                hint="it is written when the first trace has arrived and been analysed")
        return p

    # ------------------------------------------------------------------ retention
    def _of_run(self, key: tuple[str, str]) -> list[dict[str, Any]]:
        return [self._records[rid] for rid in list(self._by_run.get(key, ())) if rid in self._records]

    def forget_runs(self, drop: set[tuple[str, str]]) -> int:
        """Delete the requests (and their traces) of runs retention removed."""
        with self._lock:
            gone = [rid for key in drop for rid in self._by_run.pop(key, [])]
            for rid in gone:
                self._records.pop(rid, None)
                shutil.rmtree(self.root / rid, ignore_errors=True)
        return len(gone)

    # ------------------------------------------------------------------ analysis on arrival
    def _analysis_loop(self) -> None:
        for rid, rec in list(self._records.items()):
            if rec.get("analysis", {}).get("state") == "pending":
                self._work.put(rid)
        while True:
            rid = self._work.get()
            if rid is None:
                return
            while not self._work.empty():  # several files arrived meanwhile: analyse the request once
                nxt = self._work.get()
                if nxt is None:
                    return
                if nxt != rid:
                    self._work.put(nxt)
                    break
            try:
                self._analyse(rid)
            except Exception as exc:  # noqa: BLE001 - one bad trace never stops the thread
                log.warning("analysis of profile request %s failed: %r", rid, exc)

    def _analyse(self, rid: str) -> None:
        rec = self._records.get(rid)
        if rec is None:
            return
        self._set_analysis(rec, {"state": "running"})
        try:
            from ..analysis.analyze import summarize
            from ..analysis.load import load
            from ..analysis.render import export, html
        except ImportError as exc:
            self._set_analysis(rec, {"state": "unavailable", "message": f"the analysis extra is not installed ({exc.name}): "
                                     'pip install "rl-insight[analysis]"'})
            return
        d = self._dir(rid)
        files = [d / n for n, f in rec["files"].items() if f.get("complete")]
        # one or a few steps: keep operators and kernels too (the report's levels of detail handle millions)
        loaded = load(files, workers=1, detail=("annotations", "ops", "kernels"))
        out = d / "report"
        out.mkdir(exist_ok=True)
        df = loaded.events
        problems = loaded.report.warnings + loaded.report.errors
        if df.empty:
            self._set_analysis(rec, {"state": "failed", "message": "; ".join(problems) or "no events in the uploaded traces"})
            return
        req = rec["request"]
        title = f"{req['project']}/{req['experiment_name']} steps {req['steps'][0]}-{req['steps'][1]} (profile {rid})"
        result = summarize(df, loaded.metrics, loaded.memory)
        html.render(df, out / "timeline.html", title, result=result)
        export.perfetto(df, out / "trace.perfetto.json", title)
        export.summary(result, out, loaded.report.parsed, problems)
        stages = [{"name": str(s["name"]), "rank": _int_or_none(s.get("rank")), "count": int(s["count"]), "total_s": float(s["total_s"])}
                  for s in _top_stages(result)]
        self._set_analysis(rec, {"state": "done", "events": int(len(df)), "lanes": sorted(str(x) for x in df["lane"].unique()),
                                 "problems": problems[:20], "stages": stages, "analysed_at": _now(),
                                 "overlap": result.get("overlap"), "memory": bool(result.get("memory", {}).get("lanes"))})

    def _set_analysis(self, rec: dict[str, Any], analysis: dict[str, Any]) -> None:
        with self._lock:
            rec["analysis"] = analysis
            self._save(rec)

    def close(self) -> None:
        if self._thread is not None:
            self._work.put(None)
            self._thread.join(timeout=5)


def _run_of(rec: dict[str, Any]) -> tuple[str, str]:
    return rec["request"]["project"], rec["request"]["experiment_name"]


def _state(rec: dict[str, Any]) -> str:
    """pending (no process has answered) → running → done / failed; cancelled; expired (nobody answered in time)."""
    if rec.get("cancelled_at") is not None:
        return "cancelled"
    procs = list(rec["processes"].values())
    if not procs:
        return "expired" if rec["request"]["expires_at"] <= _now() else "pending"
    if any(p["state"] not in PROCESS_TERMINAL for p in procs):
        return "running" if rec["request"]["expires_at"] > _now() else "expired"
    return "done" if any(p["state"] == "uploaded" for p in procs) else "failed"


def _top_stages(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = result.get("stage_stats") or []
    return sorted(rows, key=lambda s: -float(s.get("total_s", 0)))[:20] if isinstance(rows, list) else []


def _int_or_none(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError):  # None, NaN, pandas' NA
        return None
