"""The run store's writer in a process of its own: the server's default (`store_writer: "process"`).

Why: in the server's process the writer's Python work and the event loop's took turns on one GIL, and SQLite's (and
psycopg's) calls give the GIL away at every step; each time the writer took it back it waited for the busy loop.
With 1,000 clients at a batch a second, answers waited about a second for their commit while the process used
70-80 % of one core (bench/RESULTS.md, issue 24). In a child process the writer has a GIL and a core of its own;
this process only pickles what it hands over (~20 µs a batch).

How: `WriterProcess` is this process's `HandOver`. Hand-overs queue here (bounded: past it a hand-over is dropped and
counted, as RunStoreWriter does); a sender thread sends what queued as one message with `upto`, the sequence number of
the latest hand-over it covers. The child (`python -m rl_insight.server.runstore.writer_process`, `serve`) runs a
RunStoreWriter, feeds it every message and, once no message waits, asks it when what it was fed is durable; when that
resolves it answers `("done", upto, ok, state)`. A receiver thread here resolves the `durable` futures up to `upto`
and keeps the child's state (stats, integrity, the timeline summary's health) for /healthz and /metrics.

Invariants:
- a `durable` future resolves True only on the child's "done" for what it covers: nothing is acknowledged before it
  is committed. When the child dies, whatever waits resolves False (the clients resend; writes are idempotent), a
  new child is started, and the store reports the failure meanwhile (degraded, `last_error`).
- the child ends with this process: its input pipe reaches EOF, it writes what it received and exits (after a
  SIGKILL of the server too). It ignores SIGINT (a terminal's Ctrl-C reaches the whole process group; the server
  stops it in order, after its last hand-overs).
- the child's log records are logged here, under their own logger names.
"""

from __future__ import annotations

import copy
import logging
import pickle
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ... import errors
from ..workers.child_process import PipeChild, ServerPipe, relay_log
from .backend import Backend, StoreLocation, open_backend
from .backend.checkpoints import CheckpointHealth
from .hand_over import HandOver, weight
from .retention import DEFAULT_RETENTION_DAYS, DEFAULT_STORE_MAX_BYTES
from .rows import WriterStats
from .spans.span_lod import SummaryHealth
from .writer import COMMIT_SPACING_S

log = logging.getLogger("rl_insight.server.runstore")
WAKE_AT_ITEMS = 20_000  # queued this many, the sender goes without waiting for its interval
# The sender sends no sooner than this after its previous send (WAKE_AT_ITEMS and a close skip the wait). Every
# answer that waits for its commit wakes it: at 1,000 clients that was ~1,000 sends a second of one batch each, each
# a hand-over of this process's GIL from the event loop to the sender and back, for a child that starts its
# transactions COMMIT_SPACING_S (10 ms) apart anyway. Half that spacing: a batch misses no more than one commit.
SEND_SPACING_S = COMMIT_SPACING_S / 2
STATE_EVERY_S = 1.0  # the child reports its state this often besides every "done"
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
# what the child's start may take at most (a migration of a large store runs before "ready")
START_TIMEOUT_S = 3600.0
# what the child reports of itself: stats, integrity, the timeline summary's health, its lag, the checkpoints' health
_State = tuple[WriterStats, str, SummaryHealth, float, "CheckpointHealth | None"]


def _start_error(kind: str, message: str, hint: str | None) -> Exception:
    cls = getattr(errors, kind, None)
    if isinstance(cls, type) and issubclass(cls, errors.RLInsightError):
        return cls(message, hint=hint)
    return errors.StoreError(f"the run store could not be opened ({kind}: {message})", hint=hint)


