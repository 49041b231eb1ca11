"""One batch out of what the hot path queued: samples (with verl's step bursts resolved), span starts and
spans (protocol 1 or 2), the client's self-metrics, the run's description; encoded by `wire` in slices
so the sender thread never holds the GIL for long. `Delivery` (delivery.py) holds one `BatchBuilder` and runs it on
its sender thread only."""

from __future__ import annotations

import time

from .aggregate import labels_key
from .ratelog import ratelog

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections import deque
    from typing import Any, Protocol

    from .aggregate import Aggregates
    from .config import ClientConfig

    class DeliveryState(Protocol):
        """The delivery's state a batch is built from and moves (its queue, aggregates, identity, counters)."""

        cfg: ClientConfig
        queue: deque
        agg: Aggregates
        base_labels: dict[str, str]
        pid: int
        host: str
        client_id: str
        step: int | float | None
        run_info: dict[str, Any] | None
        open_states: Any
        process: Any  # ThisProcess (client/control/this_process.py): the process's rank
        drops: dict[str, int]
        nonfinite: dict[str, int]
        sent_items: int
        sent_batches: int
        retries: int
        _drop_lock: threading.Lock
        _protocol: int
        _resend_all: bool
        _latest_gauges: dict[tuple, tuple]
        _last_step_mark_ts: float
        _next_self_metrics: float
        budget: Any
        _run_info_due: bool
        _run_info_in_flight: bool
        _final: bool
        _step_names: dict[str, bool]

        def drop(self, reason: str, n: int = 1) -> None: ...

        def nonfinite_value(self, name: str) -> None: ...


# Queue item tags (first tuple element).
_GAUGE, _SPAN_START, _SPAN = 0, 1, 2

LOG_WARNING = 30
_FLOAT_MAX = 1.7976931348623157e308
_NEG_FLOAT_MAX = -_FLOAT_MAX
_NAN = float("nan")
_SELF_METRICS_EVERY_S = 10.0
STEP_BURST_S = 0.05


def _assign_burst_steps(samples: list[list], marks: list[tuple[int, float, Any]], previous_mark_ts: float) -> float:
    """verl logs a step's metrics as one dict whose `training/global_step` key comes after most others:
    gauges logged in the same burst just before the step metric (within STEP_BURST_S) belong to the
    step it announces, not to the previous one. Not when the previous step metric is itself part of
    the burst (steps logged in quick succession, each before its metrics). Returns the last mark's time."""
    marked = {index for index, _, _ in marks}
    for index, mark_ts, new_step in marks:
        if new_step is not None and mark_ts - previous_mark_ts > STEP_BURST_S:
            j = index - 1
            while j >= 0 and j not in marked:
                sample = samples[j]
                if sample[1] < mark_ts - STEP_BURST_S:
                    break
                if sample[2] is None or sample[2] < new_step:
                    sample[2] = new_step
                j -= 1
        previous_mark_ts = mark_ts
    return previous_mark_ts


