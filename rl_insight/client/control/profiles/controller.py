"""Profile on request: the client half of "profile step N on these ranks" (server/rooms/profiles/book.py).

Three threads, three jobs:

* the sender thread reads the requests that ride on every ingest reply (`offer`), and reports statuses and
  uploads finished traces in chunks (`pump`); it never touches the profiler;
* the training thread starts and stops torch.profiler at step boundaries (`boundary`): when the step
  metric is logged, and when a lane enters a top-level `trace_state`. With nothing armed that call costs
  one attribute read (`hot`), so a process that is never asked pays nothing;
* nobody waits on the network in the training thread: the trace is exported there (torch requires it),
  then gzip'd and uploaded from the sender thread, resumably, at most a few MiB per cycle.

Steps: the step clock is the last step metric this process logged (verl logs `training/global_step` N at
the end of step N); a process that logs none (verl's workers) follows the run's clock from the server's
replies (`run_step`). A window for steps a..b opens at the first boundary where the clock says a-1 and
closes at the first where it says >= b; inside it each step is marked with a `step N` range, which the
offline analysis turns into the events' step. torch.profiler records the thread that starts it, so a
request that names lanes opens its window in one of those lanes' threads. torch is imported only when a
request arrives (in the sender thread), and only if installed; otherwise the request is answered
"unsupported".
"""

from __future__ import annotations

import os
import threading
import time

from ....protocol import ProfileRequest, RunControl
from ...ratelog import ratelog
from .upload import TraceUploader, _remove, _Upload

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    from ..this_process import ThisProcess

    class ProcessSide(Protocol):
        """All the controller sees of its process's delivery pipeline (client/delivery.py)."""

        step: int | float | None  # the step this process logged last (None: it does not log one)

        def wake(self) -> None: ...  # the sender thread: a status or an upload chunk waits

        def new_span_id(self) -> int: ...

        def new_trace_id(self, span_id: int) -> int: ...

        def span(self, span_id: int, trace_id: int, parent_id: int | None, name: str, lane: str | None,
                 start_ns: int, end_ns: int, attrs: dict, kind: str) -> None: ...

WARM_UP_WAIT_S = 30.0
# the training thread's time opening or closing a profiling window, as a state of its lane (the goodput ledger's
# "profiling overhead", docs/ledger.md)
PROFILER_STATE = "rl_insight.profiler"
FAST_POLL_S = 0.25  # while a request is armed or in flight, replies (cancellations, the run's step) come this often


class _Window:
    """An open profiling window (client/control/profiles/torch_window.py does the torch part)."""

    __slots__ = ("req", "engine", "step", "t0", "start_ns", "steps", "lane")

    def __init__(self, req: ProfileRequest, engine: Any, step: int, lane: str | None) -> None:
        self.req = req
        self.engine = engine
        self.step = step
        self.lane = lane  # a stage window ends when this lane's state of that name ends
        self.t0 = time.monotonic()
        self.start_ns = time.time_ns()
        self.steps = [step]


