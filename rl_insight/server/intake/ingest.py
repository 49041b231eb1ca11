"""Ingest: applying a decoded batch to the live store (the records the other sinks take), and answering only
once the run store has what was handed over (`StoredWaiters.until_stored`; `wait_stored` on a thread). Body
decoding is the routes' (routing/body.py).

Validation lives in `rl_insight.protocol` (the one check at the boundary); this module only maps
the validated records onto the live metric store, the run store and the span fan-out.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import BusyError, InvalidInputError
from ...protocol import MAX_ERRORS_REPORTED, Batch, BatchError, ItemError, SpanRecord, decode_batch
from ..live.metric_store import MetricStore, SeriesRef, prepare_series
from ..runstore.hand_over import HandOver, Receipt
from ..runstore.rows import SampleRow
from ..runstore.writer import NO_IDENTITY


@dataclass
class IngestResult:
    accepted: int = 0
    rejected: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    accepted_by_section: Counter = field(default_factory=Counter)
    samples: list[SampleRow] = field(default_factory=list)  # for the run store
    span_starts: list[SpanRecord] = field(default_factory=list)
    spans: list[SpanRecord] = field(default_factory=list)
    replaced_strings: int = 0

    def reject(self, section: str, index: int, err: ItemError) -> None:
        self.rejected += 1
        self.reasons[err.reason] += 1
        if len(self.errors) < MAX_ERRORS_REPORTED:
            self.errors.append({"section": section, "index": index, "reason": err.reason, "detail": str(err)})


def _not_stored(detail: str) -> BusyError:
    return BusyError(
        f"the run store has not stored this batch ({detail}); nothing of it is acknowledged: send it again",
        hint="resends are stored once; `rl-insight server status` and /healthz say why the store is behind",
        retry_after_s=2,
    )


class StoredWaiters:
    """Requests on the event loop waiting for the run store's commit. Each waits on a bare loop future beside its
    `Receipt`; the writer wakes the loop once per commit (`HandOver.on_settled`), and one pass over the waiting
    compares each receipt with the writer's two watermarks (`HandOver.settled`). No `concurrent.futures.Future`, no
    `asyncio.wait_for` and no thread hop per request: under a thousand clients those kept each waiting request's
    objects alive into the oldest GC generation and cost the loop an iteration more per answer (bench/RESULTS.md,
    issue 24). Timeouts are one sweep every SWEEP_S, not a timer each."""

    SWEEP_S = 0.25

    def __init__(self, writer: HandOver | None = None, observe: Callable[[float], None] | None = None) -> None:
        self._writer = writer
        self._waiting: list[tuple[float, Receipt, asyncio.Future[bool | None]]] = []  # (deadline, receipt, waiter)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep: asyncio.TimerHandle | None = None
        self._wake_queued = False  # a _settle is scheduled on the loop already (one per commit, however many wait)
        self._observe = observe  # how long each answer waited for its commit (a histogram on /metrics)
        if writer is not None:
            writer.on_settled.append(self._settled)

    async def until_stored(self, receipt: Receipt | None, timeout_s: float) -> None:
        """Return once the run store committed what a request handed over; BusyError (503, the client resends) when
        some of it was lost or it is not settled within `timeout_s`. An answer is never sent for data that a crash
        could still lose."""
        if receipt is None or self._writer is None:
            return
        started = time.perf_counter()
        ok = receipt.verdict(self._writer.settled())
        if ok is None:  # a commit after this check wakes a _settle that runs after the append below: none is missed
            loop = asyncio.get_running_loop()
            if self._sweep is None or loop is not self._loop:  # (a new loop: tests run one per case)
                self._sweep = loop.call_later(self.SWEEP_S, self._expire)
            self._loop = loop
            waiter: asyncio.Future[bool | None] = loop.create_future()
            self._waiting.append((loop.time() + timeout_s, receipt, waiter))
            self._writer.ask(receipt.upto)
            ok = await waiter
        if self._observe is not None:
            self._observe(time.perf_counter() - started)
        _verdict(ok, timeout_s)

    def _settled(self) -> None:  # a writer thread, after a commit
        loop = self._loop
        if loop is not None and not self._wake_queued:
            self._wake_queued = True
            try:
                loop.call_soon_threadsafe(self._settle)
            except RuntimeError:  # the loop is closed: the server is stopping
                self._wake_queued = False

    def _settle(self) -> None:  # the event loop
        self._wake_queued = False  # before reading the watermarks: a commit after this read schedules another pass
        if not self._waiting or self._writer is None:
            return
        settled = self._writer.settled()
        still = []
        for entry in self._waiting:
            waiter = entry[2]
            if waiter.done():  # the request was cancelled (its client went away)
                continue
            ok = entry[1].verdict(settled)
            if ok is None:
                still.append(entry)
            else:
                waiter.set_result(ok)
        self._waiting = still

    def _expire(self) -> None:  # the event loop, every SWEEP_S while anything waits
        assert self._loop is not None
        now = self._loop.time()
        still = []
        for entry in self._waiting:
            if entry[2].done():
                continue
            if entry[0] <= now:
                entry[2].set_result(None)  # not settled in time: 503
            else:
                still.append(entry)
        self._waiting = still
        self._sweep = self._loop.call_later(self.SWEEP_S, self._expire) if still else None


def wait_stored(writer: HandOver | None, receipt: Receipt | None, timeout_s: float) -> None:
    """StoredWaiters.until_stored for a caller on a thread (the gRPC intake)."""
    if writer is not None and receipt is not None:
        try:
            ok: bool | None = writer.durable(receipt.since).result(timeout_s)
        except TimeoutError:
            ok = None
        _verdict(ok, timeout_s)


def _verdict(ok: bool | None, timeout_s: float) -> None:
    """Nothing (stored), or the BusyError that says why not: None is a timeout, False a failed write."""
    if ok is None:
        raise _not_stored(f"not committed within {timeout_s:.0f} s")
    if not ok:
        raise _not_stored("a write failed or the hand-over queue was full")


@functools.lru_cache(maxsize=65_536)
def _identity_of(base_name: str, key: tuple[tuple[str, str], ...]) -> tuple[str, str, str, str]:
    # `key` is the live store's series key, the exposed labels sorted: it determines the labels. Cached because a
    # client defines its series in every batch and one JSON encoding per series was ~15 % of a batch's intake
    # (bench/RESULTS.md, issue 24); the bound keeps a stream of new label sets from growing it.
    labels = dict(key)
    project, experiment = labels.pop("project", NO_IDENTITY), labels.pop("experiment_name", NO_IDENTITY)
    return project, experiment, base_name, json.dumps(labels, sort_keys=True, separators=(",", ":"))


def _run_store_identity(batch: Batch, index: int, ref: SeriesRef | ItemError
                        ) -> tuple[str, str, str, str, str, str] | ItemError | None:
    """(project, experiment_name, name, labels JSON, the name as logged where it differs, kind) under which the run
    store records series `index` of `batch`; None for a client's self-metrics (/metrics only); ItemError for a
    definition no sink can take. Worked out from the definition itself, so the live store's bounds (a family or series
    cap, its memory, a name already exposed as another type) never decide what the run store keeps."""
    d = batch.series[index]
    if isinstance(d, ItemError):
        return d
    if isinstance(ref, SeriesRef):
        base, key = ref.base_name, ref.key
    else:
        try:
            _, base, _, _, key = prepare_series(d, batch.client.namespace)
        except ItemError as err:
            return err
    if d.ns is not None:
        return None
    logged = d.name  # (+ the name as logged, kept beside the sanitized one: the UI shows `actor/entropy`)
    return (*_identity_of(base, key), "" if logged == base else logged, d.kind)


def _add_store_rows(rows: list[SampleRow], ident: tuple[str, str, str, str, str, str], sample: Any,
                    client_id: str) -> None:
    """Append the run store's rows for one sample: what this process sent (a counter, a histogram's count and sum:
    its own running value, summed across processes and servers by the writer, runstore/metrics/series_parts.py),
    never this server's partial sum on /metrics; a gauge's value."""
    project, experiment, name, labels, logged, kind = ident
    if kind == "histogram":
        own_sum, own_count, _ = sample.value  # a histogram sample is (sum, count, cumulative counts)
        rows.append(SampleRow(project, experiment, name + "_count", "counter", labels, sample.step, sample.ts,
                              float(own_count), client_id, logged and logged + "_count"))
        rows.append(SampleRow(project, experiment, name + "_sum", "counter", labels, sample.step, sample.ts, own_sum,
                              client_id, logged and logged + "_sum"))
    elif kind == "counter":
        rows.append(SampleRow(project, experiment, name, kind, labels, sample.step, sample.ts, sample.value, client_id,
                              logged))
    else:
        rows.append(SampleRow(project, experiment, name, kind, labels, sample.step, sample.ts, sample.value, "",
                              logged))


def _outside(projects: frozenset[str], project: str) -> ItemError:
    return ItemError("project_not_allowed", f"this token sends data of {', '.join(sorted(projects))} only, not of "
                                            f"project {project[:120]!r}: ask for a token of that project")


def apply_batch(obj: Any, store: MetricStore, projects: frozenset[str] | None = None) -> tuple[Batch, IngestResult]:
    """Validate `obj`; fold its samples into the run store's rows and apply them to the live store (/metrics), two
    sinks of one pass: the live store's bounds refuse what /metrics shows (reported per item, as ever), never what the
    run store keeps. Return the records the other sinks take. `projects`: the only projects the sender's token may
    write (None: any); an item of another project is refused (`project_not_allowed`), the rest kept."""
    try:
        batch = decode_batch(obj)
    except BatchError as exc:
        raise InvalidInputError(str(exc), hint="upgrade the server or the client so that they match"
                                if "version" in str(exc) else None) from None
    result = IngestResult(replaced_strings=batch.replaced)
    for section, index, err in batch.errors:
        result.reject(section, index, err)
    client_id = batch.client.id
    refs = store.resolve_many(batch.series, client_id, batch.client.namespace)
    identities: dict[int, tuple[str, str, str, str, str, str] | ItemError | None] = {}
    rows = result.samples
    # every sample of the batch under one acquisition of the store's lock (MetricStore.apply_many)
    valid: list[tuple[int, Any, SeriesRef]] = []
    for i, sample in batch.samples:
        if sample.series in identities:
            ident = identities[sample.series]
        else:
            ident = identities[sample.series] = _run_store_identity(batch, sample.series, refs[sample.series])
        if isinstance(ident, ItemError):  # a name or label no sink can take
            result.reject("samples", i, ident)
            continue
        if projects is not None and ident is not None and ident[0] not in projects:  # (a client's self-metrics pass)
            result.reject("samples", i, _outside(projects, ident[0]))
            continue
        if ident is not None:  # the run store keeps it whatever /metrics' own bounds refuse
            _add_store_rows(rows, ident, sample, client_id)
        ref = refs[sample.series]
        if isinstance(ref, ItemError):  # refused by /metrics' bounds (reported as before; stored all the same)
            result.reject("samples", i, ref)
        else:
            valid.append((i, sample, ref))
    applied = store.apply_many([(ref, sample.ts, sample.value) for _, sample, ref in valid], client_id)
    for (i, _sample, _ref), exposed in zip(valid, applied):
        if isinstance(exposed, ItemError):  # a new series past /metrics' size bounds (stored all the same)
            result.reject("samples", i, exposed)
            continue
        result.accepted += 1
        result.accepted_by_section["samples"] += 1
    if projects is not None:
        for section in ("span_starts", "spans"):
            kept = []
            for i, record in enumerate(getattr(batch, section)):
                if record.project in projects:
                    kept.append(record)
                else:
                    result.reject(section, i, _outside(projects, record.project))
            setattr(batch, section, kept)
    for section, records in (("span_starts", batch.span_starts), ("spans", batch.spans)):
        if records:
            result.accepted += len(records)
            result.accepted_by_section[section] += len(records)
    result.span_starts, result.spans = batch.span_starts, batch.spans
    return batch, result