class BatchBuilder:
    """Builds one batch out of what the delivery's hot path queued (on the sender thread). The state it reads and
    writes is the delivery's (`d`: the queue, the aggregates, the run's identity and info, the step, the protocol,
    the counters the self-metrics report): one pipeline per process, this is its batching step."""

    def __init__(self, delivery: DeliveryState) -> None:
        self.d = delivery

    def build(self, force: bool = False) -> tuple[bytes, dict[str, str], int, bool]:
        """Pop up to batch_size items and encode them, yielding the GIL every wire.SLICE items."""
        from . import wire  # imported by the sender thread (json/gzip stay out of `import rl_insight`)

        table = wire.SeriesTable(self.d.base_labels)
        samples: list[list] = []
        span_starts: list[Any] = []
        spans: list[Any] = []
        attrs_table: dict[int, tuple[int, dict]] | None = {} if self.d._protocol == 2 else None
        span_entry = self._span_json if attrs_table is None else (lambda it: self._span_compact(it, attrs_table))
        latest = self.d._latest_gauges
        max_series = self.d.cfg.max_series
        q = self.d.queue
        budget = self.d.cfg.batch_size
        since_check = 0
        pause = wire.Yielder.for_backlog(len(q))
        step_marks: list[tuple[int, float, Any]] = []  # (index in samples, ts, new step) of step-metric samples
        start_items: list[tuple] = []  # state starts, encoded after the loop unless their end came too
        ended: set[int] = set()  # span ids whose end is in this batch
        while budget > 0:
            try:
                item = q.popleft()
            except IndexError:
                break
            budget -= 1
            since_check += 1
            if since_check >= wire.SLICE:
                since_check = 0
                pause()  # let the training thread run
            tag = item[0]
            if tag == _GAUGE:
                _, name, value, labels, doc, ts, step = item
                try:
                    v = float(value)
                except (TypeError, ValueError, OverflowError):
                    v = _NAN  # not a number at all: dropped below, not counted as a NaN
                else:
                    if not _NEG_FLOAT_MAX <= v <= _FLOAT_MAX:  # NaN or ±inf (every finite float is inside): only
                        self.d.nonfinite_value(name)  # they pay for the count; a NaN loss, the server alerts on it
                        v = _NAN
                if v != v:
                    self.d.drop("invalid_value")
                    ratelog.log(
                        LOG_WARNING,
                        "gauge-value",
                        "[rl-insight] metric_gauge(%r) got %.80r, not a finite number; dropped",
                        name,
                        value,
                    )
                    continue
                lkey = labels_key(labels) if labels else ()
                gkey = (name, lkey)
                if gkey not in latest and len(latest) >= max_series:
                    self.d.drop("series_limit")
                    continue
                latest[gkey] = (v, ts, step, doc, labels)
                if self.d._step_names.get(name):
                    step_marks.append((len(samples), ts, step))
                samples.append([table.ref("g", name, lkey, labels, doc), ts, step, v])
            elif tag == _SPAN:
                spans.append(span_entry(item))
                ended.add(item[1])
            else:
                start_items.append(item)
        # a state that began and ended within this batch needs no announcement: its end says all (half the span
        # events of short states: encoding them held the GIL the training thread waits on)
        span_starts.extend(span_entry(it) for it in start_items if it[1] not in ended)

        self.d._last_step_mark_ts = _assign_burst_steps(samples, step_marks, self.d._last_step_mark_ts)
        # Cumulative series: all of them after a server restart, else only those that changed; and all of them in
        # the process's last batch: in a fleet, the server that hears it shows the process (server/fleet/coordinator)
        resend = self.d._resend_all or (self.d._final and not q)
        self.d._resend_all = False
        fresh = len(samples) + len(span_starts)  # new events; the copies a resend adds below are none
        counters, hists, changed = self.d.agg.take(resend)
        fresh += changed
        for name, lkey, total, ts, step, doc, labels in counters:
            samples.append([table.ref("c", name, lkey, labels, doc), ts, step, total])
        for name, lkey, total, count, cumulative, ts, step, doc, labels, bounds in hists:
            samples.append([table.ref("h", name, lkey, labels, doc, bounds), ts, step, [total, count, cumulative]])
        if resend:
            for (name, lkey), (v, ts, step, doc, labels) in list(latest.items()):
                samples.append([table.ref("g", name, lkey, labels, doc), ts, step, v])
            if self.d.open_states is not None:  # states still open: the restarted server learns they are claimed
                # (a state that started in this very batch is in it already; both wire forms lead with the hex id)
                announced = {e[0] if isinstance(e, list) else e["id"] for e in span_starts}
                span_starts.extend(span_entry(it) for it in self.d.open_states() if f"{it[1]:016x}" not in announced)
        has_items = bool(samples or span_starts or spans)
        n_user = fresh + len(spans)
        if has_items or force:  # a flush or heartbeat also reports the latest delivery counters
            self._add_self_metrics(table, samples, force=force)
        client = {"id": self.d.client_id, "pid": self.d.pid, "host": self.d.host, **self.d.base_labels}
        rank = self.d.process.rank()
        if rank is not None:  # the server lists a run's processes by rank (requests that select ranks)
            client["rank"] = rank
        if self.d.cfg.namespace:
            client["namespace"] = self.d.cfg.namespace
        if self.d._run_info_due:
            client["run"] = self.d.run_info
            self.d._run_info_in_flight = True
        span_attrs = None if attrs_table is None else [a for _, a in sorted(attrs_table.values(), key=lambda e: e[0])]
        body = wire.encode_batch(client, table.entries, samples, span_starts, spans, self.d._final, span_attrs, pause)
        body, headers = wire.compress(body)
        return body, headers, n_user, has_items

    def _add_self_metrics(self, table: Any, samples: list, force: bool = False) -> None:
        now = time.time()
        if now < self.d._next_self_metrics and not force:
            return
        self.d._next_self_metrics = now + _SELF_METRICS_EVERY_S
        labels = {"pid": str(self.d.pid), "host": self.d.host}
        doc = "rl-insight client self-metric"
        values: list[tuple[str, str, dict, float]] = [
            ("c", "events_sent", labels, float(self.d.sent_items)),
            ("c", "batches_sent", labels, float(self.d.sent_batches)),
            ("c", "send_retries", labels, float(self.d.retries)),
            ("g", "queue_depth", labels, float(len(self.d.queue))),
        ]
        with self.d._drop_lock:
            drops, nonfinite = dict(self.d.drops), dict(self.d.nonfinite)
        for reason, n in drops.items():
            values.append(("c", "events_dropped", {**labels, "reason": reason}, float(n)))
        for metric, n in nonfinite.items():  # (rule RLInsightNonFiniteMetric)
            values.append(("c", "nonfinite_values", {**labels, "metric": metric[:200]}, float(n)))
        if self.d.budget is not None:  # what the span budget left out: by choice, not lost (not a drop)
            values.append(("c", "turns_sampled_out", labels, float(self.d.budget.turns_out)))
            values.append(("c", "trajectories_sampled_out", labels, float(self.d.budget.trajectories_out)))
        for kind, name, lab, value in values:
            samples.append([table.ref(kind, name, labels_key(lab), lab, doc, None, "client"), now, self.d.step, value])

    def _span_compact(self, item: tuple, attrs_table: dict[int, tuple[int, dict]]) -> list:
        """Protocol 2: a list, its attributes an index into the batch's table. Spans of a lane share their
        attributes object (lanes.py), so each is encoded once per batch."""
        _, span_id, trace_id, parent_id, name, lane, start_ns, end_ns, attrs, kind = item
        key = id(attrs)  # the queue items keep every attrs object alive for the whole batch
        entry = attrs_table.get(key)
        if entry is None:
            merged = (
                {"process_id": str(self.d.pid), **attrs, **self.d.base_labels}
                if attrs
                else {"process_id": str(self.d.pid), **self.d.base_labels}
            )
            entry = attrs_table[key] = (len(attrs_table), merged)
        return [f"{span_id:016x}", f"{trace_id:032x}", f"{parent_id:016x}" if parent_id is not None else None,
                name, lane, start_ns, end_ns, kind, entry[0]]

    def _span_json(self, item: tuple) -> dict:
        _, span_id, trace_id, parent_id, name, lane, start_ns, end_ns, attrs, kind = item
        attributes = (
            {"process_id": str(self.d.pid), **attrs, **self.d.base_labels}
            if attrs
            else {"process_id": str(self.d.pid), **self.d.base_labels}
        )
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
