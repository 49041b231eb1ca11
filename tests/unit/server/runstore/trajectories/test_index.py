"""The trajectory index inside the run store's writer: what each span says (server/runstore/trajectories/facts.py), a
failure of the
index never costing the spans, hostile session payloads, retention, and a store written by schema 2 upgraded."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from rl_insight.protocol import SpanRecord
from rl_insight.server.runstore.backend.location import StoreLocation
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.trajectories import facts as tr
from rl_insight.server.runstore.trajectories import queries as tq
from rl_insight.server.runstore.writer import RunStoreWriter

LANE = "experiment=e/sample=1/session=s/traj=0"


def span(i: str, name: str, start: int, end: int | None, lane: str = LANE, exp: str = "e", **attrs) -> SpanRecord:
    return SpanRecord(
        i, "t" * 32, None, name, lane, "span", start, end, {"project": "p", "experiment_name": exp, **attrs}
    )


def gateway(i: str, start: int, **attrs) -> SpanRecord:
    return span(
        i, "gateway_generation", start, start + 1000, **{"monitor.trace_source": "gateway", "global_steps": 4, **attrs}
    )


@pytest.fixture
def store(store_at: StoreLocation):
    w = RunStoreWriter(store_at, flush_interval_s=0.02)
    yield w, RunStoreReader(store_at)
    w.close()


def test_facts_name_what_each_span_is_and_ignore_the_rest() -> None:
    assert tr.facts(span("a", "train_batch", 0, 10, lane="rank_0")) == []
    assert tr.facts(span("b", "x", 0, None, **{"monitor.trace_source": "gateway"})) == []  # still open
    (turn,) = tr.facts(gateway("c", 5, prompt_tokens="12", completion_tokens=3.0, error="None"))
    assert (turn.kind, turn.step, turn.tokens_in, turn.tokens_out, turn.error) == ("generate", 4, 12, 3, None)
    (tool,) = tr.facts(
        span("d", "agent_tool", 0, 9, **{"monitor.trace_source": "tool", "tool": "search", "status": "error"})
    )
    assert (tool.kind, tool.name, tool.error) == ("tool", "search", "error")
    huge = span(
        "e",
        "g",
        0,
        1,
        lane="rank_0",
        **{"mlflow.spanType": "LLM", "step": 2**80, "gen_ai.usage.prompt_tokens": float("nan")},
    )
    (g,) = tr.facts(huge)
    assert (g.step, g.tokens_in, g.traj_key) == (
        None,
        None,
        "trace:" + "t" * 32,
    )  # out-of-range numbers are unknown, not errors


def test_hostile_session_payloads_are_bounded(store) -> None:
    w, r = store
    listed = json.dumps([{"traj": i, "reward": "inf", "turns": "x"} for i in range(10_000)])
    w.put_spans(
        [],
        [
            span(
                "s1",
                "agent_session",
                0,
                10,
                **{"monitor.trace_source": "session", "status": "success", "trajectories": listed},
            ),
            span(
                "s2",
                "agent_session",
                0,
                10,
                lane=LANE.replace("sample=1", "sample=2"),
                **{"monitor.trace_source": "session", "trajectories": "{not json"},
            ),
        ],
    )
    assert w.flush(10)
    rows = tq.page(r.conn(), 1, None, limit=500)
    assert (
        rows["total"] == tr.MAX_SESSION_TRAJECTORIES + 1
    )  # the list is capped; the broken one falls back to its own lane
    assert {t["reward"] for t in rows["trajectories"]} == {None}


def test_an_index_failure_costs_no_span_and_is_counted(store, monkeypatch) -> None:
    w, r = store

    def broken(_span):
        raise RuntimeError("indexer bug")
    monkeypatch.setattr("rl_insight.server.runstore.trajectories.index.facts", broken)
    w.put_spans([], [gateway("g1", 1), gateway("g2", 2)])
    assert w.flush(10)
    assert r.conn().execute("SELECT count(*) FROM spans").fetchone()[0] == 2
    assert w.stats.by_reason["trajectory_index"] == 2 and "indexer bug" in w.stats.last_error
    monkeypatch.undo()
    w.put_spans([], [gateway("g3", 3)])
    assert w.flush(10)
    assert tq.page(r.conn(), 1, 4)["trajectories"][0]["turns"] == 1  # the index works again for what comes next


def test_retention_deletes_a_runs_trajectories_turns_and_requests(store) -> None:
    w, r = store
    w.put_spans(
        [],
        [
            gateway("g1", 1, request_id="q1"),
            gateway("g2", 2, exp="other"),
            span(
                "v",
                "llm_request",
                0,
                5,
                lane="vllm",
                **{"gen_ai.request.id": "q1", "gen_ai.latency.time_in_queue": 0.1},
            ),
        ],
    )
    assert w.flush(10)
    with w.conn_lock:  # (not while the writer's thread uses the connection)
        w._conn.execute("UPDATE runs SET last_seen = ? WHERE experiment_name = 'e'", (time.time() - 90 * 86400,))
    assert w.prune() == 1
    c = r.conn()
    assert [x[0] for x in c.execute("SELECT key FROM trajectories")] == [LANE + "#step=4"]  # upstream's lane + the step
    assert c.execute("SELECT count(*) FROM turns").fetchone()[0] == 1
    assert c.execute("SELECT count(*) FROM llm_requests").fetchone()[0] == 0


def test_a_schema_2_store_gains_the_trajectory_tables(tmp_path: Path) -> None:
    path = tmp_path / "rs.sqlite"
    w = RunStoreWriter(path)
    w.close()
    c = sqlite3.connect(path)
    c.executescript("DROP TABLE turns; DROP TABLE trajectories; DROP TABLE llm_requests; PRAGMA user_version=2;")
    c.close()
    w = RunStoreWriter(path)
    try:
        w.put_spans([], [gateway("g1", 1)])
        assert w.flush(10)
        assert tq.steps(RunStoreReader(path).conn(), 1) == {"steps": [4], "without_step": False}
    finally:
        w.close()


def test_the_steps_list_is_every_step_with_trajectories_newest_first(store) -> None:
    w, r = store
    spans = [span(f"g{i}", "gateway_generation", 10 * i, 10 * i + 5, lane=f"{LANE[:-1]}{i}",
                  **{"monitor.trace_source": "gateway", "global_steps": step})
             for i, step in enumerate((1, 2, 3, 5, 5, 2))]
    w.put_spans([], spans)
    assert w.flush(10)
    assert tq.steps(r.conn(), 1) == {"steps": [5, 3, 2, 1], "without_step": False}
    w.put_spans([], [span("late", "gateway_generation", 100, 200, lane=f"{LANE[:-1]}9",
                          **{"monitor.trace_source": "gateway"})])  # a trajectory before the run had a step
    assert w.flush(10)
    assert tq.steps(r.conn(), 1)["without_step"] is True


def test_a_turns_text_is_stored_readable_and_bounded(store, monkeypatch) -> None:
    """Prompts, responses and tool payloads (issue 49 item 21): kept with their turn, each cut at 4,096 characters
    (marked), never the stored JSON itself (cut at 2,048 characters, a long tool argument made it unreadable); one
    answer holds at most TEXT_PER_ANSWER characters of text, the later turns' left out and said so."""
    w, r = store
    prompt = "<script>alert(1)</script> " + "p" * 3000  # (text: the UI shows it as text)
    args = json.dumps({"query": "q" * 3000})
    w.put_spans([], [
        gateway("g1", 1, prompt=prompt, response="r" * 9000, finish_reason="stop"),
        span("t1", "agent_tool", 2000, 3000, **{"monitor.trace_source": "tool", "global_steps": 4, "tool": "search",
                                               "tool_args": args, "tool_result": "ok"}),
    ])
    assert w.flush(10)
    (traj,) = tq.page(r.conn(), 1, 4)["trajectories"]
    turns = tq.detail(r.conn(), 1, traj["id"])["turn_list"]
    assert turns[0]["detail"]["prompt"] == prompt and turns[0]["detail"]["finish_reason"] == "stop"
    assert len(turns[0]["detail"]["response"]) == 4096 and turns[0]["detail"]["response"].endswith("…")
    assert turns[1]["detail"]["tool_args"] == args and turns[1]["detail"]["tool_result"] == "ok"
    # the answer's text budget: the first turn's text fits, the second's is left out and marked
    monkeypatch.setattr(tq, "TEXT_PER_ANSWER", len(prompt) + 4096 + 10)
    turns = tq.detail(r.conn(), 1, traj["id"])["turn_list"]
    assert "prompt" in turns[0]["detail"] and "tool_args" not in turns[1]["detail"]
    assert turns[1]["detail"]["text_left_out"] is True
    # a detail an older version stored cut (not JSON) reads as none instead of failing the whole answer
    with w.conn_lock:
        w._conn.execute("UPDATE turns SET detail = '{\"tool_args\": \"qqq' WHERE kind = 'tool'")
    assert tq.detail(r.conn(), 1, traj["id"])["turn_list"][1]["detail"] == {}
