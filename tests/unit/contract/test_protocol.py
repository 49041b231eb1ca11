"""The wire contract (rl_insight/protocol/), property-based: whatever decodes can be stored in the
live metric store and exposed on /metrics, written to SQLite, and encoded as OTLP protobuf; the
client's encoding round-trips; hostile values are refused item by item, never raised."""

from __future__ import annotations

import json
import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from rl_insight.client import wire
from rl_insight.protocol import INT64_MAX, ItemError, decode_batch
from rl_insight.server.intake.ingest import apply_batch
from rl_insight.server.live.metric_store import MetricStore, StoreCollector
from rl_insight.server.outbound.otlp import OtlpForwarder
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.lanes import examples


def _mostly(valid: st.SearchStrategy, hostile: st.SearchStrategy) -> st.SearchStrategy:
    """Valid 7 times in 8 (so that whole items get through and reach the sinks), hostile otherwise."""
    return st.integers(min_value=0, max_value=7).flatmap(lambda i: hostile if i == 0 else valid)


# text with lone surrogates, control characters and non-BMP characters
TEXT = st.one_of(st.text(alphabet=st.characters(blacklist_categories=()), max_size=40),
                 st.sampled_from(["\udcff", "a\ud800b", "/data/shard-\udcff.bin", "<script>", "rank_0"]))
NAME = st.one_of(TEXT, st.sampled_from(["loss", "val-core/acc@1", "training/global_step", "x" * 300, "", "__bad"]))
NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-2**80, max_value=2**80),
                   st.sampled_from([0, 1, 2**53, 2**63, 10**400, -1.0]), st.booleans(), st.none(), TEXT)
SCALAR = st.one_of(TEXT, st.integers(min_value=-2**70, max_value=2**70), st.floats(), st.booleans(), st.none())
ATTRS = st.dictionaries(
    TEXT, st.one_of(SCALAR, st.lists(SCALAR, max_size=3), st.dictionaries(TEXT, SCALAR, max_size=2)), max_size=6
)
NS = st.one_of(st.integers(min_value=0, max_value=2**64), st.integers(min_value=1_700_000_000 * 10**9,
                                                                       max_value=1_800_000_000 * 10**9), NUMBER)

SERIES = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["g", "g", "c", "h", "x"]),
        "n": _mostly(st.just("loss"), NAME),
        "l": _mostly(
            st.dictionaries(st.sampled_from(["role", "shard", "rank"]), TEXT, max_size=2),
            st.dictionaries(TEXT, SCALAR, max_size=4),
        ),
    },
    optional={
        "d": TEXT,
        "b": st.one_of(st.just([1.0]), st.lists(NUMBER, min_size=1, max_size=4)),
        "ns": st.just("client"),
    },
)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
HIST_VALUE = st.integers(min_value=0, max_value=5).map(lambda c: [float(c), c, [0, c]])  # valid for 1 bound
VALID_SERIES = st.fixed_dictionaries(
    {
        "k": st.sampled_from(["g", "c", "h"]),
        "n": st.sampled_from(["loss", "a/b", "x\udcff"]),
        "l": st.dictionaries(st.sampled_from(["role", "shard"]), TEXT, max_size=2),
        "b": st.just([1.0]),
    }
)
SAMPLE = st.tuples(
    _mostly(st.just(0), st.integers(min_value=-1, max_value=4)),
    _mostly(st.floats(min_value=1e9, max_value=2e9), NUMBER),
    _mostly(st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)), NUMBER),
    _mostly(
        st.one_of(FINITE, HIST_VALUE),
        st.one_of(NUMBER, st.tuples(NUMBER, NUMBER, st.lists(NUMBER, max_size=5)).map(list)),
    ),
).map(list)
SPAN = st.fixed_dictionaries(
    {
        "id": _mostly(st.just("a1"), TEXT),
        "name": _mostly(st.just("rollout"), NAME),
        "start_ns": _mostly(st.integers(min_value=0, max_value=INT64_MAX), NS),
    },
    optional={
        "end_ns": _mostly(st.just(INT64_MAX), NS),
        "trace_id": TEXT,
        "parent_id": st.one_of(TEXT, st.none()),
        "lane": st.one_of(TEXT, st.none()),
        "kind": TEXT,
        "attributes": ATTRS,
    },
)
BATCH = st.fixed_dictionaries({"v": st.just(1), "client": st.fixed_dictionaries({"id": st.just("c1")}, optional={
    "project": TEXT, "experiment_name": TEXT, "host": TEXT, "pid": NUMBER}),
    "series": st.tuples(VALID_SERIES, st.lists(SERIES, max_size=4)).map(lambda t: [t[0], *t[1]]),
    "samples": st.lists(SAMPLE, max_size=8),
    "span_starts": st.lists(SPAN, max_size=3), "spans": st.lists(SPAN, max_size=4)})

FUZZ = settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck), database=None)


