"""Batching exporter: the hot path appends to a bounded deque; one named daemon thread sends.

Modelled on OpenTelemetry's BatchSpanProcessor, minus its gaps:

* every drop is counted with a reason (`queue_full`, `series_limit`, `invalid_value`, `rejected`,
  `unauthorized`) and reported to the server as a client self-metric;
* counters and histograms are cumulative per series *here*, outside the queue, so a dropped or
  resent batch never loses or double-counts an increment, and a restarted server gets the totals
  back (the exporter resends a snapshot when the server's boot id changes);
* `flush(timeout)` and shutdown honour their deadlines, the thread never raises.

Wire format (POST /api/v1/ingest, gzip JSON, protocol 1)::

    {"v": 1, "client": {"id", "pid", "host"},
     "series": [{"k": "g"|"c"|"h", "n": name, "l": {labels}, "d": doc, "b": [bounds]?, "ns": "client"?}],
     "samples": [[series_index, unix_ts_s, step|null, value]],      # histogram value: [sum, count, [cumulative counts]]
     "span_starts": [{"id", "trace_id", "parent_id", "name", "lane", "start_ns", "kind", "attributes"}],
     "spans": [{... same ..., "end_ns"}]}
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from bisect import bisect_left
from collections import deque
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from .._version import __version__
from ..names import sanitize_metric_name
from .config import ClientConfig
from .ratelog import ratelog

# Queue item tags (first tuple element).
_GAUGE, _SPAN_START, _SPAN, _FLUSH = 0, 1, 2, 3

_SELF_METRICS_EVERY_S = 10.0
_MAX_BACKOFF_S = 30.0

LOG_WARNING = 30
LOG_ERROR = 40
LOG_INFO = 20


def _labels_key(labels: dict[str, Any]) -> tuple:
    return tuple(sorted(labels.items())) if labels else ()


class Exporter:
    """Per-process delivery pipeline. Public methods are called from training code and never raise."""

    def __init__(self, cfg: ClientConfig, base_labels: dict[str, str]) -> None:
        self.cfg = cfg
        self.base_labels = dict(base_labels)
        self.pid = os.getpid()
        self.client_id = os.urandom(8).hex()
        import socket  # lazy: only processes that enable monitoring pay for it

        self.host = socket.gethostname()
        self.queue: deque = deque(maxlen=cfg.queue_size)
        self._maxlen = cfg.queue_size
        self.step: int | float | None = None
        self._step_names: dict[str, bool] = {}
        self._step_sanitized = sanitize_metric_name(cfg.step_metric)

        # Cumulative state, shared between the hot path and the thread.
        self._cum_lock = threading.Lock()
        self._counters: dict[tuple, list] = {}  # key -> [total, ts, step, doc, labels]
        self._hists: dict[tuple, list] = {}  # key -> [counts, sum, count, ts, step, doc, labels, bounds]
        self._dirty_counters: set[tuple] = set()
        self._dirty_hists: set[tuple] = set()

        self._drop_lock = threading.Lock()
        self.drops: dict[str, int] = {}

        # Span ids: a random per-process prefix plus an atomic sequence (itertools.count is atomic
        # under the GIL), so ids are unique across processes without os.urandom on the hot path.
        self._span_seq = itertools.count(1)
        self._span_prefix = random.getrandbits(32) << 32
        self._trace_prefix = random.getrandbits(64) << 64

        # Owned by the sender thread.
        self._latest_gauges: dict[tuple, tuple] = {}
        self._pending: tuple[dict, list, int] | None = None  # (payload, flush markers, user items) awaiting retry
        self._server_boot: str | None = None
        self._resend_all = False
        self._failures = 0
        self._next_self_metrics = 0.0
        self.sent_items = 0
        self.sent_batches = 0
        self.retries = 0

        self._reg_lock = threading.Lock()
        self._registrations: list[dict] = []

        self._wake = threading.Event()
        self._stopping = False
        self._final = False
        self._final_sent = False
        self._thread = threading.Thread(target=self._run, name="rl-insight-exporter", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ hot path
    def drop(self, reason: str, n: int = 1) -> None:
        with self._drop_lock:
            self.drops[reason] = self.drops.get(reason, 0) + n

    def _note_step(self, name: str, value: Any) -> bool:
        is_step = self._step_names.get(name)
        if is_step is None:
            try:
                is_step = sanitize_metric_name(name) == self._step_sanitized
            except ValueError:
                is_step = False
            self._step_names[name] = is_step
        if is_step:
            try:
                v = float(value)
                self.step = int(v) if v.is_integer() else v
            except (TypeError, ValueError, OverflowError):
                pass
        return is_step

    def gauge(self, name: str, value: Any, doc: str, labels: dict) -> None:
        if self._step_names.get(name) is not False:
            self._note_step(name, value)
        q = self.queue
        if len(q) >= self._maxlen:
            self.drop("queue_full")
        q.append((_GAUGE, name, value, labels, doc, time.time(), self.step))

    def count(self, name: str, amount: Any, doc: str, labels: dict) -> None:
        try:
            amount = float(amount)
        except (TypeError, ValueError, OverflowError):
            amount = -1.0  # reported below as an invalid value
        if not amount >= 0.0:  # also catches NaN
            self.drop("invalid_value")
            ratelog.log(LOG_WARNING, "neg:" + name, "[rl-insight] metric_count(%r) needs a number >= 0; sample dropped", name)
            return
        key = (name, _labels_key(labels))
        now, step = time.time(), self.step
        with self._cum_lock:
            s = self._counters.get(key)
            if s is None:
                if len(self._counters) >= self.cfg.max_series:
                    self.drop("series_limit")
                    return
                s = self._counters[key] = [0.0, now, step, doc, labels]
            s[0] += amount
            s[1] = now
            s[2] = step
            self._dirty_counters.add(key)

    def observe(self, name: str, value: Any, doc: str, labels: dict) -> None:
        try:
            value = float(value)
        except (TypeError, ValueError, OverflowError):
            value = float("nan")
        if value != value:
            self.drop("invalid_value")
            return
        key = (name, _labels_key(labels))
        now, step = time.time(), self.step
        with self._cum_lock:
            s = self._hists.get(key)
            if s is None:
                if len(self._hists) >= self.cfg.max_series:
                    self.drop("series_limit")
                    return
                bounds = self.cfg.buckets_for(name)
                s = self._hists[key] = [[0] * (len(bounds) + 1), 0.0, 0, now, step, doc, labels, bounds]
            s[0][bisect_left(s[7], value)] += 1
            s[1] += value
            s[2] += 1
            s[3] = now
            s[4] = step
            self._dirty_hists.add(key)

    def new_span_id(self) -> int:
        return self._span_prefix | (next(self._span_seq) & 0xFFFFFFFF)

    def new_trace_id(self, span_id: int) -> int:
        return self._trace_prefix | span_id

    def span_start(self, span_id: int, trace_id: int, name: str, lane: str, start_ns: int, attrs: dict, kind: str) -> None:
        q = self.queue
        if len(q) >= self._maxlen:
            self.drop("queue_full")
        q.append((_SPAN_START, span_id, trace_id, None, name, lane, start_ns, None, attrs, kind))

    def span(self, span_id: int, trace_id: int, parent_id: int | None, name: str, lane: str | None,
             start_ns: int, end_ns: int, attrs: dict, kind: str) -> None:
        q = self.queue
        if len(q) >= self._maxlen:
            self.drop("queue_full")
        q.append((_SPAN, span_id, trace_id, parent_id, name, lane, start_ns, end_ns, attrs, kind))

    def register_targets(self, payload: dict) -> None:
        with self._reg_lock:
            self._registrations.append(payload)
        self._wake.set()

    def flush(self, timeout: float | None = None) -> bool:
        """Deliver everything queued before this call; False if the deadline passed first."""
        if not self._thread.is_alive():
            return False
        done = threading.Event()
        self.queue.append((_FLUSH, done))
        self._wake.set()
        return done.wait(timeout)

    def shutdown(self, timeout: float) -> bool:
        self._final = True  # batches from now on tell the server this process is done (run "finished")
        ok = self.flush(timeout)
        self._stopping = True
        self._wake.set()
        return ok

    # ------------------------------------------------------------------ sender thread
    def _run(self) -> None:
        from .transport import HttpTransport  # lazy: keeps http.client out of `import rl_insight`

        transport = HttpTransport(self.cfg.url, self.cfg.token, self.cfg.request_timeout_s,
                                  f"rl-insight-client/{__version__}")
        while True:
            backoff = self._backoff()
            self._wake.wait(backoff if backoff else self.cfg.flush_interval_s)
            self._wake.clear()
            try:
                self._cycle(transport)
            except Exception as exc:  # never let the thread die
                ratelog.log(LOG_ERROR, "exporter", "[rl-insight] exporter error: %r", exc)
            if self._stopping and self._pending is None and not self.queue:
                transport.close()
                return

    def _backoff(self) -> float:
        if not self._failures:
            return 0.0
        base = min(_MAX_BACKOFF_S, 0.5 * (2 ** min(self._failures - 1, 10)))
        return base * random.uniform(0.8, 1.2)

    def _cycle(self, transport: Any) -> None:
        self._send_registrations(transport)
        if self._pending is not None:
            if not self._deliver(transport, *self._pending):
                return
            self._pending = None
        while True:
            payload, markers, n_user = self._build_batch()
            has_items = bool(payload["samples"] or payload["span_starts"] or payload["spans"])
            if not has_items and not markers:
                return
            if has_items and not self._deliver(transport, payload, markers, n_user):
                self._pending = (payload, markers, n_user)
                return
            if not has_items and markers and self._final and not self._final_sent:
                # nothing left to send, but the server must still learn that this process finished
                if not self._deliver(transport, payload, markers, 0):
                    self._pending = (payload, markers, 0)
                    return
                markers = []
            if self._final and "final" in payload:
                self._final_sent = True
            if not has_items:
                for m in markers:
                    m.set()
            if not self.queue:
                return

    def _deliver(self, transport: Any, payload: dict, markers: list, n: int) -> bool:
        """Send one batch of `n` user items (plus self-metrics). True when settled (delivered or refused for good)."""
        from .transport import TransportError

        try:
            resp = transport.post_json("/api/v1/ingest", payload)
        except TransportError as exc:
            return self._retry_later(f"server unreachable ({exc})")
        if resp.status == 429 or resp.status >= 500:
            return self._retry_later(f"server answered HTTP {resp.status}")
        self._failures = 0
        if resp.status in (401, 403):
            self.drop("unauthorized", n)
            ratelog.log(LOG_ERROR, "auth", "[rl-insight] server refused our token (HTTP %s); set RL_INSIGHT_TOKEN to the token printed by `rl-insight server start`", resp.status)
        elif resp.status >= 400:
            self.drop("rejected", n)
            ratelog.log(LOG_ERROR, "rejected", "[rl-insight] server rejected a batch (HTTP %s): %.300s", resp.status, resp.body.get("detail") or resp.body)
        else:
            body = resp.body
            rejected = int(body.get("rejected", 0) or 0)
            if rejected:
                self.drop("rejected", rejected)
                ratelog.log(LOG_WARNING, "item-rejected", "[rl-insight] server rejected %d item(s), first: %.300s", rejected, (body.get("errors") or [None])[0])
            self.sent_items += n - rejected
            self.sent_batches += 1
            boot = body.get("boot_id")
            if boot and self._server_boot and boot != self._server_boot:
                # The server restarted and lost its in-memory state: resend every series' latest value.
                self._resend_all = True
                self._wake.set()
            if boot:
                self._server_boot = boot
        for m in markers:
            m.set()
        return True

    def _retry_later(self, why: str) -> bool:
        self._failures += 1
        self.retries += 1
        ratelog.log(LOG_WARNING, "retry", "[rl-insight] %s; retrying in the background (data is kept up to the queue bound)", why)
        return False

    def _send_registrations(self, transport: Any) -> None:
        from .transport import TransportError

        with self._reg_lock:
            todo, self._registrations = self._registrations, []
        keep: list[dict] = []
        for i, payload in enumerate(todo):
            try:
                resp = transport.post_json("/api/v1/prometheus/targets", payload, compress=False)
            except TransportError as exc:
                self._retry_later(f"target registration: server unreachable ({exc})")
                keep = todo[i:]
                break
            if resp.status == 429 or resp.status >= 500:
                self._retry_later(f"target registration: HTTP {resp.status}")
                keep = todo[i:]
                break
            if resp.status >= 400:
                ratelog.log(LOG_ERROR, "reg-rejected", "[rl-insight] target registration for job %r refused (HTTP %s): %.300s",
                            payload.get("job_name"), resp.status, resp.body.get("detail") or resp.body)
            else:
                ratelog.log(LOG_INFO, "reg-ok:" + str(payload.get("job_name")), "[rl-insight] Registered %d Prometheus targets with RL-Insight server (job_name=%s)",
                            len(payload.get("targets", [])), payload.get("job_name"))
        if keep:
            with self._reg_lock:
                self._registrations[:0] = keep

    # ------------------------------------------------------------------ batch building
    def _build_batch(self) -> tuple[dict, list, int]:
        series: list[dict] = []
        index: dict[tuple, int] = {}
        samples: list[list] = []
        span_starts: list[dict] = []
        spans: list[dict] = []
        markers: list[threading.Event] = []
        base = self.base_labels
        latest = self._latest_gauges
        max_series = self.cfg.max_series

        def series_index(kind: str, name: str, lkey: tuple, labels: dict, doc: str, bounds: Any = None, ns: str | None = None) -> int:
            key = (kind, name, lkey, ns)
            idx = index.get(key)
            if idx is None:
                merged = dict(base)
                for k, v in labels.items():
                    merged[k] = v if isinstance(v, str) else str(v)
                entry: dict[str, Any] = {"k": kind, "n": name, "l": merged, "d": doc}
                if bounds is not None:
                    entry["b"] = list(bounds)
                if ns:
                    entry["ns"] = ns
                idx = index[key] = len(series)
                series.append(entry)
            return idx

        q = self.queue
        budget = self.cfg.batch_size
        while budget > 0:
            try:
                item = q.popleft()
            except IndexError:
                break
            tag = item[0]
            if tag == _GAUGE:
                _, name, value, labels, doc, ts, step = item
                try:
                    v = float(value)
                except (TypeError, ValueError, OverflowError):
                    self.drop("invalid_value")
                    ratelog.log(LOG_WARNING, "gauge-value", "[rl-insight] metric_gauge(%r) got non-numeric value %.80r; dropped", name, value)
                    continue
                lkey = _labels_key(labels) if labels else ()
                gkey = (name, lkey)
                if gkey not in latest and len(latest) >= max_series:
                    self.drop("series_limit")
                    continue
                latest[gkey] = (v, ts, step, doc, labels)
                idx = index.get(("g", name, lkey, None))
                if idx is None:
                    idx = series_index("g", name, lkey, labels, doc)
                samples.append([idx, ts, step, v])
            elif tag == _SPAN:
                spans.append(self._span_json(item))
            elif tag == _SPAN_START:
                span_starts.append(self._span_json(item))
            else:
                markers.append(item[1])
                continue
            budget -= 1

        # Cumulative series: all of them after a server restart, else only those that changed.
        with self._cum_lock:
            if self._resend_all:
                dirty_c, dirty_h = set(self._counters), set(self._hists)
            else:
                dirty_c, dirty_h = self._dirty_counters, self._dirty_hists
            self._dirty_counters, self._dirty_hists = set(), set()
            counters = [(k, self._counters[k][:]) for k in dirty_c if k in self._counters]
            hists = [(k, [self._hists[k][0][:]] + self._hists[k][1:]) for k in dirty_h if k in self._hists]
        for (name, lkey), (total, ts, step, doc, labels) in counters:
            samples.append([series_index("c", name, lkey, labels, doc), ts, step, total])
        for (name, lkey), (counts, total, count, ts, step, doc, labels, bounds) in hists:
            cumulative = list(itertools.accumulate(counts))
            samples.append([series_index("h", name, lkey, labels, doc, bounds), ts, step, [total, count, cumulative]])
        if self._resend_all:
            self._resend_all = False
            for (name, lkey), (v, ts, step, doc, labels) in list(latest.items()):
                samples.append([series_index("g", name, lkey, labels, doc), ts, step, v])
        n_user = len(samples) + len(span_starts) + len(spans)
        if n_user or markers:  # a flush also reports the latest delivery counters
            self._add_self_metrics(series_index, samples, force=bool(markers))

        payload = {
            "v": 1,
            "client": {"id": self.client_id, "pid": self.pid, "host": self.host, **self.base_labels},
            "series": series,
            "samples": samples,
            "span_starts": span_starts,
            "spans": spans,
        }
        if self._final:
            payload["final"] = True
        return payload, markers, n_user

    def _add_self_metrics(self, series_index: Any, samples: list, force: bool = False) -> None:
        now = time.time()
        if now < self._next_self_metrics and not force:
            return
        self._next_self_metrics = now + _SELF_METRICS_EVERY_S
        labels = {"pid": str(self.pid), "host": self.host}
        doc = "rl-insight client self-metric"
        values: list[tuple[str, str, dict, float]] = [
            ("c", "events_sent", labels, float(self.sent_items)),
            ("c", "batches_sent", labels, float(self.sent_batches)),
            ("c", "send_retries", labels, float(self.retries)),
            ("g", "queue_depth", labels, float(len(self.queue))),
        ]
        with self._drop_lock:
            drops = dict(self.drops)
        for reason, n in drops.items():
            values.append(("c", "events_dropped", {**labels, "reason": reason}, float(n)))
        for kind, name, lab, value in values:
            samples.append([series_index(kind, name, _labels_key(lab), lab, doc, None, "client"), now, self.step, value])

    def _span_json(self, item: tuple) -> dict:
        _, span_id, trace_id, parent_id, name, lane, start_ns, end_ns, attrs, kind = item
        attributes = {"process_id": str(self.pid), **self.base_labels, **attrs} if attrs else {"process_id": str(self.pid), **self.base_labels}
        out = {
            "id": f"{span_id:016x}",
            "trace_id": f"{trace_id:032x}",
            "parent_id": f"{parent_id:016x}" if parent_id is not None else None,
            "name": name,
            "lane": lane,
            "start_ns": start_ns,
            "kind": kind,
            "attributes": attributes,
        }
        if end_ns is not None:
            out["end_ns"] = end_ns
        return out
