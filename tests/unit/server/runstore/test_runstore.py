"""Run store: writes, downsampling, span merging, exports, restarts, damaged files, full disk, retention."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rl_insight.errors import InvalidInputError, NotFoundError, StoreError
from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.spans import timeline
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.unit.server.runstore.conftest import ForeignFile

S = 10**9


def span(i: str, name: str, lane: str, start: int, end: int | None, kind: str = "state", parent: str | None = None,
         project: str = "p", exp: str = "e") -> SpanRecord:
    return SpanRecord(
        i, "t" + i, parent, name, lane, kind, start, end, {"project": project, "experiment_name": exp, "k": 1}
    )


@pytest.fixture
def store(store_at: StoreLocation):
    w = RunStoreWriter(store_at, flush_interval_s=0.02)
    yield w, RunStoreReader(store_at)
    w.close()


def write_series(w: RunStoreWriter, n: int, name: str = "reward", exp: str = "e", t0: float = 1_000.0) -> None:
    rows = [SampleRow("p", exp, name, "gauge", "{}", float(i), t0 + i, float((i * 37) % 101)) for i in range(n)]
    w.put_samples(rows)
    assert w.flush(30)


def test_runs_series_and_downsampling(store) -> None:
    w, r = store
    write_series(w, 100_000)
    (run,) = q.list_runs(r.conn())
    assert (run["project"], run["experiment_name"], run["last_step"]) == ("p", "e", 99_999.0)
    assert q.metric_names(r.conn(), run["id"])[0]["samples"] == 100_000
    mm = q.series(r.conn(), run["id"], "reward", points=1000)["series"][0]
    assert mm["total"] == 100_000 and len(mm["points"]) <= 1000
    ys = [p[1] for p in mm["points"]]
    assert min(ys) == 0.0 and max(ys) == 100.0  # min/max buckets keep the extremes
    xs = [p[0] for p in mm["points"]]
    assert xs == sorted(xs) and xs[0] == 0.0 and xs[-1] >= 99_900
    lt = q.series(r.conn(), run["id"], "reward", points=500, agg="lttb")["series"][0]["points"]
    assert len(lt) == 500 and lt[0] == [0.0, 0.0] and lt[-1][0] == 99_999.0
    window = q.series(r.conn(), run["id"], "reward", x="time", x_from=1_010.0, x_to=1_019.0, agg="none")["series"][0]
    assert [p[0] for p in window["points"]] == [1_010.0 + i for i in range(10)]


def test_bad_queries_are_clear_errors(store) -> None:
    w, r = store
    write_series(w, 10)
    with pytest.raises(NotFoundError, match="no run with id 99"):
        q.series(r.conn(), 99, "reward")
    with pytest.raises(NotFoundError, match="no metric 'nope'"):
        q.series(r.conn(), 1, "nope")
    for points in (0, 1, 10**7):
        with pytest.raises(InvalidInputError, match="points must be between"):
            q.series(r.conn(), 1, "reward", points=points)
    with pytest.raises(InvalidInputError, match="empty window"):
        q.series(r.conn(), 1, "reward", x_from=5, x_to=1)
    with pytest.raises(InvalidInputError, match="empty window"):
        timeline.spans_window(r.conn(), 1, from_ns=10, to_ns=10)


def test_spans_merge_below_resolution_and_keep_long_ones(store) -> None:
    w, r = store
    tiny = [span(f"s{i}", "vllm_generate", "replica_10", i * 1000, i * 1000 + 900) for i in range(1000)]  # 1 µs apart
    long = [
        span("L1", "train_batch", "replica_2", 0, 5 * S),
        span("C1", "actor_update", "replica_2", S, 2 * S, "state_child", "L1"),
    ]
    opened = [span("O1", "vllm_generate", "replica_2", 6 * S, None)]
    w.put_spans(opened, tiny + long)
    assert w.flush(10)
    res = timeline.spans_window(r.conn(), 1, from_ns=0, to_ns=10 * S, resolution_ns=10_000)
    assert res["lanes"] == ["replica_2", "replica_10"]  # numeric, not lexical, order
    merged = [row for row in res["spans"] if row[0] == 1]
    assert len(merged) == 1 and merged[0][5] == 1000 and merged[0][6] is None  # one entry, count 1000, no single id
    rows = {row[2]: row for row in res["spans"] if row[0] == 0}
    assert rows["train_batch"][5] == 1 and rows["train_batch"][6] == "L1" and rows["train_batch"][1] == 0
    assert rows["actor_update"][1] == 1  # nested child drawn one level down
    assert rows["vllm_generate"][7] is True  # open state flagged, drawn up to now
    fine = timeline.spans_window(r.conn(), 1, from_ns=0, to_ns=10 * S, resolution_ns=0)
    assert sum(1 for row in fine["spans"] if row[0] == 1) == 1000
    only = timeline.spans_window(r.conn(), 1, from_ns=0, to_ns=10 * S, lane_names=["replica_2"])
    assert only["lanes"] == ["replica_2"]
    detail = q.span_detail(r.conn(), 1, "L1")
    assert detail["attributes"]["k"] == 1 and detail["open"] is False


def test_late_start_never_reopens_a_finished_span(store) -> None:
    w, r = store
    w.put_spans([], [span("x", "rollout", "replica_0", 0, 10)])
    w.flush(10)
    w.put_spans([span("x", "rollout", "replica_0", 0, None)], [])
    w.flush(10)
    assert q.span_detail(r.conn(), 1, "x")["end_ns"] == 10


def test_chrome_trace_is_valid_and_nested(store) -> None:
    w, r = store
    w.put_spans(
        [span("o", "vllm_generate", "replica_0", 3 * S, None)],
        [
            span("a", "train_batch", "rank_1", 0, 4 * S),
            span("b", "actor_update", "rank_1", S, 3 * S, "state_child", "a"),
            span("c", "vllm_generate", "replica_0", 0, 2 * S),
        ],
    )
    w.flush(10)
    trace = json.loads(json.dumps(q.chrome_trace(r.conn(), 1)))
    names = {e["args"]["name"]: e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert set(names) == {"rank_1", "replica_0"}
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["name"] for e in xs} == {"train_batch", "actor_update", "vllm_generate"}
    parent = next(e for e in xs if e["name"] == "train_batch")
    child = next(e for e in xs if e["name"] == "actor_update")
    assert (
        (parent["pid"], parent["tid"]) == (child["pid"], child["tid"])
        and parent["ts"] <= child["ts"]
        and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"]
    )
    assert parent["dur"] == 4 * S / 1000  # microseconds
    assert any(e["args"].get("open") for e in xs)


def test_chrome_trace_carries_steps(store) -> None:
    """A `steps` track of `step N` slices first, and each slice's step in its args (the step it began in)."""
    w, r = store
    w.put_samples([SampleRow("p", "e", "training_global_step", "gauge", "{}", n, n * 10.0, float(n))
                   for n in (1, 2, 3)])
    w.put_spans([], [span("z", "generate", "rank_0", 2 * S, 5 * S), span("a", "train_batch", "rank_0", 12 * S, 15 * S),
                     span("b", "train_batch", "rank_0", 21 * S, 25 * S)])
    w.flush(10)
    trace = q.chrome_trace(r.conn(), 1)
    procs = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert procs == ["steps", "rank_0"]
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    # step 1 ends at its mark (10 s) and began with the run (its first state, at 2 s)
    assert [(e["name"], e["args"]["step"]) for e in xs if e["cat"] == "step"] == [("step 1", 1), ("step 2", 2),
                                                                                  ("step 3", 3)]
    assert [e["args"]["step"] for e in xs if e["cat"] == "state"] == [1, 2, 3]


