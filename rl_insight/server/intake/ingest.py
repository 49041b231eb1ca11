"""Ingest: applying a decoded batch to the live store (the records the other sinks take), and answering only
once the run store has what was handed over (`StoredWaiters.until_stored`). Body decoding is the routes'
(routes/body.py).

Validation lives in `rl_insight.protocol` (the one check at the boundary); this module only maps
the validated records onto the live metric store, the run store and the span fan-out.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import BusyError, InvalidInputError
from ...protocol import MAX_ERRORS_REPORTED, Batch, BatchError, ItemError, SpanRecord, decode_batch
from ..live.metric_store import MetricStore, SeriesRef
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
    """Requests on the event loop waiting for the run store's commit: the writer wakes the loop once per commit
    (`RunStoreWriter.on_settled`), not once per request (a thousand clients' batches a second each waking the loop
    from the writer thread cost a fifth of the server's CPU in self-pipe writes)."""

    def __init__(self, writer: Any = None, observe: Callable[[float], None] | None = None) -> None:
        self._waiting: list[tuple[Future[bool], asyncio.Future[bool]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._observe = observe  # how long each answer waited for its commit (a histogram on /metrics)
        if writer is not None:
            writer.on_settled.append(self._settled)

    async def until_stored(self, durable: "Future[bool] | None", timeout_s: float) -> None:
        """Return once the run store committed what a request handed over (RunStoreWriter.durable); BusyError (503,
        the client resends) when it failed or is not done within `timeout_s`. An answer is never sent for data
        that a crash could still lose."""
        if durable is None:
            return
        started = time.perf_counter()
        if not durable.done():
            loop = self._loop = asyncio.get_running_loop()
            waiter: asyncio.Future[bool] = loop.create_future()
            self._waiting.append((durable, waiter))
            if durable.done():  # settled before the writer could see this waiter: no wake-up is coming
                self._settle()
            try:
                await asyncio.wait_for(waiter, timeout_s)
            except asyncio.TimeoutError:
                self._waiting = [w for w in self._waiting if w[1] is not waiter]
        if self._observe is not None:
            self._observe(time.perf_counter() - started)
        _verdict(durable.result() if durable.done() else None, timeout_s)

    def _settled(self) -> None:  # the writer thread, after a commit
        loop = self._loop
        if loop is not None and self._waiting:
            loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:  # the event loop
        still = []
        for durable, waiter in self._waiting:
            if not durable.done():
                still.append((durable, waiter))
            elif not waiter.done():
                waiter.set_result(True)
        self._waiting = still



def wait_stored(durable: "Future[bool] | None", timeout_s: float) -> None:
    """StoredWaiters.until_stored for a caller on a thread (the gRPC intake)."""
    if durable is not None:
        try:
            ok: bool | None = durable.result(timeout_s)
        except TimeoutError:
            ok = None
        _verdict(ok, timeout_s)


def _verdict(ok: bool | None, timeout_s: float) -> None:
    """Nothing (stored), or the BusyError that says why not: None is a timeout, False a failed write."""
    if ok is None:
        raise _not_stored(f"not committed within {timeout_s:.0f} s")
    if not ok:
        raise _not_stored("a write failed or the hand-over queue was full")


def _store_identity(ref: SeriesRef) -> tuple[str, str, str, str]:
    """(project, experiment_name, name, labels JSON) under which the run store records a series."""
    return _identity_of(ref.base_name, ref.key)


@functools.lru_cache(maxsize=65_536)
def _identity_of(base_name: str, key: tuple[tuple[str, str], ...]) -> tuple[str, str, str, str]:
    # `key` is the live store's series key, the exposed labels sorted: it determines the labels. Cached because a
    # client defines its series in every batch and one JSON encoding per series was ~15 % of a batch's intake
    # (bench/RESULTS.md, issue 24); the bound keeps a stream of new label sets from growing it.
    labels = dict(key)
    project, experiment = labels.pop("project", NO_IDENTITY), labels.pop("experiment_name", NO_IDENTITY)
    return project, experiment, base_name, json.dumps(labels, sort_keys=True, separators=(",", ":"))


def apply_batch(obj: Any, store: MetricStore) -> tuple[Batch, IngestResult]:
    """Validate `obj`, apply its samples to the live store; return the records the other sinks take."""
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
    identities: dict[int, tuple[str, str, str, str]] = {}
    rows = result.samples
    # every sample of the batch under one acquisition of the store's lock (MetricStore.apply_many)
    valid: list[tuple[int, Any, SeriesRef]] = []
    for i, sample in batch.samples:
        ref = refs[sample.series]
        if isinstance(ref, ItemError):
            result.reject("samples", i, ref)
        else:
            valid.append((i, sample, ref))
    applied = store.apply_many([(ref, sample.ts, sample.value) for _, sample, ref in valid], client_id)
    for (i, sample, ref), exposed in zip(valid, applied):
        if isinstance(exposed, ItemError):
            result.reject("samples", i, exposed)
            continue
        result.accepted += 1
        result.accepted_by_section["samples"] += 1
        if ref.namespace is not None:  # client self-metrics stay on /metrics only
            continue
        ident = identities.get(sample.series)
        if ident is None:
            ident = identities[sample.series] = _store_identity(ref)
        project, experiment, name, labels = ident
        kind = ref.family.kind
        if kind == "histogram":
            total, count = exposed  # type: ignore[misc]  # a histogram exposes (sum, count)
            rows.append(
                SampleRow(project, experiment, name + "_count", "counter", labels, sample.step, sample.ts, count)
            )
            rows.append(SampleRow(project, experiment, name + "_sum", "counter", labels, sample.step, sample.ts, total))
        else:
            rows.append(SampleRow(project, experiment, name, kind, labels, sample.step, sample.ts, exposed))  # type: ignore[arg-type]  # gauges and counters expose one float
    for section, records in (("span_starts", batch.span_starts), ("spans", batch.spans)):
        if records:
            result.accepted += len(records)
            result.accepted_by_section[section] += len(records)
    result.span_starts, result.spans = batch.span_starts, batch.spans
    return batch, result