class ProfileController:
    def __init__(self, delivery: ProcessSide, process: ThisProcess) -> None:
        self._exp = delivery
        self.process = process  # who this process is and where it is (client/control/this_process.py)
        self.hot = False  # read on the hot path: something is armed or profiling
        # lane -> (when, by which clock) it last entered a state while something was armed
        self._entered: dict[str, tuple[float, int | None]] = {}
        self._last_lane: str | None = None  # the lane that last entered a state here (a step metric has none)
        self._lock = threading.Lock()  # around the state below; never held across torch or the network
        self._boundary_lock = threading.Lock()
        self._armed: ProfileRequest | None = None
        self._armed_clock: int | None = None  # the step clock when the request was armed
        self._window: _Window | None = None
        self._exporting = False  # between closing a window and its trace being ready to upload
        self._cancelled: set[str] = set()
        self._seen: set[str] = set()
        self._torch: bool | None = None  # None: not looked for yet
        self._warmed = threading.Event()  # set once torch.profiler has been started once in this process
        # statuses and the finished trace, sent from the sender thread (profile_upload.py)
        self.uploads = TraceUploader(self._lock, self._status)

    def pump(self, transport: Any) -> None:
        """(the sender thread) Statuses, then a few chunks of the trace being uploaded."""
        self.uploads.pump(transport)

    def has_statuses(self) -> bool:
        return bool(self.uploads.outbox)

    @property
    def phase(self) -> str:
        """Where this process is with its one request at a time: idle, armed (waiting for its step), profiling
        (the window is open), exporting (the window closed, the trace being written) or uploading."""
        if self._window is not None:
            return "profiling"
        if self._exporting:
            return "exporting"
        if self.uploads.current is not None:
            return "uploading"
        return "armed" if self._armed is not None else "idle"

    def busy(self) -> bool:
        return self.phase != "idle" or bool(self.uploads.outbox)

    # ------------------------------------------------------------------ sender thread: requests from replies
    def offer(self, control: RunControl) -> None:
        """What one reply asks of this run: take a new matching request, and let go of one no longer listed."""
        if control.profile is None:
            return  # a server that does not profile: nothing to learn from this reply
        ids: set[str] = set()
        for req in control.profile:
            ids.add(req.id)
            if req.id in self._seen or not self.process.selected_by(req):
                continue
            self._seen.add(req.id)
            self._take(req)
        with self._lock:
            for live in (self._armed, self._window.req if self._window else None):
                if live is not None and live.id not in ids:
                    self._cancelled.add(live.id)  # the training thread disarms or stops at its next boundary
            cancelled = self._armed if self._armed is not None and self._armed.id in self._cancelled else None
        if cancelled is not None:
            self._give_up(cancelled, "cancelled", "cancelled before its window opened")

    def _take(self, req: ProfileRequest) -> None:
        if not self._torch_available():
            self._status(req, "unsupported", "torch is not installed in this process's environment: nothing to "
                                             "profile with")
            return
        with self._lock:
            if self.phase != "idle":
                taken = (self._armed or (self._window.req if self._window else None)
                         or (self.uploads.current.req if self.uploads.current else None))
                taken_id = taken.id if taken is not None else "(exporting)"
                self._status(req, "busy", f"this process is already serving profile request {taken_id}; one at a time")
                return
            self._armed = req
            self._armed_clock = self._clock()
            self.hot = True
        self._status(req, "armed", f"waiting for step {req.first_step} (this process is at step {self._clock()})")
        self._warm_up()  # now, on this thread: a window that opens meanwhile waits for it (_start)

    def _torch_available(self) -> bool:
        if self._torch is None:
            import importlib.util
            import sys

            try:
                found = "torch" in sys.modules or importlib.util.find_spec("torch") is not None
                if found:
                    import torch.profiler  # noqa: F401  (here, not in the training thread: it can take seconds)
            except Exception:  # a broken torch is "unsupported", never a crash
                found = False
            self._torch = found
        return self._torch

    def clock(self) -> int | None:
        """The step this process is in by its own step metric, else by the run's clock from replies."""
        return self._clock()

    def _warm_up(self) -> None:
        """Here, on the sender thread when a request is armed, what the first window would otherwise pay in the
        training thread: importing the profiler's module and torch.profiler's first start (about 1.4 s on a CPU
        build), which stalled a profiled step and spilled its window into the next."""
        if self._warmed.is_set():
            return
        try:
            from .torch_window import warm_up

            warm_up()
        except Exception as exc:  # another profiler running, a broken torch: the window tries anyway, and says why
            ratelog.log(30, "profile-warm", "[rl-insight] torch.profiler warm-up failed (the window will try): %r", exc)
        finally:
            self._warmed.set()

    def _clock(self) -> int | None:
        return self.process.step()

    # ------------------------------------------------------------------ training thread: step boundaries
    def boundary(self, lane: str | None = None, state: str | None = None) -> None:
        """Called from the training thread at step boundaries while `hot`: the step metric (lane None) or a
        lane entering a state. Never raises."""
        # blocking: two lanes' threads often reach a boundary together, and skipping the chosen lane's call would
        # open the window a whole state late; the lock is held only while a window opens or closes
        self._boundary_lock.acquire()
        t0, before = time.time_ns(), self._window
        try:
            self._boundary(lane, state)
            if lane is not None and self._armed is not None:
                self._entered[lane] = (time.time(), self._clock())
            if lane is not None:
                self._last_lane = lane
            if self._window is not before:  # a window opened or closed here, on the training thread
                self._overhead(lane or (before.lane if before is not None else None) or self._last_lane, t0)
        except Exception as exc:  # profiling never breaks training
            ratelog.log(40, "profile-boundary", "[rl-insight] profiling error (ignored): %r", exc)
        finally:
            self._boundary_lock.release()

    def _overhead(self, lane: str | None, t0: int) -> None:
        """The time the training thread just spent opening or closing a window, as a state of `lane` (when known)."""
        if lane is None:
            return
        sid = self._exp.new_span_id()
        self._exp.span(sid, self._exp.new_trace_id(sid), None, PROFILER_STATE, lane, t0, time.time_ns(),
                       {"monitor.trace_segment": "state_interval", "state_name": PROFILER_STATE,
                        "state_lane_id": lane}, "state")

    def annotate(self, state: str) -> Any:
        """A `trace_state` entered (synchronously) while a window is open: the same range in the trace, so that
        the analysis of the window shows the timeline's states, nested as they are there (not whatever ranges the
        code happens to record). Returns the open range (to `end_annotation`), or None."""
        w = self._window
        if w is None or not w.engine.records_here():
            return None
        try:
            from torch.autograd.profiler import record_function

            rf = record_function(state)
            rf.__enter__()
            return rf
        except Exception:  # profiling never breaks training
            return None

    @staticmethod
    def end_annotation(rf: Any) -> None:
        try:
            rf.__exit__(None, None, None)
        except Exception:
            pass

    def stage_end(self, lane: str, state: str) -> None:
        """A lane's state ended (while `hot`): closes a stage window that this state opened."""
        w = self._window
        if w is None or not w.req.stage or w.req.stage != state or w.lane != lane:
            return
        self._boundary_lock.acquire()
        try:
            if self._window is w and w.engine.can_act_here():
                self._stop(w, keep=True, note=f"stage {state} of step {w.step} profiled on {lane}; uploading")
        except Exception as exc:  # profiling never breaks training
            ratelog.log(40, "profile-boundary", "[rl-insight] profiling error (ignored): %r", exc)
        finally:
            self._boundary_lock.release()

    def _boundary(self, lane: str | None, state: str | None) -> None:
        step = self._clock()
        w = self._window
        if w is not None:
            if not w.engine.can_act_here():
                return  # an older torch's profiler is marked and stopped by the thread that started it
            if w.req.id in self._cancelled:
                self._stop(w, keep=False)
                self._status(w.req, "cancelled", "cancelled while profiling; the trace was discarded")
            elif step is not None and step >= w.req.last_step:
                self._stop(w, keep=True)
            elif time.monotonic() - w.t0 > w.req.max_window_s:
                self._stop(w, keep=True, note=f"window closed after its cap of {w.req.max_window_s:.0f} s")
            elif step is not None and step + 1 != w.step:
                self._next_mark(w, step + 1)
            return
        req = self._armed
        if req is None:
            self.hot = False
            return
        if req.id in self._cancelled or time.time() > req.expires_at:
            self._give_up(req, None if req.id in self._cancelled else "expired", "the request expired before its "
                                                                                 "window opened")
            return
        if step is None and req.first_step > 1:
            return  # no step clock yet (neither this process's step metric nor the server's)
        current = 0 if step is None else step
        if current >= req.first_step:
            self._give_up(req, "expired", f"step {req.first_step} had already begun here (this process is at step "
                                          f"{current})")
        elif current == req.first_step - 1:
            if req.lanes and lane not in req.lanes:
                return  # torch records the thread that starts it: open the window in a chosen lane's thread
            when, by_clock = self._entered.get(lane or "", (0.0, None))
            heard_at = self.process.run_step_at
            if self._exp.step is None and by_clock is not None and by_clock < current and when > heard_at > 0:
                # this process follows the run's clock from replies, and this lane entered a state after the clock
                # moved but while it still read the old one: step `first` began here unseen. Exact or nothing.
                self._give_up(
                    req,
                    "expired",
                    f"step {req.first_step} began on {lane} before the run's step clock reached "
                    f"this process; ask for step {req.first_step + 1} or later",
                )
                return
            if self._armed_clock is not None and self._armed_clock >= current:
                # armed while step first-1 was already over: step `first` may have begun here, so a window opened
                # now could miss its start. Exact or nothing: say so.
                self._give_up(
                    req,
                    "expired",
                    f"the request arrived after step {current} had ended here, so step "
                    f"{req.first_step} may already have begun; ask for step {req.first_step + 1} or later",
                )
                return
            if req.stage and state != req.stage:
                return  # a stage window opens when that state begins
            self._start(req, req.first_step, lane)

    def _give_up(self, req: ProfileRequest, state: str | None, message: str) -> None:
        """Disarm `req` (no window was opened for it) and say why (`state` None: say nothing)."""
        with self._lock:
            if self._armed is req:
                self._armed = None
            self.hot = self._armed is not None or self._window is not None
        if state is not None:
            self._status(req, state, message)

    def _start(self, req: ProfileRequest, step: int, lane: str | None) -> None:
        # a window due before the sender thread finished warming torch.profiler up waits for it (never two at once):
        # the first start's cost, paid here only when the request came that close to its step
        self._warmed.wait(WARM_UP_WAIT_S)
        from .torch_window import TorchWindow

        try:
            engine = TorchWindow(req.activities, req.memory, req.stack)
            engine.open(step)
        except Exception as exc:  # e.g. another profiler (verl's) is already running
            self._give_up(req, "failed", f"torch.profiler did not start: {exc!r:.300}")
            return
        with self._lock:
            self._armed = None
            self._window = _Window(req, engine, step, lane)
        how = "every thread" if engine.threaded else "the thread that opened the window"
        what = f"stage {req.stage} of step {step} on {lane}" if req.stage else f"step {step}"
        self._status(req, "profiling", f"profiling {what} on {', '.join(engine.activities)} ({how})")

    def _next_mark(self, w: _Window, step: int) -> None:
        w.engine.mark(step)
        w.step = step
        w.steps.append(step)

    def _stop(self, w: _Window, keep: bool, note: str = "") -> None:
        import tempfile

        with self._lock:
            self._window = None
            self.hot = self._armed is not None
            self._exporting = keep
        end_ns = time.time_ns()
        window = {"start_ns": w.start_ns, "end_ns": end_ns, "steps": w.steps}
        directory = os.environ.get("RL_INSIGHT_PROFILE_DIR") or tempfile.gettempdir()
        name = self._trace_name(w.req)
        path = os.path.join(directory, f"rl-insight-profile-{w.req.id}-{self.process.pid}.json")

        def exported(out: str | None, err: str | None) -> None:  # on the profiler's thread when it has one
            self._exporting = False
            if err is not None:
                self._status(w.req, "failed", f"stopping or exporting the trace to {path} failed: {err}", window=window)
                _remove(path)
            elif out is not None:
                with self._lock:
                    self.uploads.current = _Upload(w.req, out, name, window)
                    self._exporting = False
                self._status(w.req, "uploading", note or f"steps {w.steps[0]}-{w.steps[-1]} profiled; uploading",
                             window=window)

        w.engine.close(keep, path, exported)

    def _trace_name(self, req: ProfileRequest) -> str:
        """verl's file-name grammar (`{role}_rank{r}[-of-{W}]_pid{pid}_{timestamp}.json.gz`), so the offline analysis
        names the lane as verl would. Without a rank (threads as ranks, no RANK variable) the chosen lane says
        it: `rank_1` gives role `rank`, rank 1."""
        import re  # here: `import rl_insight` stays free of it

        rank, role = self.process.rank(), next(iter(sorted(self.process.roles())), None)
        lanes = self.process.lanes
        lane = next((x for x in req.lanes if x in lanes), None) or next(iter(sorted(lanes)), None)
        m = re.match(r"^(.*?)[_-]?(\d+)$", lane or "")
        if rank is None and m:
            rank = int(m.group(2))
        if role is None:
            role = (m.group(1) if m and m.group(1) else lane) or "process"
        role = re.sub(r"[^0-9A-Za-z.=+-]", "-", role).strip("-") or "process"
        world = os.environ.get("WORLD_SIZE", "")
        stamp = time.strftime("%Y%m%d%H%M%S", time.localtime()) + f"{int(time.time() * 1000) % 1000:03d}"
        return f"{role}_rank{rank if rank is not None else 0}" + (f"-of-{world}" if world.isdigit() else "") + \
            f"_pid{self.process.pid}_{stamp}.json.gz"

    # ------------------------------------------------------------------ any thread: statuses
    def _status(self, req: ProfileRequest, state: str, message: str, window: dict[str, Any] | None = None,
                file: str | None = None) -> None:
        body: dict[str, Any] = {"state": state, "message": message, "process": self.process.describe()}
        if window is not None:
            body["window"] = window
        if file is not None:
            body["file"] = file
        self.uploads.outbox.append((req.id, body))
        self._exp.wake()

    def settle(self, timeout: float) -> None:
        """(finish, before `at_exit`) A closed window's trace still being written or sent gets up to `timeout` to go
        out, the sender thread sending it meanwhile: a job that ends right after its profiled window keeps its trace
        instead of reporting the upload cut short."""
        deadline = time.monotonic() + timeout
        while self.phase in ("exporting", "uploading") and time.monotonic() < deadline:
            self._exp.wake()
            time.sleep(0.05)

    def at_exit(self) -> None:
        """The process is ending: a window still open is closed and reported, never left half-done."""
        w = self._window
        if w is not None:
            with self._lock:
                self._window = None
                self.hot = False
            if w.engine.can_act_here():
                w.engine.close(False, "", lambda out, err: None, wait_s=2.0)
            self._status(w.req, "failed", f"the process exited during the profiling window (step {w.step} of "
                                          f"{w.req.first_step}-{w.req.last_step}); the trace was discarded")
        elif self._armed is not None:
            self._status(self._armed, "expired", "the process exited before the window opened")
            self._armed = None
        up = self.uploads.current
        if up is not None:
            self._status(up.req, "failed", f"the process exited during the upload ({max(up.offset, 0)} of "
                                           f"{max(up.total, 0)} bytes sent)", window=up.window)