@FUZZ
@given(batch=BATCH)
def test_whatever_decodes_fits_every_sink(tmp_path_factory, batch: dict) -> None:
    obj = json.loads(json.dumps(batch))  # as it arrives over the wire (surrogates as \\udXXX escapes)
    store = MetricStore()
    decoded, result = apply_batch(obj, store)
    # /metrics renders (the exposition is encoded as UTF-8 as a whole: one bad string would break it)
    reg = CollectorRegistry()
    reg.register(StoreCollector(store))
    generate_latest(reg).decode("utf-8")
    # SQLite takes every accepted sample and span: no item dropped as unstorable
    path = Path(tmp_path_factory.mktemp("rs")) / "rs.sqlite"
    w = RunStoreWriter(path, flush_interval_s=0.01)
    try:
        w.put_samples(result.samples)
        w.put_spans(result.span_starts, result.spans)
        assert w.flush(20)
        assert w.stats.by_reason == {}, w.stats.last_error
    finally:
        w.close()
    # OTLP: the finished spans become SDK spans that encode as protobuf
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    fwd = OtlpForwarder.__new__(OtlpForwarder)
    fwd._resources = {}
    readable = [fwd._to_readable(s, decoded.client.host) for s in result.spans]
    encode_spans(readable).SerializeToString()
    # every refused item names its reason; JSON answers can be encoded
    json.dumps(result.errors).encode("utf-8")
    for s in result.spans + result.span_starts:
        assert 0 <= s.start_ns <= INT64_MAX and json.dumps(s.to_dict()).encode("utf-8")


@FUZZ
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=20),
       names=st.lists(TEXT.filter(lambda t: t.strip()), min_size=1, max_size=3),
       step=st.one_of(st.none(), st.integers(min_value=0, max_value=2**53)))
def test_client_encoding_round_trips(values: list[float], names: list[str], step: int | None) -> None:
    table = wire.SeriesTable({"project": "p"})
    samples = [[table.ref("g", names[i % len(names)], (), {"role": names[0]}, "doc"), 1_700_000_000.5 + i, step, v]
               for i, v in enumerate(values)]
    body = wire.encode_batch({"id": "c"}, table.entries, samples, [], [], False)
    batch = decode_batch(json.loads(body))
    assert not batch.errors
    got = [(batch.series[s.series].name, s.ts, s.step, s.value) for _, s in batch.samples]
    want = [(table.entries[i]["n"], ts, None if st_ is None else float(st_), v) for i, ts, st_, v in samples]
    clean = [  # lone surrogates and NUL (no database's text holds it) arrive as U+FFFD
        (
            n.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
            if any("\ud800" <= c <= "\udfff" for c in n)
            else n
        ).replace("\x00", "\ufffd")
        for n, *_ in want
    ]
    assert [g[0] for g in got] == [c if "\ufffd" not in c else g[0] for c, g in zip(clean, got)]
    assert [g[1:] for g in got] == [w[1:] for w in want]


def test_protocol_2_compact_spans_share_their_attributes() -> None:
    attrs = {"project": "p", "experiment_name": "e", "state_lane_id": "rank_0"}
    body = wire.encode_batch(
        {"id": "c"},
        [],
        [],
        [["a", "t", None, "gen", "rank_0", 1, None, "state", 0]],
        [["a", "t", None, "gen", "rank_0", 1, 5, "state", 0], ["b", "t", None, "x", None, 2, 3, "op", 1]],
        False,
        span_attrs=[attrs, {f"k{i}": "x" * 1000 for i in range(20)}],
    )
    batch = decode_batch(json.loads(body))
    assert [s.id for s in batch.spans] == ["a"] and batch.spans[0].attributes is batch.span_starts[0].attributes
    assert batch.spans[0].project == "p" and batch.spans[0].lane == "rank_0"
    (err,) = batch.errors  # the oversized attribute table entry refuses the span that uses it, only that one
    assert err[0] == "spans" and err[1] == 1 and err[2].reason == "too_large"


def test_numbers_at_the_edges() -> None:
    series = [{"k": "g", "n": "x", "l": {}}, {"k": "h", "n": "h", "l": {}, "b": [1.0]}]
    samples = [[0, 0, None, 1.0], [0, 9.3e9, None, 1.0], [0, 1.0, 2**53, 1.0], [0, 1.0, 2**53 + 1, 1.0],
               [1, 1.0, None, [1.0, 2**53, [0, 2**53]]], [1, 1.0, None, [1.0, 3, [1, 2]]], [0, 1.0, None, True]]
    batch = decode_batch({"v": 1, "client": {"id": "c"}, "series": series, "samples": samples})
    assert [i for i, _ in batch.samples] == [0, 2, 4]
    reasons = {i: e.reason for _, i, e in batch.errors}
    assert reasons == {1: "out_of_range", 3: "out_of_range", 5: "invalid_value", 6: "invalid_value"}
    assert all(isinstance(e, ItemError) for *_, e in batch.errors)
    assert math.isfinite(batch.samples[0][1].value)
