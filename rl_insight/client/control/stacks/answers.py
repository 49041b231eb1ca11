"""Stack snapshots, the client half (server/rooms/stacks/book.py is the other): a process answers "where is every
thread now?" from its sender thread, never the training thread.

* `offer` (sender thread, every reply) takes each listed `StackRequest` that matches this process (lanes, roles,
  rank: the profile requests' rule) once, and wakes the sender; `pump` (sender thread) captures and posts.
* `capture` reads `sys._current_frames()`: the Python stack of every thread with its name, the innermost frames'
  source lines, and which thread holds which open `trace_state` lanes (client/lanes.py records the thread that
  opened each). It adds the step, RSS and CPU time, and py-spy's native frames when asked (`py-spy dump --native`
  on its own pid, in a child process with a timeout; when py-spy is missing or ptrace is refused it says so).
* Nothing from the server is executed: a request only selects processes and asks for native frames.

A training thread stuck in C while holding the GIL forever stops this thread too: that process does not answer,
and the server lists it as such (docs/stacks.md). Cost while nothing is asked: none on the hot path, one list
check per reply on the sender thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from ....protocol import ROUTE_STACKS, RunControl, StackRequest
from ....protocol.stacks import CODE_FRAMES, MAX_FRAME_CODE, MAX_STACK_FRAMES, MAX_STACK_THREADS
from ...ratelog import ratelog
from . import flight_recorder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from ..this_process import ThisProcess

PY_SPY_TIMEOUT_S = 10.0
MAX_ANSWERED = 256  # request ids remembered (each is answered once)


class StackAnswers:
    """What this process owes the server: stack requests taken but not yet answered."""

    def __init__(self, process: ThisProcess, holders: Callable[[], list[tuple]], wake: Callable[[], None]) -> None:
        self.process = process  # who this process is and where it is (client/control/this_process.py)
        self.holders = holders  # () -> [(lane, state, since_ns, thread ident)] of the open trace_state lanes
        self._wake = wake
        self._due: list[StackRequest] = []
        self._answered: dict[str, None] = {}  # ordered: the oldest forgotten first
        self.answered = 0

    @property
    def pending(self) -> bool:
        return bool(self._due)

    def offer(self, control: RunControl) -> None:
        """Sender thread: take the reply's stack requests that ask this process and that it has not answered."""
        if not control.stacks:
            return
        for req in control.stacks:
            if req.id in self._answered or any(r.id == req.id for r in self._due):
                continue
            if self.process.selected_by(req):
                self._due.append(req)
        if self._due:
            self._wake()

    def pump(self, transport: Any) -> None:
        """Sender thread: answer what is due. A failed post is tried again next cycle until the request expires."""
        from ... import wire
        from ...transport import TransportError

        while self._due:
            req = self._due[0]
            if time.time() > req.expires_at > 0:
                self._due.pop(0)
                continue
            body = capture(self.holders(), self.process.step(), req.native, self.process.describe())
            try:
                resp = transport.post(f"{ROUTE_STACKS}/{req.id}/report", wire.encode_json(body), {})
            except TransportError as exc:
                ratelog.log(30, "stacks", "[rl-insight] stack snapshot not delivered (%s); retrying", exc)
                return
            if resp.status == 429 or resp.status >= 500:
                return
            if resp.status >= 400:
                ratelog.log(30, "stacks-refused", "[rl-insight] stack snapshot refused (HTTP %s): %.200s",
                            resp.status, resp.body.get("detail"))
            else:
                self.answered += 1
            self._due.pop(0)
            self._answered[req.id] = None
            while len(self._answered) > MAX_ANSWERED:
                self._answered.pop(next(iter(self._answered)))


