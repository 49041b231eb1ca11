"""Profile traces analysed on arrival: the analysis half of the profile book (server/rooms/profiles/book.py).

Every completed trace is analysed by the offline analysis (the same code as `rl-insight analyze`) in a child
process bounded in time and memory (analysis/isolated.py), one request at a time, on one thread: no upload can
freeze or exhaust the server, and a burst of uploads never competes with ingest for more than one core. An analysis
that fails or is killed ends `failed` with the reason. In a fleet every server may see a request pending: the one
that claims it (pending -> running, a compare-and-set in the store) analyses it, and one whose server died
mid-analysis is claimed again once it has run past the analysis timeout. `ProfileBook` holds one `ProfileAnalysis`
and is its `AnalysedBook`: the records, their lock and how one is updated (files, or the fleet's shared records).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from .records import ProfileRecord

log = logging.getLogger("rl_insight.server.rooms.profiles.book")

REQUEST_FILES_FACTOR = 16  # a request's files together: at most this many times its per-file cap
ANALYSIS_ATTEMPTS = 2  # an analysis interrupted (a server stopped or died) runs once more, never in a loop
TAKEOVER_GRACE_S = 120.0  # past its timeout and this, a running analysis' server is gone


class AnalysedBook(Protocol):
    """What the analysis reads and writes of its book."""

    _lock: threading.Lock
    _records: dict[str, ProfileRecord]
    analysis_timeout_s: float
    analysis_max_memory_bytes: int
    _shared: Any  # a fleet's store (another server may run an analysis), or None

    def _update(self, rec: ProfileRecord, change: Callable[[ProfileRecord], bool]) -> bool: ...

    def _dir(self, rid: str) -> Path: ...

    def sweep(self) -> int: ...


class ProfileAnalysis:
    """One thread analysing the book's requests one at a time (`analyze` False: none runs; a test drives it)."""

    def __init__(self, book: AnalysedBook, analyze: bool) -> None:
        self.book = book
        self.running = analyze
        self._work: queue.Queue[str | None] = queue.Queue()
        self.queued: set[str] = set()  # in the queue: a fleet's poll finds the same pending request every second
        self._thread: threading.Thread | None = None
        if analyze:
            self._thread = threading.Thread(target=self._loop, name="rl-insight-profile-analysis", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        for rid, rec in list(self.book._records.items()):
            if self.due(rec):
                self.enqueue(rid)
        while True:
            try:
                got = self._work.get(timeout=600)
            except queue.Empty:
                self.book.sweep()
                continue
            if got is None:
                return
            rid = got
            self.queued.discard(rid)
            if not self._skip_repeats(rid):
                return
            self._run_guarded(rid)

    def _skip_repeats(self, rid: str) -> bool:
        """Several files of `rid` arrived meanwhile: the request is analysed once. False: stop was asked."""
        while not self._work.empty():
            nxt = self._work.get()
            if nxt is None:
                return False
            if nxt != rid:
                self._work.put(nxt)
                break
        return True

    def _run_guarded(self, rid: str) -> None:
        try:
            self.run_one(rid)
        except Exception as exc:  # the thread survives, and the request never stays "running"
            log.warning("analysis of profile request %s failed: %r", rid, exc)
            failed = self.book._records.get(rid)
            if failed is not None:
                self.set_result(failed, {**failed.get("analysis", {}), "state": "failed",
                                            "message": f"the analysis could not run: {type(exc).__name__}"})

    def run_one(self, rid: str) -> None:
        """The request's complete traces analysed in a bounded child process (analysis/isolated.py)."""
        from ....analysis.isolated import run_isolated

        book = self.book
        rec = book._records.get(rid)
        if rec is None:
            return
        claim: dict[str, Any] = {}

        def take(r: ProfileRecord) -> bool:
            """pending (or abandoned by a dead server) -> running, here; False when another server has it or it is
            over."""
            if not self.due(r):
                return False
            before = r.get("analysis", {})
            attempts = int(before.get("attempts", 0)) + 1
            if before.get("state") == "running" and attempts > ANALYSIS_ATTEMPTS:
                r["analysis"] = {"state": "failed", "attempts": attempts - 1,
                                 "message": f"the analysis was interrupted {ANALYSIS_ATTEMPTS} times (its server "
                                 "stopped); not tried again (the traces are kept: `rl-insight profile fetch`)"}
                return True
            r["analysis"] = claim.setdefault("analysis", {"state": "running", "attempts": attempts,
                                                          "started_at": time.time()})
            return True

        with book._lock:
            if not book._update(rec, take) or rec["analysis"].get("state") != "running":
                return
            attempts = rec["analysis"]["attempts"]
        req = rec["request"]
        title = f"{req['project']}/{req['experiment_name']} steps {req['steps'][0]}-{req['steps'][1]} (profile {rid})"
        names = [n for n, f in rec["files"].items() if f.get("complete")]
        # bound on what one trace may inflate to: tied to the request's byte cap, and within the child's memory
        inflate_limit = int(min(REQUEST_FILES_FACTOR * req["max_bytes"], book.analysis_max_memory_bytes // 2))
        result = run_isolated(book._dir(rid), names, title, inflate_limit=inflate_limit,
                              max_memory_bytes=book.analysis_max_memory_bytes, timeout_s=book.analysis_timeout_s)
        self.set_result(rec, {**result, "attempts": attempts})

    def reanalyse(self, rid: str) -> ProfileRecord:
        """Analyse a request's traces again (a profile taken before, read by a newer analysis): its analysis goes back
        to pending and is queued. ConflictError while one runs, or when no trace of it is complete; NotFoundError
        for an unknown request."""
        from ....errors import ConflictError, NotFoundError

        rec = self.book._records.get(rid)
        if rec is None:
            raise NotFoundError(f"no profile request {rid}", hint="`rl-insight profile list --run RUN` lists them")
        if not any(f.get("complete") for f in rec.get("files", {}).values()):
            raise ConflictError(f"profile request {rid} has no complete trace to analyse",
                                hint="`rl-insight profile show ID` says what each process reported")
        if (rec.get("analysis") or {}).get("state") == "running":
            raise ConflictError(f"profile request {rid} is being analysed now", hint="ask again once it is done")

        def pending(r: ProfileRecord) -> bool:
            r["analysis"] = {"state": "pending", "attempts": 0, "requested_at": time.time()}
            return True

        with self.book._lock:
            self.book._update(rec, pending)
        if self._thread is not None:
            self.enqueue(rid)
        return rec

    def enqueue(self, rid: str) -> None:
        if rid not in self.queued:
            self.queued.add(rid)
            self._work.put(rid)

    def set_result(self, rec: ProfileRecord, analysis: dict[str, Any]) -> None:
        def put(r: ProfileRecord) -> bool:
            r["analysis"] = analysis
            return True

        with self.book._lock:
            self.book._update(rec, put)

    def due(self, rec: ProfileRecord) -> bool:
        """Pending, or running so long that its server must have died (a fleet: another server takes it)."""
        analysis = rec.get("analysis") or {}
        if analysis.get("state") == "pending":
            return True
        started = analysis.get("started_at")
        return (analysis.get("state") == "running" and self.book._shared is not None
                and isinstance(started, (int, float))
                and time.time() - started > self.book.analysis_timeout_s + TAKEOVER_GRACE_S)

    def close(self) -> None:
        if self._thread is not None:
            self._work.put(None)
            self._thread.join(timeout=5)