def test_csv_export(store) -> None:
    w, r = store
    w.put_samples([SampleRow("p", "e", "loss", "gauge", '{"role":"actor"}', 1.0, 10.0, 0.5),
                   SampleRow("p", "e", "acc", "gauge", "{}", 1.0, 10.0, 0.9),
                   SampleRow("p", "e", "actor_entropy", "gauge", "{}", 1.0, 10.0, 0.7, logged="actor/entropy")])
    w.flush(10)
    text = "".join(q.csv_export(r.conn(), 1, ["loss", "actor_entropy"],
                                extra=[("rl_insight/insight/step/duration_s", "{}", 1, 11.0, 2.5)]))
    # the name as stored (what `names` and Prometheus use), and as the job logged it (what the UI shows; issue 64)
    assert text.splitlines() == ["name,labels,step,timestamp,value,logged_name", "actor_entropy,{},1,10.0,0.7,"
                                 "actor/entropy", 'loss,"{""role"":""actor""}",1,10.0,0.5,loss',
                                 "rl_insight/insight/step/duration_s,{},1,11.0,2.5,rl_insight/insight/step/duration_s"]


def test_data_survives_a_restart(store_at: StoreLocation) -> None:
    w = RunStoreWriter(store_at)
    write_series(w, 50)
    w.put_spans([], [span("a", "rollout", "replica_0", 0, 5)])
    w.close()
    w2 = RunStoreWriter(store_at)
    try:
        r = RunStoreReader(store_at)
        assert q.list_runs(r.conn())[0]["last_step"] == 49.0
        assert q.span_detail(r.conn(), 1, "a")["end_ns"] == 5
        write_series(w2, 60, t0=2_000.0)  # the same run and series continue after the restart
        assert q.metric_names(r.conn(), 1)[0]["samples"] == 110
    finally:
        w2.close()