class WriterProcess(HandOver):
    def __init__(self, where: Backend | StoreLocation | Path, *, max_queue_items: int = 2_000_000,
                 flush_interval_s: float = 0.2, retention_days: float = DEFAULT_RETENTION_DAYS,
                 max_bytes: int = DEFAULT_STORE_MAX_BYTES, prune_every_s: float = 60.0,
                 step_metric: str = "training/global_step") -> None:
        """Starts the child and returns once it opened the store; StoreError (as RunStoreWriter raises it) when it
        cannot (a foreign or damaged file, a refused connection), before the server starts."""
        self.backend = open_backend(where)
        self.location = self.backend.location  # (what the child opens its own backend from)
        self.path = self.location.display  # what logs may name (never a password)
        self.on_runs_deleted: list[Callable[[set[tuple[str, str]]], object]] = []
        self.on_settled: list[Callable[[], None]] = []
        self.lead: Callable[[], bool] = lambda: True
        self._options = {"max_queue_items": max_queue_items, "flush_interval_s": flush_interval_s,
                         "retention_days": retention_days, "max_bytes": max_bytes, "prune_every_s": prune_every_s,
                         "step_metric": step_metric}
        self._max_queue, self._interval = max_queue_items, flush_interval_s
        self._lock = threading.Lock()
        self._seq = 0  # hand-overs so far
        self._failed = 0  # the latest hand-over that was dropped here or lost with the child
        self._done = 0  # every hand-over up to this one is settled in the child
        self._sent = 0  # the latest hand-over sent
        self._asked = 0  # the latest hand-over a caller wants committed (ask, durable)
        self._queue: list[tuple[str, Any, int]] = []  # (kind, payload, items) not yet sent
        self._queued = 0
        self._pending: deque[tuple[int, int, Future[bool]]] = deque()  # (settled at, since, future), in seq order
        self._dropped: dict[str, int] = {}  # lost here, by reason (the child counts its own)
        no_summary: SummaryHealth = {"behind": False, "buckets_built": 0, "failures": 0}
        self._child_state: _State = (WriterStats(), "ok", no_summary, 0.0, None)
        self._down: tuple[str, float] | None = None  # (why, since when) while there is no child
        self._last_done = time.monotonic()
        self._closing = self._closed = False
        self._wake = threading.Event()
        self._child = self._start_child()
        self._sender = threading.Thread(target=self._send_loop, name="rl-insight-runstore-send", daemon=True)
        self._receiver = threading.Thread(target=self._receive_loop, name="rl-insight-runstore-ack", daemon=True)
        self._sender.start()
        self._receiver.start()

    # ------------------------------------------------------------------ the child
    def _start_child(self) -> PipeChild:
        try:
            child = PipeChild.start(__name__)
        except OSError as exc:
            raise errors.StoreError(f"cannot start the run store's writer process: {exc}") from None
        try:
            child.send(("open", self.location, self._options, logging.getLogger("rl_insight").getEffectiveLevel()))
            deadline = time.monotonic() + START_TIMEOUT_S
            while not child.poll(0.2):
                if child.proc.poll() is not None or time.monotonic() > deadline:
                    raise errors.StoreError(f"the run store's writer process ended while opening {self.path} "
                                            f"(exit code {child.proc.poll()})", hint="the server log says why")
            msg = child.receive()
        except (OSError, EOFError) as exc:
            child.close(5)
            raise errors.StoreError(f"the run store's writer process ended while opening {self.path} ({exc})",
                                    hint="the server log says why") from None
        except errors.StoreError:
            child.close(5)
            raise
        if msg[0] == "failed":
            child.close(5)
            raise _start_error(*msg[1:])
        self._child_state = msg[1]
        return child

    def _receive_loop(self) -> None:
        child = self._child
        while True:
            try:
                msg = child.receive()
            except (EOFError, OSError, pickle.UnpicklingError):
                if self._closing:
                    return
                replaced = self._child_lost(child)
                if replaced is None:
                    return
                child = replaced
                continue
            self._handle(msg)
            if msg[0] == "stopped":
                return

    def _handle(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == "done":
            _, upto, ok, state = msg
            self._child_state = state
            self._settle(upto, ok)
        elif kind in ("state", "stopped"):
            self._child_state = msg[1]
        elif kind == "runs_deleted":
            for callback in self.on_runs_deleted:
                try:
                    callback(msg[1])
                except Exception as exc:  # a listener's failure never undoes the deletion
                    log.warning("after deleting runs: %r", exc)
        elif kind == "log":
            relay_log(msg)

    def _settle(self, upto: int, ok: bool) -> None:
        settled: list[tuple[int, Future[bool]]] = []
        with self._lock:
            if not ok:
                self._failed = max(self._failed, upto)
            moved = upto > self._done or not ok
            self._done = max(self._done, upto)
            self._last_done = time.monotonic()
            while self._pending and self._pending[0][0] <= self._done:
                _, since, fut = self._pending.popleft()
                settled.append((since, fut))
            failed = self._failed
        for since, fut in settled:
            fut.set_result(failed <= since)
        if moved:
            for hook in self.on_settled:  # once per commit, however many requests wait on it
                hook()

    def _child_lost(self, child: PipeChild) -> PipeChild | None:
        """The child died: what waits resolves False, a new one is started (None when closing)."""
        code = child.close(5)
        why = f"the run store's writer process ended unexpectedly (exit code {code}); what it had not committed is " \
              "answered with 503 and resent by the clients"
        log.error("%s; starting a new one", why)
        with self._lock:
            self._down = (why, time.time())
            self._failed = self._done = self._seq  # settled, as lost: whatever waits is answered 503 and resent
            waiting, self._pending = list(self._pending), deque()
        for _, _, fut in waiting:
            fut.set_result(False)
        for hook in self.on_settled:
            hook()
        for attempt in range(10**9):
            if self._closing:
                return None
            time.sleep(RESTART_BACKOFF_S[min(attempt, len(RESTART_BACKOFF_S) - 1)])
            try:
                replaced = self._start_child()
            except Exception as exc:
                log.error("run store writer process could not be started again: %s", exc)
                continue
            with self._lock:
                self._child, self._down = replaced, None
                self._sent = self._done  # what waits now is asked again of the new child
            self._wake.set()
            log.warning("run store writer process started again (%s)", self.path)
            return replaced
        return None

    def _lead_now(self, last: bool | None) -> bool:
        try:
            return bool(self.lead())
        except Exception:  # a lease that cannot say keeps the last answer
            return bool(last)

    def _send_loop(self) -> None:
        lead: bool | None = None
        told: PipeChild | None = None  # the child `lead` was sent to (a new one starts as the lead)
        last_send = -float("inf")
        while True:
            self._wake.wait(self._interval)
            wait = last_send + SEND_SPACING_S - time.monotonic()
            if wait > 0 and not self._closing and self._queued < WAKE_AT_ITEMS:
                time.sleep(wait)  # (what queues meanwhile goes along)
            self._wake.clear()
            with self._lock:
                items, self._queue, self._queued = self._queue, [], 0
                upto, child, closing = self._seq, self._child, self._closing
                asked = self._asked > self._sent
            if child is not told:
                lead, told = None, child
            now_lead = self._lead_now(lead)
            try:
                if now_lead != lead:
                    child.send(("lead", now_lead))
                    lead = now_lead
                if items or asked:
                    last_send = time.monotonic()
                    child.send(("items", items, upto))
                    self._sent = max(self._sent, upto)
            except (OSError, ValueError):  # the child is gone: the receiver starts another
                lead = None
                if items:
                    with self._lock:
                        self._failed = max(self._failed, upto)
                        n = sum(i[2] for i in items)
                        self._dropped["writer_exited"] = self._dropped.get("writer_exited", 0) + n
                if not closing:
                    time.sleep(0.05)
            if closing:
                return

    # ------------------------------------------------------------------ hand-over (called by ingest)
    def _put(self, kind: str, payload: Any, n: int) -> None:
        w = weight(kind, payload)
        with self._lock:
            self._seq += 1
            if self._queued + w > self._max_queue:
                self._failed = self._seq
                self._dropped["queue_full"] = self._dropped.get("queue_full", 0) + n
                return
            self._queue.append((kind, payload, n))
            self._queued += w
            wake = self._queued >= WAKE_AT_ITEMS
        if wake:
            self._wake.set()

    def seq(self) -> int:
        return self._seq

    def settled(self) -> tuple[int, int]:
        return self._done, self._failed

    def ask(self, upto: int) -> None:
        with self._lock:
            if self._done >= upto or self._asked >= upto:  # settled, or the sender has it to ask for already
                return
            self._asked = self._seq
        self._wake.set()

    def durable(self, since: int) -> "Future[bool]":
        fut: Future[bool] = Future()
        with self._lock:
            target = self._seq
            settled = self._failed <= since if self._done >= target else None
            if settled is None:
                self._pending.append((target, since, fut))
                self._asked = max(self._asked, target)
        if settled is None:
            self._wake.set()
        else:
            fut.set_result(settled)
        return fut

    def flush(self, timeout: float = 10.0) -> bool:
        try:
            self.durable(self._seq).result(timeout)
            return True
        except TimeoutError:
            return False

    def close(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        self.flush(timeout)
        with self._lock:
            self._closing = True
            child = self._child
        self._wake.set()
        self._sender.join(timeout)
        try:
            child.send(("stop",))
        except (OSError, ValueError):
            pass
        self._receiver.join(timeout)
        child.close(timeout)

    # ------------------------------------------------------------------ what the rest of the server reads
    @property
    def stats(self) -> WriterStats:
        s = copy.copy(self._child_state[0])
        s.by_reason = dict(s.by_reason)
        with self._lock:
            for reason, n in self._dropped.items():
                s.by_reason[reason] = s.by_reason.get(reason, 0) + n
                s.dropped += n
            s.queue_items += self._queued
            down = self._down
        if down is not None:
            s.last_error, s.degraded_since = down[0], s.degraded_since or down[1]
        return s

    @property
    def integrity(self) -> str:
        return self._child_state[1]

    def summary_health(self) -> SummaryHealth:
        return self._child_state[2].copy()

    def checkpoint_health(self) -> CheckpointHealth | None:
        health = self._child_state[4]
        return health.copy() if health is not None else None

    def lag_s(self) -> float:
        with self._lock:
            if self._queue or self._sent > self._done or self._down is not None:  # handed over, not yet committed
                return time.monotonic() - self._last_done
        return self._child_state[3]


# ---------------------------------------------------------------------- the child's side
def _state(w: Any) -> _State:
    return w.stats, w.integrity, w.summary_health(), w.lag_s(), w.checkpoint_health()


def serve(fd_in: int, fd_out: int) -> int:
    """The child: open the store, then write every message until the server's pipe ends or says stop."""
    from .writer import RunStoreWriter

    pipe = ServerPipe(fd_in, fd_out)
    send, tell = pipe.send, pipe.tell  # tell: from the writer's threads, when the server may be gone already
    _, location, options, level = pipe.receive()
    pipe.log_to_server(level)
    try:
        w = RunStoreWriter(location, **options)
    except Exception as exc:
        send(("failed", type(exc).__name__, getattr(exc, "message", str(exc)), getattr(exc, "hint", None)))
        return 1
    lead = [True]
    w.lead = lambda: lead[0]
    w.on_runs_deleted.append(lambda keys: tell(("runs_deleted", keys)))
    send(("ready", _state(w)))
    stopping = threading.Event()

    def report() -> None:
        while not stopping.wait(STATE_EVERY_S):
            tell(("state", _state(w)))

    threading.Thread(target=report, name="rl-insight-runstore-state", daemon=True).start()

    def done(upto: int, fut: Future[bool]) -> None:  # on the writer's thread, after its commit
        tell(("done", upto, fut.result(), _state(w)))

    since, upto, fed = w.seq(), 0, False
    try:
        while True:
            try:
                msg = pipe.receive()
            except (EOFError, OSError):
                break  # the server ended: write what it sent, then end too
            if msg[0] == "items":
                for kind, payload, n in msg[1]:
                    w._put(kind, payload, n)  # (the same hand-over, numbered by this writer)
                upto, fed = msg[2], True
            elif msg[0] == "lead":
                lead[0] = msg[1]
            elif msg[0] == "stop":
                break
            if fed and not pipe.waiting():  # nothing more waiting: one durability mark covers all that was fed
                w.durable(since).add_done_callback(partial(done, upto))
                since, fed = w.seq(), False
    finally:
        stopping.set()
        w.close()
        tell(("stopped", _state(w)))
    return 0


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
