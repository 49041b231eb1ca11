"""The client's delivery pipeline: the hot path appends to a bounded deque; one named daemon thread sends.

Modelled on OpenTelemetry's BatchSpanProcessor, minus its gaps:

* every drop is counted with a reason (`queue_full`, `series_limit`, `invalid_value`, `rejected`,
  `unauthorized`) and reported to the server as a client self-metric;
* counters and histograms are cumulative outside the queue (`aggregate.py`);
* the thread sends shortly after activity (every `linger_s`, 0.1 s by default), so a process killed
  without warning (Ray actors at `ray.shutdown()`) loses at most about that much, and sends a
  heartbeat while idle so the server can tell a silent process from a dead one;
* `flush(timeout)` waits outside the data queue (a flush never evicts a record) and says whether
  everything since the previous flush was delivered; shutdown honours its deadline;
* batches are encoded in slices (`wire.py`) so the thread never holds the GIL for long.

Parts: `Aggregates` (cumulative state), `BatchBuilder` (batching.py: what is queued, as one batch), `wire`
(encoding), a `Transport` (injected; HTTP by default), and the control requests on replies: `ThisProcess`
(control/this_process.py: who this process is, for every kind), `ProfileController` (control/profiles/) and
`StackAnswers` (control/stacks/).
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections import deque

from .._version import __version__
from ..protocol import CLIENT_HEARTBEAT_S, ROUTE_INGEST, IngestReply
from ..semantics.names import sanitize_metric_name
from .aggregate import Aggregates
from .batching import _FLOAT_MAX, _GAUGE, _SPAN, LOG_WARNING, BatchBuilder
from .config import ClientConfig
from .control.profiles.controller import FAST_POLL_S, ProfileController
from .control.stacks.answers import StackAnswers
from .control.this_process import ThisProcess
from .ratelog import ratelog
from .registrations import TargetRegistrations
from .span_budget import budget_from
from .urls import ServerUrl

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

HEARTBEAT_S = CLIENT_HEARTBEAT_S  # an idle client still sends this often (the server's silence timeout is 3x this)
_MAX_BACKOFF_S = 30.0

LOG_ERROR = 40
LOG_INFO = 20


_now = time.time  # (a module global: one look-up less on the hot path)
MAX_PLAIN_NAMES = 100_000  # names remembered as not the step metric (past it, a name is checked each call)
MAX_BOOTS_REMEMBERED = 16  # servers' boot ids a process remembers (the servers of a fleet it reached)
MAX_NONFINITE_NAMES = 64  # metric names whose NaN / inf values are counted by name (others: only dropped)

class Delivery:
    """Per-process delivery pipeline. Public methods are called from training code and never raise."""

    def __init__(self, cfg: ClientConfig, url: ServerUrl | list[ServerUrl], base_labels: dict[str, str],
                 transport_factory: Callable[[], Any] | None = None, run_info: dict[str, Any] | None = None) -> None:
        self.cfg = cfg
        # init(config=...)'s description of the run: sent until a server acknowledged it, and again after
        # a server restart (owned by the sender thread)
        self.run_info = run_info
        self._run_info_due = run_info is not None
        self._run_info_in_flight = False
        self.urls = url if isinstance(url, list) else [url]  # several: sticks to one, fails over to the next
        self.base_labels = dict(base_labels)
        # legacy mode (no identity at init): a call label named project / experiment_name is kept as a label, with
        # one UserWarning per process (upstream main); with an identity the identity wins (client/wire.py)
        self._legacy_label_warned = bool(base_labels)
        self.pid = os.getpid()
        self.client_id = os.urandom(8).hex()
        import socket  # lazy: only processes that enable monitoring pay for it

        self.host = socket.gethostname()
        self.queue: deque = deque(maxlen=cfg.queue_size)
        self.queue_max = cfg.queue_size  # (read on the hot path: api.metric_gauge, lanes.StateBlock)
        self.step: int | float | None = None
        self._step_names: dict[str, bool] = {}
        self.plain_names: set[str] = set()  # gauge names known not to be the step metric (the hot path's test)
        self._step_sanitized = sanitize_metric_name(cfg.step_metric)

        self._drop_lock = threading.Lock()
        self.drops: dict[str, int] = {}
        # gauges that were NaN or infinite, by metric name (a loss or reward gone NaN: the server alerts on it); at
        # most MAX_NONFINITE_NAMES names, under _drop_lock
        self.nonfinite: dict[str, int] = {}
        self._problems = 0  # drops + rejections, for flush()'s answer
        self._problems_at_flush = 0
        self.agg = Aggregates(cfg.max_series, cfg.buckets_for, self.drop)
        # agent-loop turn detail per step (None: everything is sent); a turn without global_steps counts against the
        # process's step (its step metric, else the run's step clock from the replies)
        self.budget = budget_from(cfg.span_budget, lambda: self.step if self.step is not None
                                  else self.process.run_step)

        # Span ids: a random per-process prefix plus an atomic sequence (itertools.count is atomic
        # under the GIL), so ids are unique across processes without os.urandom on the hot path.
        self._span_seq = itertools.count(1)
        self._span_prefix = random.getrandbits(32) << 32
        self._trace_prefix = random.getrandbits(64) << 64

        # Owned by the sender thread.
        self._transport_factory = transport_factory
        self._latest_gauges: dict[tuple, tuple] = {}
        self._pending: tuple[bytes, dict[str, str], int, bool] | None = None  # a batch awaiting retry
        self._server_boot: str | None = None
        # boot ids of servers this process reached (newest last, bounded): behind a balancer that alternates between
        # the servers of a fleet, going back to one already fed is not a restart (no resend of everything)
        self._boots_seen: dict[str, None] = {}
        self._protocol = 1  # 2 (compact spans, shared attributes) once the server says it accepts it
        self._last_step_mark_ts = float("-inf")  # when the step metric was last logged (step bursts)
        self._resend_all = False
        self.open_states: Any = (
            None  # () -> start events of the open trace_state lanes (client/lanes.py), resent on a restart
        )
        self.lane_holders: Any = None  # () -> (lane, state, since ns, thread) of the open lanes (client/lanes.py)
        self._failures = 0
        self._next_self_metrics = 0.0
        self._last_sent = time.monotonic()
        self.sent_items = 0
        self.sent_batches = 0
        self.retries = 0

        self.registrations = TargetRegistrations()  # upstream's update_prometheus_config, sent by the sender thread
        self._flush_lock = threading.Lock()
        self._flush_waiters: list[threading.Event] = []

        self._wake = threading.Event()
        # who this process is to every kind of control request, and where it is (its step, else the run's clock)
        self.process = ThisProcess(self.host, self.pid, lambda: self.step)
        self.profiling = ProfileController(self, self.process)  # profile requests riding on the ingest replies
        # stack snapshots riding on the same replies, answered from the sender thread
        self.stacks = StackAnswers(self.process, lambda: self.lane_holders() if self.lane_holders is not None else [],
                                   self.wake)
        self._stopping = False
        self._final = False
        self._final_sent = False
        self._abandoned = False
        self.batches = BatchBuilder(self)  # one batch out of what is queued, on the sender thread (batching.py)
        # Imports and first-use work happen here, in init(), before the training loop runs: done lazily
        # in the thread they would hold the GIL for milliseconds while the loop is already running.
        try:
            self._transport: Any = self._make_transport()
            self._transport_error: BaseException | None = None
        except Exception as exc:  # reported by the thread, which then drops (counted)
            self._transport, self._transport_error = None, exc
        self._thread = threading.Thread(target=self._run, name="rl-insight-exporter", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ hot path
    def nonfinite_value(self, name: str) -> None:
        """A gauge value that was a number, but NaN or infinite (dropped as invalid_value too)."""
        with self._drop_lock:
            if name in self.nonfinite or len(self.nonfinite) < MAX_NONFINITE_NAMES:
                self.nonfinite[name] = self.nonfinite.get(name, 0) + 1

    def drop(self, reason: str, n: int = 1) -> None:
        with self._drop_lock:
            self.drops[reason] = self.drops.get(reason, 0) + n
            self._problems += n

    def _note_step(self, name: str, value: Any) -> bool:
        is_step = self._step_names.get(name)
        if is_step is None:
            try:
                is_step = sanitize_metric_name(name) == self._step_sanitized
            except ValueError:
                is_step = False
            self._step_names[name] = is_step
            if not is_step and len(self.plain_names) < MAX_PLAIN_NAMES:
                self.plain_names.add(name)
        if is_step:
            try:
                v = float(value)
                if v - v == 0.0:  # finite
                    self.step = int(v) if v.is_integer() else v
            except (TypeError, ValueError, OverflowError):
                pass
        return is_step

    def _legacy_identity_label(self, labels: dict) -> None:
        if "project" in labels or "experiment_name" in labels:
            self._legacy_label_warned = True
            import warnings

            warnings.warn("[rl-insight] a label named project or experiment_name without a run identity at init(): "
                          "it is kept as a label; pass init(project=..., experiment_name=...) to name the run",
                          UserWarning, stacklevel=4)

    def gauge(self, name: str, value: Any, doc: str, labels: dict) -> None:
        if labels and not self._legacy_label_warned:
            self._legacy_identity_label(labels)
        if name not in self.plain_names:  # (a set look-up for every name but the step metric's, once known)
            if self._note_step(name, value) and self.profiling.hot:
                self.profiling.boundary()  # a step boundary: a requested profiling window may open or close here
        q = self.queue
        if len(q) >= self.queue_max:
            self.drop("queue_full")
        q.append((_GAUGE, name, value, labels, doc, _now(), self.step))

    def count(self, name: str, amount: Any, doc: str, labels: dict) -> None:
        if labels and not self._legacy_label_warned:
            self._legacy_identity_label(labels)
        try:
            amount = float(amount)
        except (TypeError, ValueError, OverflowError):
            amount = -1.0  # reported below as an invalid value
        if not 0.0 <= amount <= _FLOAT_MAX:  # also catches NaN and inf
            self.drop("invalid_value")
            ratelog.log(LOG_WARNING, "neg:" + name, "[rl-insight] metric_count(%r) needs a finite number >= 0; "
                                                    "sample dropped", name)
            return
        self.agg.add(name, amount, doc, labels, self.step)

    def observe(self, name: str, value: Any, doc: str, labels: dict) -> None:
        if labels and not self._legacy_label_warned:
            self._legacy_identity_label(labels)
        try:
            value = float(value)
        except (TypeError, ValueError, OverflowError):
            value = float("nan")
        if not -_FLOAT_MAX <= value <= _FLOAT_MAX:
            self.drop("invalid_value")
            return
        self.agg.observe(name, value, doc, labels, self.step)

    def new_span_id(self) -> int:
        return self._span_prefix | (next(self._span_seq) & 0xFFFFFFFF)

    def new_trace_id(self, span_id: int) -> int:
        return self._trace_prefix | span_id

    def new_ids(self) -> tuple[int, int]:
        """(span id, trace id) of a new top-level state: one call on the hot path instead of two."""
        sid = self._span_prefix | (next(self._span_seq) & 0xFFFFFFFF)
        return sid, self._trace_prefix | sid

    def span(self, span_id: int, trace_id: int, parent_id: int | None, name: str, lane: str | None,
             start_ns: int, end_ns: int, attrs: dict, kind: str) -> None:
        if self.budget is not None and not self.budget.keep(attrs):
            return  # turn detail past this step's budget (counted by the budget, reported in the self-metrics)
        q = self.queue
        if len(q) >= self.queue_max:
            self.drop("queue_full")
        q.append((_SPAN, span_id, trace_id, parent_id, name, lane, start_ns, end_ns, attrs, kind))

    def wake(self) -> None:
        """Have the sender thread run a cycle now (a profile status or trace to deliver)."""
        self._wake.set()

    def register_targets(self, payload: dict) -> None:
        self.registrations.add(payload)
        self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Deliver everything queued before this call. False if the deadline passed first, or if anything
        since the previous flush was dropped or refused by the server."""
        if not self._thread.is_alive():
            return False
        done = threading.Event()
        with self._flush_lock:
            self._flush_waiters.append(done)
        self._wake.set()
        delivered = done.wait(timeout)
        with self._drop_lock:
            clean = self._problems == self._problems_at_flush
            self._problems_at_flush = self._problems
        return delivered and clean

    def unreachable(self) -> bool:
        """The last delivery attempts failed (connection refused, timeouts, 5xx)."""
        return self._failures > 0

    def report_undelivered(self) -> None:
        """At exit, when not everything was delivered: count what stays behind and say once what happened — the
        server did not answer (events left in the queue), or it answered and refused them (the drops since the last
        flush, by reason: a wrong token, refused items)."""
        n = len(self.queue) + (self._pending[2] if self._pending is not None else 0)
        self.queue.clear()
        self._pending = None
        self.registrations.take()  # (given up with the rest)
        self._abandoned = True  # given up: the thread ends instead of retrying forever
        self._wake.set()
        with self._drop_lock:
            refused = {k: v for k, v in self.drops.items() if v and k != "undelivered_at_exit"}
        if n:
            self.drop("undelivered_at_exit", n)
            ratelog.log(LOG_WARNING, "undelivered", "[rl-insight] %s did not answer; %d event(s) were not delivered "
                                                    "at exit", self.url, n)
        elif refused:
            total = sum(refused.values())
            why = ("the server refused this process's token: set RL_INSIGHT_TOKEN to the token `rl-insight server "
                   "credentials` prints" if "unauthorized" in refused else "see the earlier messages for the reasons")
            ratelog.log(LOG_WARNING, "undelivered", "[rl-insight] %s answered, but %d event(s) of this process were "
                        "not stored (%s); %s", self.url, total,
                        ", ".join(f"{k}: {v}" for k, v in sorted(refused.items())), why)

    def shutdown(self, timeout: float) -> bool:
        self._final = True  # batches from now on tell the server this process is done
        ok = self.flush(timeout)
        self._stopping = True
        self._wake.set()
        return ok

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        transport = self._transport
        if transport is None:  # never a dead thread with monitoring still "on": drop, counted
            ratelog.log(LOG_ERROR, "transport", "[rl-insight] cannot set up delivery to %s: %r; events are dropped",
                        self.url, self._transport_error)
        while True:
            backoff = self._backoff()
            self._wake.wait(backoff if backoff else self.cfg.flush_interval_s)
            self._wake.clear()
            if self._abandoned:
                self._release_waiters()
                if transport is not None:
                    transport.close()
                return
            try:
                if transport is None:
                    self._discard_all("no_transport")
                else:
                    self._cycle(transport)
            except Exception as exc:  # never let the thread die
                ratelog.log(LOG_ERROR, "exporter", "[rl-insight] exporter error (sending to %s): %r", self.url, exc)
            if (
                self._stopping
                and (self._pending is None or transport is None)
                and not self.queue
                and not self.registrations.pending
                and (transport is None or not self.profiling.has_statuses())
            ):
                self._release_waiters()
                if transport is not None:
                    transport.close()
                return

    def _make_transport(self) -> Any:
        from . import wire  # lazy: json/gzip stay out of `import rl_insight`

        wire.warm_up()
        if self._transport_factory is not None:
            return self._transport_factory()
        from .transport import HttpTransport, warm_up  # lazy: keeps http.client out of `import rl_insight`

        warm_up()

        def http(url: ServerUrl) -> Any:
            return HttpTransport(url, self.cfg.token, self.cfg.request_timeout_s, f"rl-insight-client/{__version__}",
                                 self.client_id)

        if len(self.urls) == 1:
            return http(self.urls[0])
        from .transport import FailoverTransport

        return FailoverTransport(self.urls, http)

    @property
    def url(self) -> ServerUrl:
        """The server this process sends to now (of several: the one it stuck to)."""
        return getattr(getattr(self, "_transport", None), "current", None) or self.urls[0]

    def _discard_all(self, reason: str) -> None:
        n = len(self.queue)
        self.queue.clear()
        if n:
            self.drop(reason, n)
        self._release_waiters()

    def _release_waiters(self) -> None:
        with self._flush_lock:
            waiters, self._flush_waiters = self._flush_waiters, []
        for w in waiters:
            w.set()

    def _backoff(self) -> float:
        if not self._failures:
            return 0.0
        base = min(_MAX_BACKOFF_S, 0.5 * (2 ** min(self._failures - 1, 10)))
        return base * random.uniform(0.8, 1.2)

    def _cycle(self, transport: Any) -> None:
        # Only the flushes requested before this cycle began are answered by it: everything they
        # waited for was queued before the queue was drained below.
        with self._flush_lock:
            waiters, self._flush_waiters = self._flush_waiters, []
        settled = False
        try:
            settled = self._send_all(transport, force=bool(waiters))
            if self.profiling.busy():
                self.profiling.pump(transport)
            if self.stacks.pending:
                self.stacks.pump(transport)
        finally:
            if settled:
                for w in waiters:
                    w.set()
            elif waiters:
                with self._flush_lock:
                    self._flush_waiters[:0] = waiters
            if settled and self._flush_waiters:
                self._wake.set()  # flushes that arrived meanwhile: answer them in the next cycle at once

    def _send_all(self, transport: Any, force: bool) -> bool:
        """Send registrations, then batches until the queue is empty. True when nothing is left pending."""
        self.registrations.send(transport, self.url, self._retry_later, self.drop)
        if self._pending is not None:
            if not self._deliver(transport, *self._pending):
                return False
            self._pending = None
        # while a profile request is armed or in flight, poll fast: cancellations and the run's step come on replies
        heartbeat_due = time.monotonic() - self._last_sent >= (FAST_POLL_S if self.profiling.busy() else HEARTBEAT_S)
        must_send = force or heartbeat_due or (self._final and not self._final_sent)
        while True:
            body, headers, n_user, has_items = self.batches.build(force=must_send)
            if not has_items and not must_send:
                return True
            if not self._deliver(transport, body, headers, n_user, self._final):
                self._pending = (body, headers, n_user, self._final)
                return False
            must_send = False
            if not self.queue:
                return True

    def _deliver(self, transport: Any, body: bytes, headers: dict[str, str], n: int, final: bool = False) -> bool:
        """Send one batch of `n` user items (plus self-metrics). True when settled (delivered or refused for good)."""
        from .transport import TransportError

        where = f"{self.url}{ROUTE_INGEST}"
        try:
            resp = transport.post(ROUTE_INGEST, body, headers)
        except TransportError as exc:
            return self._retry_later(f"server unreachable at {where} ({exc})")
        if resp.status == 429 or resp.status >= 500:
            return self._retry_later(f"server at {where} answered HTTP {resp.status}")
        self._failures = 0
        self._last_sent = time.monotonic()
        if final:
            self._final_sent = True
        if resp.status >= 400:
            self._refused(resp, where, n)
        else:
            self._accepted(IngestReply.from_wire(resp.body, n), where, n)
        return True

    def _refused(self, resp: Any, where: str, n: int) -> None:
        """A batch refused for good (4xx): its items counted as dropped, the reason logged (rate-limited)."""
        if resp.status in (401, 403):
            self.drop("unauthorized", n)
            ratelog.log(LOG_ERROR, "auth", "[rl-insight] %s refused our token (HTTP %s): %.200s; set RL_INSIGHT_TOKEN "
                        "to the token printed by `rl-insight server start`", where, resp.status,
                        resp.body.get("detail") or resp.body)
            return
        self.drop("rejected", n)
        ratelog.log(LOG_ERROR, "rejected", "[rl-insight] %s rejected a batch (HTTP %s): %.300s", where, resp.status,
                    resp.body.get("detail") or resp.body)

    def _accepted(self, reply: IngestReply, where: str, n: int) -> None:
        """A batch the server took (some items may be refused): counts, the server's boot, what it asks of us."""
        if reply.rejected:
            self.drop("rejected", reply.rejected)
            ratelog.log(LOG_WARNING, "item-rejected", "[rl-insight] %s rejected %d item(s), first: %.300s", where,
                        reply.rejected, reply.errors[0] if reply.errors else None)
        self.sent_items += max(0, n - reply.rejected)
        self.sent_batches += 1
        if self._run_info_in_flight:
            self._run_info_due = self._run_info_in_flight = False
        self._heard_boot(reply.boot_id)
        self._protocol = 2 if 2 in reply.protocols else 1
        self.process.hear(reply.control)
        self.profiling.offer(reply.control)
        self.stacks.offer(reply.control)

    def _heard_boot(self, boot: Any) -> None:
        if boot and self._server_boot and boot != self._server_boot and boot not in self._boots_seen:
            # A server that never had this process's state (it restarted, or a fleet member reached for the first
            # time): resend every series' latest value.
            self._resend_all = True
            self._run_info_due = self.run_info is not None
            self._wake.set()
        if boot is not None:
            self._server_boot = boot
            self._boots_seen.pop(boot, None)
            self._boots_seen[boot] = None
            if len(self._boots_seen) > MAX_BOOTS_REMEMBERED:
                del self._boots_seen[next(iter(self._boots_seen))]

    def _retry_later(self, why: str) -> bool:
        self._failures += 1
        self.retries += 1
        ratelog.log(LOG_WARNING, "retry", "[rl-insight] %s; retrying in the background (data is kept up to the queue "
                                          "bound)", why)
        return False
