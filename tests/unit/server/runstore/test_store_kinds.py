"""The run store's contract, kind by kind: what a writer is handed, each kind's reader (`reader.runs`, `.samples`,
`.spans`, `.steps`) gives back — on every implementation (`kinds`: a SQLite file, a real PostgreSQL database, and
the in-memory store, backend/memory.py). A store of one kind on another engine (a ClickHouse span store,
docs/architecture.md) is one package plus its kind's test here passing against it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from rl_insight.errors import NotFoundError
from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore.backend.location import parse_store, sqlite_location
from rl_insight.server.runstore.backend.memory import forget_memory_store, memory_location
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter

S = 10**9


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def kinds(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RunStoreWriter, RunStoreReader]]:
    """A writer and a reader on each implementation: a SQLite file, a real PostgreSQL database, and in memory."""
    name = f"kinds-{uuid.uuid4().hex}"
    where = {"sqlite": lambda: sqlite_location(tmp_path / "rs.sqlite"),
             "postgresql": lambda: parse_store(request.getfixturevalue("postgres_url"), tmp_path),
             "memory": lambda: memory_location(name)}[request.param]()
    w = RunStoreWriter(where, flush_interval_s=0.02)
    yield w, RunStoreReader(where)
    w.close()
    forget_memory_store(name)


def _flushed(w: RunStoreWriter) -> None:
    assert w.flush(30) and w.stats.dropped == 0, w.stats


def _run_id(r: RunStoreReader, experiment: str = "e") -> int:
    found = r.runs.find_id("p", experiment)
    assert found is not None
    return found


def test_runs_are_made_by_what_names_them_and_keep_their_config_tags_and_end(kinds) -> None:
    w, r = kinds
    w.put_heard("p", "e")
    w.put_run_info("p", "e", {"lr": 1e-6, "algo": "grpo"}, ["baseline"])
    w.put_heard("p", "other")
    _flushed(w)
    run = r.runs.get(_run_id(r), include_config=True)
    assert (run["project"], run["experiment_name"], run["tags"], run["config"]) == \
        ("p", "e", ["baseline"], {"lr": 1e-6, "algo": "grpo"})
    assert run["status"] == "live" and run["last_step"] is None
    assert r.runs.project_of(_run_id(r)) == "p"
    assert sorted(x["experiment_name"] for x in r.runs.of_project(project="p")) == ["e", "other"]
    w.put_run_info("p", "e", {"lr": 2e-6}, [])  # the latest description wins
    w.mark_finished("p", "other", {"reason": "no process heard for 60 s", "lanes": ["rollout_0"]})
    w.mark_finished("p", "e", None)
    _flushed(w)
    run = r.runs.get(_run_id(r), include_config=True)
    assert (run["config"], run["tags"], run["status"]) == ({"lr": 2e-6}, [], "finished")
    lost = r.runs.get(_run_id(r, "other"))
    assert lost["status"] == "lost" and lost["lost"]["lanes"] == ["rollout_0"]
    assert r.runs.find_id("p", "nobody") is None
    with pytest.raises(NotFoundError):
        r.runs.get(10**6)


def test_samples_are_stored_once_a_counter_summed_across_its_processes_and_read_back_by_series(kinds) -> None:
    w, r = kinds
    gauge = [SampleRow("p", "e", "reward", "gauge", "{}", float(i), 1_000.0 + i, i / 10) for i in range(5)]
    w.put_samples(gauge)
    w.put_samples(gauge[2:])  # a resend: stored once
    # a counter from two processes, each its own running value, at times of its own
    w.put_samples([SampleRow("p", "e", "tokens", "counter", "{}", float(i), 1_000.0 + i, v, client=c)
                   for i, (c, v) in enumerate([("host0:1", 10.0), ("host1:2", 1.0), ("host0:1", 20.0),
                                               ("host1:2", 2.0)])])
    _flushed(w)
    run_id = _run_id(r)
    names = {m["name"]: m for m in r.samples.names(run_id)}
    assert (names["reward"]["samples"], names["reward"]["last_step"], names["reward"]["kind"]) == (5, 4.0, "gauge")
    assert names["tokens"]["kind"] == "counter"
    (reward,) = r.samples.series(run_id, "reward", agg="none")["series"]
    assert reward["points"] == [[float(i), i / 10] for i in range(5)]
    (tokens,) = r.samples.series(run_id, "tokens", agg="none")["series"]
    assert [p[1] for p in tokens["points"]] == [10.0, 11.0, 21.0, 22.0]  # both processes' latest values, summed
    assert r.runs.get(run_id)["last_step"] == 4.0
    csv = r.samples.csv(run_id, ["reward"])
    assert "".join(csv).count("\n") == 1 + 5


def test_spans_start_end_and_are_read_by_lane_window_detail_and_trace(kinds) -> None:
    w, r = kinds
    attrs = {"project": "p", "experiment_name": "e"}
    gen = SpanRecord("s1", "t1", None, "generate", "rollout_0", "state", 1_000 * S, None, {**attrs, "n": 1})
    train = SpanRecord("s2", "t2", None, "update_actor", "trainer_0", "state", 1_001 * S, 1_003 * S, dict(attrs))
    w.put_spans([gen], [train])
    _flushed(w)
    run_id = _run_id(r)
    assert r.spans.detail(run_id, "s1")["open"] is True
    w.put_spans([], [SpanRecord("s1", "t1", None, "generate", "rollout_0", "state", 1_000 * S, 1_002 * S,
                                {**attrs, "n": 1})])
    w.put_spans([gen], [])  # a late start never reopens the ended span
    cut = SpanRecord("s2", "t2", None, "update_actor", "trainer_0", "state", 1_001 * S, 1_009 * S,
                     {**attrs, "cut_short": True})
    w.put_spans([], [cut])  # a span cut short never overwrites an end already stored
    _flushed(w)
    detail = r.spans.detail(run_id, "s1")
    assert (detail["open"], detail["end_ns"], detail["attributes"]["n"]) == (False, 1_002 * S, 1)
    assert r.spans.detail(run_id, "s2")["end_ns"] == 1_003 * S
    assert [lane["lane"] for lane in r.spans.lanes(run_id)] == ["rollout_0", "trainer_0"]
    window = r.spans.window(run_id, from_ns=999 * S, to_ns=1_005 * S, resolution_ns=1, px=1000, lane_names=None,
                            limit=100, live_window_s=60)
    at = {c: i for i, c in enumerate(window["columns"])}
    assert sorted((row[at["span_id"]], row[at["start_ns"]], row[at["end_ns"]]) for row in window["spans"]) == \
        [("s1", 1_000 * S, 1_002 * S), ("s2", 1_001 * S, 1_003 * S)]
    trace = json.loads("".join(r.spans.chrome_trace(run_id)))  # (Perfetto's JSON, streamed in pieces)
    assert {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"} >= {"generate", "update_actor"}
    with pytest.raises(NotFoundError):
        r.spans.detail(run_id, "nope")


def test_steps_are_read_from_the_step_metric_each_ending_at_its_sample(kinds) -> None:
    w, r = kinds
    w.put_samples([SampleRow("p", "e", "training_global_step", "gauge", "{}", float(i), 1_000.0 + 10 * i, float(i))
                   for i in (1, 2, 3)])
    w.put_spans([], [SpanRecord("s1", "t1", None, "generate", "rollout_0", "state", 995 * S, 999 * S,
                                {"project": "p", "experiment_name": "e"})])
    _flushed(w)
    run_id = _run_id(r)
    windows = r.steps.windows(run_id, "training/global_step")
    assert windows == [(1, 995 * S, 1_010 * S), (2, 1_010 * S, 1_020 * S), (3, 1_020 * S, 1_030 * S)]
    assert r.steps.median_s(run_id, "training/global_step") == 10.0


def test_the_step_is_stored_once_each_at_its_earliest_mark_and_never_moved_by_a_resend_or_a_restart(kinds) -> None:
    w, r = kinds
    step = lambda ts, v: SampleRow("p", "e", "training_global_step", "gauge", "{}", None, ts, v)  # noqa: E731
    w.put_samples([step(1_020.0, 2.0), step(1_010.0, 1.0), step(1_030.0, 3.0)])  # (out of order)
    w.put_spans([], [SpanRecord("s1", "t1", None, "generate", "rollout_0", "state", 995 * S, 999 * S,
                                {"project": "p", "experiment_name": "e"})])  # the run began before step 1 ended
    _flushed(w)
    w.put_samples([step(1_020.0, 2.0), step(1_025.0, 2.0),  # a resend; another process saying step 2 later
                   step(1_031.0, float("inf")), step(1_032.0, 2.0**60),  # no step: not finite; past 2**53
                   step(1_040.0, 1.0), step(1_050.0, 4.5)])  # a restart logging step 1 again; a fraction: step 4
    _flushed(w)
    w.put_samples([step(1_030.0, 9.0)])  # a copy of a stored sample's time with another value: not stored
    _flushed(w)
    run_id = _run_id(r)
    assert r.steps.marks(run_id, "training_global_step") == [(1_010.0, 1), (1_020.0, 2), (1_030.0, 3), (1_050.0, 4)]
    assert [w_[0] for w_ in r.steps.windows(run_id, "training/global_step")] == [1, 2, 3, 4]
    assert r.steps.median_s(run_id, "training/global_step") == 10.0  # the clock's moves (the restart moves none)


def test_a_metric_the_writer_does_not_mark_is_read_from_its_samples_by_the_same_rule(kinds) -> None:
    w, r = kinds
    w.put_samples([SampleRow("p", "e", "my_step", "gauge", "{}", None, 1_000.0 + 10 * i, float(i)) for i in (1, 2, 3)])
    w.put_spans([], [SpanRecord("s1", "t1", None, "generate", "rollout_0", "state", 995 * S, 999 * S,
                                {"project": "p", "experiment_name": "e"})])
    _flushed(w)
    run_id = _run_id(r)
    assert r.steps.marks(run_id, "training_global_step") == []
    assert r.steps.marks(run_id, "my_step") == [(1_010.0, 1), (1_020.0, 2), (1_030.0, 3)]
    assert [x[0] for x in r.steps.windows(run_id, "my_step")] == [1, 2, 3]
