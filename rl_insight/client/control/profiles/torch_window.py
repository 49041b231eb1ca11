"""One profiling window of torch.profiler: open at a step boundary, mark each step, close and export.

torch.profiler is bound to a thread: the thread that starts it must stop it, and by default only that
thread's operators are recorded. Where torch can record every thread (`profile_all_threads`), the
profiler lives on a thread of its own: any thread can open, mark and close the window (a step's first
state may run on another thread than the last, as in thread-per-rank or async code), and the export
runs there too: closing waits only until recording has stopped (the window ends exactly at the
boundary), never for the export. On an older torch the window runs inline in
the thread that opened it, which alone can mark and close it (and waits for the export).

Imported only when a profile request arrives, so `import rl_insight` never pays for torch.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

Done = Callable[[str | None, str | None], None]  # (exported path or None, error or None)
OPEN_TIMEOUT_S = 10.0


def warm_up() -> None:
    """Start and stop an empty CPU profile: torch.profiler's one-time initialisation (about 1.4 s on a CPU build),
    paid by the caller (the sender thread, when a request is armed) instead of the first window's opening thread."""
    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=False)
    prof.start()
    prof.stop()


def _all_threads_config() -> Any | None:
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(profile_all_threads=True)
    except (ImportError, TypeError, AttributeError):  # torch without the option
        return None


class TorchWindow:
    def __init__(self, activities: tuple[str, ...], memory: bool, stack: bool) -> None:
        acts = [ProfilerActivity.CPU]
        if "cuda" in activities and torch.cuda.is_available():
            acts.append(ProfilerActivity.CUDA)
        self.activities = [a.name.lower() for a in acts]
        self._kw: dict[str, Any] = {
            "activities": acts,
            "profile_memory": memory,
            "with_stack": stack,
            "record_shapes": False,
        }
        config = _all_threads_config()
        self.threaded = config is not None
        if config is not None:
            self._kw["experimental_config"] = config
        self._prof: Any = None
        self._mark: Any = None
        self._owner = threading.get_ident()
        self._cmds: queue.Queue[tuple] = queue.Queue()

    # ------------------------------------------------------------------ the window, from any thread (threaded) or its
    # owner
    def open(self, step: int) -> None:
        """Start recording; raises when torch.profiler cannot start (another profiler runs, …)."""
        self._owner = threading.get_ident()
        if not self.threaded:
            self._start(step)
            return
        opened: queue.Queue[BaseException | None] = queue.Queue()
        threading.Thread(target=self._loop, args=(step, opened), name="rl-insight-profiler", daemon=True).start()
        try:
            err = opened.get(timeout=OPEN_TIMEOUT_S)
        except queue.Empty:
            self._cmds.put(("close", False, "", lambda p, e: None, threading.Event()))
            raise RuntimeError(f"torch.profiler did not start within {OPEN_TIMEOUT_S:.0f} s") from None
        if err is not None:
            raise err

    def can_act_here(self) -> bool:
        return self.threaded or threading.get_ident() == self._owner

    def records_here(self) -> bool:
        """Whether this thread's ranges land in the trace: every thread's with `profile_all_threads`, else only the
        opening thread's."""
        return self.can_act_here()

    def mark(self, step: int) -> None:
        if self.threaded:
            self._cmds.put(("mark", step))
        else:
            self._next_mark(step)

    def close(self, keep: bool, path: str, done: Done, wait_s: float = 60.0) -> None:
        """Stop recording, then export to `path` when `keep`; `done` is called when that is over. Threaded, the
        caller waits only until recording has stopped (so the window ends exactly here), not for the export."""
        if self.threaded:
            stopped = threading.Event()
            self._cmds.put(("close", keep, path, done, stopped))
            stopped.wait(wait_s)
        else:
            self._finish(keep, path, done, None)

    # ------------------------------------------------------------------ torch calls (one thread)
    def _start(self, step: int) -> None:
        self._prof = profile(**self._kw)
        self._prof.start()
        self._mark = record_function(f"step {step}")  # the offline analysis reads steps from these ranges
        self._mark.__enter__()

    def _next_mark(self, step: int) -> None:
        self._mark.__exit__(None, None, None)
        self._mark = record_function(f"step {step}")
        self._mark.__enter__()

    def _finish(self, keep: bool, path: str, done: Done, stopped: threading.Event | None) -> None:
        try:
            try:
                self._mark.__exit__(None, None, None)
                self._prof.stop()
            finally:
                if stopped is not None:
                    stopped.set()
            if keep:
                self._prof.export_chrome_trace(path)
                if not os.path.isfile(path) or os.path.getsize(path) == 0:  # kineto logs a failed write and returns
                    raise OSError(f"nothing was written to {path} (is the directory there, writable, not full?)")
        except Exception as exc:  # reported by the caller, never raised into training
            done(None, f"{type(exc).__name__}: {exc}"[:300])
            return
        done(path if keep else None, None)

    def _loop(self, step: int, opened: queue.Queue) -> None:
        try:
            self._start(step)
        except BaseException as exc:
            opened.put(exc)
            return
        opened.put(None)
        while True:
            cmd = self._cmds.get()
            if cmd[0] == "mark":
                try:
                    self._next_mark(cmd[1])
                except Exception:  # a lost step mark only blurs the step split
                    pass
            else:
                _, keep, path, done, stopped = cmd
                self._finish(keep, path, done, stopped)
                return
