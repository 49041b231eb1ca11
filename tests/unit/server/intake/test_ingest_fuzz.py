"""Mutated batches never crash ingest: every outcome is stored items, per-item errors, or an RLInsightError."""

from __future__ import annotations

import copy
import json
import random
import time

from rl_insight.errors import RLInsightError
from rl_insight.server.intake.ingest import apply_batch
from rl_insight.server.live.metric_store import MetricStore
from rl_insight.server.live.spans import MemorySpanSink

WEIRD = [None, True, -1, 0, 2**70, 1e308, float("nan"), float("inf"), "", "x" * 5000, [], {}, [1, [2]], {"a": {"b": 1}},
         "__name__", "le", -0.0, "1e3", "\udcff", "a\ud800b", 10**400, 2**63, -2**63 - 1, 9.3e9]


def valid_batch() -> dict:
    return {
        "v": 1,
        "client": {"id": "fuzz", "pid": 1, "host": "h"},
        "series": [{"k": "g", "n": "a/b", "l": {"project": "p"}, "d": "doc"},
                   {"k": "c", "n": "c_total", "l": {}},
                   {"k": "h", "n": "h", "l": {"x": "1"}, "b": [0.1, 1.0]}],
        "samples": [[0, time.time(), 1, 0.5], [1, time.time(), None, 3.0], [2, time.time(), 2, [0.55, 2, [1, 2, 2]]]],
        "span_starts": [{"id": "aa", "name": "s", "start_ns": 1, "attributes": {}}],
        "spans": [{"id": "aa", "name": "s", "start_ns": 1, "end_ns": 2, "lane": "rank_0", "attributes": {"k": 1}}],
    }


def mutate(node: object, rng: random.Random) -> object:
    if isinstance(node, dict) and node:
        key = rng.choice(list(node))
        if rng.random() < 0.2:
            del node[key]
        else:
            node[key] = mutate(node[key], rng) if rng.random() < 0.6 else copy.deepcopy(rng.choice(WEIRD))
    elif isinstance(node, list) and node:
        i = rng.randrange(len(node))
        node[i] = mutate(node[i], rng) if rng.random() < 0.6 else copy.deepcopy(rng.choice(WEIRD))
    else:
        return copy.deepcopy(rng.choice(WEIRD))
    return node


def test_thousands_of_mutated_batches_never_raise_unexpected_errors() -> None:
    rng = random.Random(20261129)
    store, spans = MetricStore(), MemorySpanSink()
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(3000):
        batch = valid_batch()
        for _ in range(rng.randint(1, 4)):
            batch = mutate(batch, rng)
        batch = json.loads(
            json.dumps(batch)
        )  # what arrives over the wire (NaN/Infinity survive, as with Python clients)
        try:
            decoded, result = apply_batch(batch, store)
            spans.put(result.span_starts, result.spans, decoded.client.host)
            assert result.accepted + result.rejected >= 0
            outcomes["ok"] += 1
        except RLInsightError:
            outcomes["refused"] += 1
    assert outcomes["ok"] > 800 and outcomes["refused"] > 10
    snapshot = store.snapshot()  # exposition still renders after all of that
    assert any(m.name == "rl_insight_monitor_a_b" for m in snapshot)
    from prometheus_client import CollectorRegistry, generate_latest

    from rl_insight.server.live.metric_store import StoreCollector

    reg = CollectorRegistry()
    reg.register(StoreCollector(store))
    assert b"rl_insight_monitor_a_b" in generate_latest(reg)
