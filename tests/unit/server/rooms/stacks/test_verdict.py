"""One verdict from a snapshot's lanes, stacks and flight-recorder entries (server/rooms/stacks/verdict.py): each
class on the evidence that makes it, culprits named, and never an innocent process ahead of a silent lane holder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rl_insight.server.rooms.stacks import groups as sg
from rl_insight.server.rooms.stacks.verdict import decide, sentence
from tests.unit.semantics.test_collectives import rank as fr
from tests.unit.server.rooms.stacks.test_groups import collective, frame, report, sleeping, snapshot


def judged(reports: dict[str, Any], missing: list | None = None, previous: dict | None = None) -> dict[str, Any]:
    snap = snapshot(reports, missing, created_at=200.0)
    sg.summarise(snap, previous, time.time_ns())
    return decide(snap, time.time_ns())


def silent(r: int, beating: bool) -> dict[str, Any]:
    now = time.time_ns()
    return {"host": "node1", "pid": 1000 + r, "rank": r, "lanes": [f"rank_{r}"], "last_seen_ns": now - 3 * 10**9,
            "beating": beating, "open": [{"lane": f"rank_{r}", "state": "train_batch", "since_ns": now - 226 * 10**9}]}


def test_a_silent_lane_holder_comes_first_dead_or_unresponsive() -> None:
    reports = {f"h:{r}": report(r, collective()) for r in range(3)}
    v = judged(reports, [silent(3, beating=False)])
    assert (v["class"], v["culprits"], v["hosts"]) == ("dead_process", ["rank_3"], ["node1"])
    assert v["sentence"] == "hung: a process died: rank_3 on node1; phase training; in step 5."
    v = judged(reports, [silent(3, beating=True)])
    assert v["class"] == "unresponsive" and "still beats but did not answer" in v["evidence"][0]


def test_the_flight_recorder_names_a_desync_and_its_sequence_number() -> None:
    reports = {f"h:{r}": {**report(r, collective()), "flight_recorder": fr(3, 2, {3: ("broadcast", [[8]])} if r == 2
                                                                          else None)} for r in range(4)}
    v = judged(reports)
    assert (v["class"], v["culprits"]) == ("desync", ["rank_2"])
    assert v["collective"] == {"op": "all_reduce", "seq": 3, "pg": "default_pg", "sizes": "[[4]]"}


def test_the_flight_recorder_names_the_late_rank_and_where_it_is() -> None:
    reports = {f"h:{r}": {**report(r, sleeping() if r == 1 else collective()),
                          "flight_recorder": fr(2 if r == 1 else 3, 2)} for r in range(4)}
    v = judged(reports)
    assert (v["class"], v["culprits"], v["collective"]["seq"]) == ("late_rank", ["rank_1"], 3)
    assert "rank_1 is in `load_batch` at job/train.py:41" in v["next"][0]


def test_stacks_alone_name_the_odd_one_out_or_say_they_cannot() -> None:
    v = judged({f"h:{r}": report(r, sleeping() if r == 2 else collective()) for r in range(4)})
    assert (v["class"], v["culprits"], v["collective"]["op"]) == ("late_rank", ["rank_2"], "all_reduce")
    v = judged({f"h:{r}": report(r, collective()) for r in range(4)})
    assert (v["class"], v["culprits"]) == ("in_collective", []) and "flight recorder" in v["next"][0]
    other = collective()[:-1] + [frame(collective()[-1]["file"], 2620, "broadcast")]
    v = judged({f"h:{r}": report(r, other if r == 3 else collective()) for r in range(4)})
    assert (v["class"], v["culprits"], v["collective"]["op"]) == ("desync", ["rank_3"], "all_reduce")
    assert v["evidence"] == ["3 of 4 lane holders wait in all_reduce; rank_3 in broadcast"]


def test_stuck_outside_the_collectives_and_slow_but_healthy() -> None:
    engine = [frame("/job/rollout.py", 5, "generate"), frame("/venv/lib/python3.11/site-packages/vllm/engine/"
                                                             "llm_engine.py", 900, "step")]
    reports = {f"h:{r}": report(r, engine) for r in range(2)}
    for rep in reports.values():
        rep["threads"][0]["lanes"] = [{"lane": f"replica_{rep['process']['rank']}", "state": "generate_sequences",
                                       "since_ns": 1}]
    v = judged(reports)
    assert v["class"] == "not_collective" and v["phase"] == "rollout" and v["culprits"] == ["replica_0", "replica_1"]
    before = snapshot({f"h:{r}": report(r, collective()) for r in range(2)}, created_at=100.0)
    sg.summarise(before, None, time.time_ns())
    v = judged({f"h:{r}": report(r, collective(0, 3300) if r == 0 else collective()) for r in range(2)},
               previous=before)
    assert v["class"] == "slow_healthy" and "rank_0 moved" in v["evidence"][-1]


def test_a_run_within_its_usual_times_is_not_stuck_whatever_the_stacks_show() -> None:
    """Issue 64: `diagnose` on a healthy job named culprits (the stacks of a job at work differ, mid-step, rank by
    rank). When the stall watch's latest look found every lane within its usual time, the verdict is `not_stuck`
    with no culprit, no odd one out, and a calm summary — a late-looking rank, a silent process and all."""
    reports = {f"h:{r}": report(r, sleeping() if r == 2 else collective()) for r in range(4)}
    for usual, expected in ((True, "not_stuck"), (False, "late_rank"), (None, "late_rank")):
        snap = snapshot(reports, [silent(5, beating=True)], created_at=200.0)
        snap["lanes_usual"] = usual
        sg.summarise(snap, None, time.time_ns())
        v = decide(snap, time.time_ns())
        assert v["class"] == ("unresponsive" if expected == "late_rank" else expected), (usual, v)
        if usual is True:
            assert v["culprits"] == [] and v["hosts"] == [] and v["collective"] is None
            assert v["sentence"].startswith("not stuck: every lane is within its usual time")
            assert not any(g["odd_one_out"] for g in snap["groups"])
            assert snap["summary"].startswith("Not stuck") and "odd one" not in snap["summary"] and \
                "likely hang" not in snap["summary"]
            assert "4 of 5 processes answered" in v["evidence"][1]


def test_evidence_says_what_is_known_of_a_state_whose_name_never_arrived() -> None:
    """Issue 64: "holding : the process is gone" for a lane whose state's name was unknown."""
    reports = {f"h:{r}": report(r, collective()) for r in range(3)}
    nameless = silent(3, beating=False)
    nameless["open"] = [{"lane": "rank_3", "state": "", "since_ns": time.time_ns() - 90 * 10**9}]
    v = judged(reports, [nameless])
    assert v["class"] == "dead_process" and "holding :" not in v["evidence"][0], v["evidence"]
    assert "holding its lane rank_3 for 90 s (state unknown): the process is gone" in v["evidence"][0]
    bare = silent(3, beating=False)
    bare["open"] = []
    v = judged(reports, [bare])
    assert "stopped beating: the process is gone" in v["evidence"][0], v["evidence"]