def test_foreign_and_corrupt_files_are_refused_untouched(tmp_path: Path, foreign_sqlite: ForeignFile) -> None:
    with pytest.raises(StoreError, match="not an rl-insight run store"):
        RunStoreWriter(foreign_sqlite.path)
    assert foreign_sqlite.untouched()

    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\x13garbage" * 500)
    before = corrupt.read_bytes()
    with pytest.raises(StoreError) as err:
        RunStoreWriter(corrupt)
    assert "move it aside" in str(err.value) and corrupt.read_bytes() == before


def test_full_disk_is_reported_not_raised(tmp_path: Path) -> None:
    w = RunStoreWriter(tmp_path / "rs.sqlite", flush_interval_s=0.02)
    try:
        write_series(w, 10)
        pages = w._conn.execute("PRAGMA page_count").fetchone()[0]
        w._conn.execute(f"PRAGMA max_page_count = {pages}")  # the file may not grow: SQLite answers SQLITE_FULL
        since = w.seq()
        w.put_samples([SampleRow("p", "e", f"m{i}", "gauge", "{}", 1.0, 1.0, 1.0) for i in range(20_000)])
        assert w.durable(since).result(10) is False  # what ingest waits on: never acknowledged
        assert w.stats.degraded_since is not None and "full" in (w.stats.last_error or "")
        assert w.stats.by_reason.get("disk_full") == 20_000
        w._conn.execute("PRAGMA max_page_count = 1073741823")
        since = w.seq()
        write_series(w, 20, t0=3_000.0)  # space again: writes resume and the degraded flag clears
        assert w.durable(since).result(10) is True
        assert w.stats.degraded_since is None
        assert q.metric_names(RunStoreReader(tmp_path / "rs.sqlite").conn(), 1)[0]["samples"] == 30
    finally:
        w.close()


def test_retention_by_age_and_by_size(store_at: StoreLocation) -> None:
    w = RunStoreWriter(store_at, retention_days=1.0)
    try:
        for exp in ("old", "mid", "new"):
            write_series(w, 2000, exp=exp)
        with w.conn_lock:  # (not while the writer's thread uses the connection)
            w._conn.execute("UPDATE runs SET last_seen = ? WHERE experiment_name = 'old'", (time.time() - 3 * 86400,))
            w._conn.execute("UPDATE runs SET last_seen = ? WHERE experiment_name = 'mid'", (time.time() - 3600,))
        assert w.prune() == 1
        r = RunStoreReader(store_at)
        assert sorted(x["experiment_name"] for x in q.list_runs(r.conn())) == ["mid", "new"]
        w._max_bytes = w.used_bytes() - 1  # over the size limit: the oldest remaining run goes
        assert w.prune() == 1
        assert [x["experiment_name"] for x in q.list_runs(r.conn())] == ["new"]
    finally:
        w.close()