def capture(holders: list[tuple], step: Any, native: bool, process: dict[str, Any]) -> dict[str, Any]:
    """Every thread's stack, as a stack report (protocol/stacks.py). Runs on the calling (sender) thread."""
    import linecache

    taken_ns = time.time_ns()
    frames = sys._current_frames()
    by_ident = {t.ident: t for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    own = threading.get_ident()
    lanes_of: dict[int, list[dict[str, Any]]] = {}
    for lane, state, since_ns, ident in holders:
        lanes_of.setdefault(ident, []).append({"lane": lane, "state": state, "since_ns": since_ns})
    # the threads that hold lanes first, then the main thread: what a reader looks at when the list is cut
    order = sorted(frames, key=lambda i: (i not in lanes_of, i != main_ident, getattr(by_ident.get(i), "name", "")))
    threads = []
    for ident in order[:MAX_STACK_THREADS]:
        stack: list[dict[str, Any]] = []
        f: Any = frames[ident]
        depth = 0
        while f is not None:
            depth += 1
            if len(stack) < MAX_STACK_FRAMES:
                code = f.f_code
                entry = {"file": code.co_filename, "line": f.f_lineno or 0,
                         "func": getattr(code, "co_qualname", code.co_name)}
                if len(stack) < CODE_FRAMES:
                    line = linecache.getline(code.co_filename, f.f_lineno or 0).strip()
                    if line:
                        entry["code"] = line[:MAX_FRAME_CODE]
                stack.append(entry)
            f = f.f_back
        stack.reverse()  # outermost first
        t = by_ident.get(ident)
        threads.append({"id": ident, "name": t.name if t is not None else f"thread {ident}",
                        "daemon": bool(t is not None and t.daemon), "main": ident == main_ident,
                        "sender": ident == own, "lanes": lanes_of.get(ident, []), "frames": stack,
                        "cut_frames": max(0, depth - MAX_STACK_FRAMES)})
    del frames
    body: dict[str, Any] = {"process": process, "taken_ns": taken_ns, "step": _whole(step), "rss_bytes": _rss(),
                            "cpu_s": round(time.process_time(), 3), "threads": threads,
                            "truncated_threads": max(0, len(order) - MAX_STACK_THREADS),
                            "native_state": "not_asked", "native_message": "",
                            "flight_recorder": flight_recorder.read()}
    if native:
        state, message, native_frames = native_stacks(os.getpid())
        body["native_state"], body["native_message"] = state, message
        for entry in threads:
            if entry["id"] in native_frames:
                entry["native"] = native_frames[entry["id"]]
    return body


def _whole(step: Any) -> int | None:
    try:
        return int(step) if step is not None and float(step) >= 0 else None
    except (TypeError, ValueError, OverflowError):
        return None


def _rss() -> int | None:
    """Resident memory now (Linux); elsewhere the peak, which is what getrusage knows."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if sys.platform == "darwin" else peak * 1024
        except Exception:
            return None


def _py_spy() -> str | None:
    import shutil

    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")  # a venv's bin/, not on PATH
    return beside if os.access(beside, os.X_OK) else None


def native_stacks(pid: int) -> tuple[str, str, dict[int, list[dict[str, Any]]]]:
    """py-spy's view of `pid` with native frames: (state, message, frames by thread ident). Never raises."""
    import json
    import subprocess

    binary = _py_spy()
    if binary is None:
        return "not_installed", "py-spy is not installed in this process's environment (pip install py-spy)", {}
    try:
        out = subprocess.run([binary, "dump", "--pid", str(pid), "--native", "--json"], capture_output=True,
                             text=True, timeout=PY_SPY_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "failed", f"py-spy did not answer within {PY_SPY_TIMEOUT_S:.0f} s", {}
    except OSError as exc:
        return "failed", f"py-spy could not run: {exc}", {}
    if out.returncode != 0:
        err = (out.stderr or out.stdout or "").strip()
        if any(w in err.lower() for w in ("permission denied", "operation not permitted", "ptrace")):
            return "refused", (f"ptrace refused: {err[:300]} — py-spy needs CAP_SYS_PTRACE or "
                               "kernel.yama.ptrace_scope=0 to read this process"), {}
        return "failed", f"py-spy exited with {out.returncode}: {err[:300]}", {}
    try:
        dumped = json.loads(out.stdout)
    except ValueError:
        return "failed", "py-spy's output was not JSON", {}
    frames: dict[int, list[dict[str, Any]]] = {}
    for t in dumped if isinstance(dumped, list) else []:
        if not isinstance(t, dict) or not isinstance(t.get("thread_id"), int):
            continue
        stack = [{"file": str(f.get("filename") or "?"), "line": int(f.get("line") or 0),
                  "func": str(f.get("name") or "?")} for f in (t.get("frames") or [])[:MAX_STACK_FRAMES]
                 if isinstance(f, dict)]
        stack.reverse()  # py-spy lists the innermost first
        frames[t["thread_id"]] = stack
    return "ok", f"native frames of {len(frames)} thread(s) from py-spy", frames