def test_the_classes_are_described_once_and_the_ui_reads_them_from_the_server(tmp_path: Path) -> None:
    """Issue 65: the classes lived in a Literal, a words table, HANG_CLASSES and a hand copy in the UI's JS. Now one
    table (verdict_classes.py): the Literal names the same classes, every class has its sentence, the UI's scripts
    name none of them, and the session answer carries the table they read."""
    from typing import get_args

    from fastapi.testclient import TestClient

    from rl_insight.server.app import create_app
    from rl_insight.server.config import ServerConfig
    from rl_insight.server.rooms.stacks import verdict_classes
    from rl_insight.server.rooms.stacks.records import VerdictClass
    from rl_insight.server.ui import STATIC
    from tests.conftest import IN_PROCESS

    names = [k.name for k in verdict_classes.CLASSES]
    assert set(get_args(VerdictClass)) == set(names) and len(names) == len(set(names))
    for name in names:
        v = {"class": name, "culprits": ["rank_2"], "hosts": ["h"], "collective": None, "phase": None, "step": 4}
        assert sentence(v).startswith(verdict_classes.BY_NAME[name].words)
    for script in STATIC.glob("*.js"):
        said = [n for n in names if n != "unknown" and f'"{n}"' in script.read_text()]  # ("unknown": any state's)
        assert said == [], f"{script.name} names verdict classes {said}: read them from the session answer"
    app = create_app(ServerConfig(port=1, host="127.0.0.1", data_dir=str(tmp_path), **IN_PROCESS))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        table = client.get("/api/v1/session").json()["verdict_classes"]
    assert list(table) == names and table["late_rank"] == {"words": "hung: a rank never reached the collective",
                                                           "hang": True, "names_culprits": True}
    assert [n for n in names if table[n]["hang"]] == list(verdict_classes.HANG_CLASSES)
