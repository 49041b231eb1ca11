"""The insight rounds in a process of their own: the server's default (`insights_worker: "process"`).

Why: a round reads the last five minutes of every live run's spans and computes each lane's states, about a second
of Python at a thousand clients (5,000 lanes). On a thread of the server it held the GIL that the ingest loop needs:
with it, 1,000 clients at a batch a second had a p99 of 223-398 ms; with the refresh off, 96-126 ms
(bench/RESULTS.md, issue 24). In a child the round has a GIL of its own; the server only unpickles the result.

How: `InsightProcess.run()` is `InsightRounds.run()` across a pipe (server/workers/child_process.py): it sends
("round",) and waits for ("result", InsightRound); the child (`python -m rl_insight.server.live.insights.process`,
`serve`) keeps one `InsightRounds` on its own reader of the store, so what it summarized stays known between rounds.
The per-step statistics come back in the result and the server hands them to its writer (the store keeps one).

Invariants:
- one round at a time; a round that fails in the child, takes longer than `round_timeout_s`, or loses the child
  raises ServiceError for that round; a lost or hung child is killed and a new one starts for the next round.
- the child reads only, runs at a lower priority (`NICE`) than the server and its writer, and ends with the server
  (its pipe's EOF), after a SIGKILL of the server too; it ignores SIGINT (a terminal's Ctrl-C reaches the whole
  process group; the server stops it in order).
- the child's log records are logged here, under their own logger names.
"""

from __future__ import annotations

import logging
import os
import pickle
import sys
import threading
import time
from typing import Any

from ....errors import ServiceError
from ...runstore.backend.location import StoreLocation
from ...runstore.reader import RunStoreReader
from ...workers.child_process import PipeChild, ServerPipe, relay_log
from .rounds import InsightRound, InsightRounds

log = logging.getLogger("rl_insight.server.insights")
START_TIMEOUT_S = 60.0  # the child's imports and its answer to "open"
ROUND_TIMEOUT_S = 300.0  # a round is bounded (InsightRounds.STEP_BUDGET steps); past this the child is stuck
# the child's scheduling priority below the server's and its writer's: on a busy machine a round waits for CPU rather
# than the answers (a round comes every 15 s and may take longer; an answer waits on the writer's commit)
NICE = 10


class InsightProcess:
    """`InsightRounds` in a child process, started on the first round and again after a failure."""

    def __init__(self, location: StoreLocation, options: dict[str, Any], *,
                 round_timeout_s: float = ROUND_TIMEOUT_S) -> None:
        self._location, self._options = location, options
        self._round_timeout_s = round_timeout_s
        self._lock = threading.Lock()
        self._child: PipeChild | None = None
        self._closed = False
        self.starts = 0  # children started so far (a restart is a second one)

    def run(self) -> InsightRound:
        with self._lock:
            if self._closed:
                raise ServiceError("the insight process was stopped")
            child = self._child or self._start()
            try:
                child.send(("round",))
                msg = self._answer(child, self._round_timeout_s, "a round")
            except (OSError, EOFError, ValueError, pickle.UnpicklingError):
                code = self._drop()
                raise ServiceError(f"the insight process ended during a round (exit code {code}); a new one starts "
                                   "for the next round", hint="the server log says why") from None
            if msg[0] == "error":
                raise ServiceError(f"an insight round failed: {msg[1]}")
            result: InsightRound = msg[1]
            return result

    def _start(self) -> PipeChild:
        try:
            child = PipeChild.start(__name__)
        except OSError as exc:
            raise ServiceError(f"cannot start the insight process: {exc}") from None
        self._child = child
        self.starts += 1
        if self._closed:  # closed while it started: no child outlives close()
            self._drop()
            raise ServiceError("the insight process was stopped")
        try:
            child.send(("open", self._location, self._options, logging.getLogger("rl_insight").getEffectiveLevel()))
            self._answer(child, START_TIMEOUT_S, "its start")
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            code = self._drop()
            raise ServiceError(f"the insight process ended while starting (exit code {code})",
                               hint="the server log says why") from None
        return child

    def _answer(self, child: PipeChild, timeout_s: float, what: str) -> tuple:
        """The child's next answer, relaying its log records meanwhile; ServiceError (child killed) past timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not child.poll(left):
                self._drop()
                raise ServiceError(f"the insight process did not answer {what} within {timeout_s:g} s; it was "
                                   "stopped and a new one starts for the next round")
            msg = child.receive()
            if msg[0] == "log":
                relay_log(msg)
                continue
            return msg

    def _drop(self) -> int | None:
        child, self._child = self._child, None
        return child.close(5) if child is not None else None

    def close(self, timeout: float = 5.0) -> None:
        """Stop the child: it ends after the round it may be in, or is killed past `timeout`. Not under the round's
        lock: a stuck round must not hold the server's shutdown (the round in flight then fails)."""
        self._closed = True
        child, self._child = self._child, None
        if child is not None:
            try:
                child.send(("stop",))
            except (OSError, ValueError):
                pass
            child.close(timeout)


# ---------------------------------------------------------------------- the child's side
def serve(pipe: ServerPipe) -> int:
    """The child: answer every round until the server's pipe ends or says stop."""
    try:
        os.nice(NICE)
    except OSError:  # not allowed here: the round still runs, at the server's priority
        pass
    _, location, options, level = pipe.receive()
    pipe.log_to_server(level)
    reader = RunStoreReader(location)  # (connects on the first round)
    rounds = InsightRounds(reader, **options)
    pipe.send(("ready",))
    log.info("insight process %d ready on %s", os.getpid(), location.display)
    while True:
        try:
            msg = pipe.receive()
        except (EOFError, OSError):
            return 0  # the server ended
        if msg[0] == "stop":
            return 0
        if msg[0] == "round":
            try:
                result = rounds.run()
            except Exception as exc:  # the store is away, a bug: the server says so; the next round comes
                pipe.send(("error", f"{type(exc).__name__}: {exc}"))
                continue
            pipe.send(("result", result))


if __name__ == "__main__":
    sys.exit(serve(ServerPipe.from_argv(sys.argv)))
