"""Stack snapshot contract (rl_insight/protocol/stacks.py): the request rides on replies, the answer is validated
once, and hostile answers are bounded or refused with a reason."""

from __future__ import annotations

import json

import pytest

from rl_insight.protocol import IngestReply, RunControl, StackRequest, decode_stack_report
from rl_insight.protocol.stacks import MAX_FRAME_FILE, MAX_STACK_FRAMES, MAX_STACK_THREADS


def _report(**over: object) -> dict:
    body = {"process": {"host": "h", "pid": 7, "rank": 2, "lanes": ["rank_2"], "roles": []}, "taken_ns": 1,
            "step": 3, "rss_bytes": 100, "cpu_s": 1.5, "native_state": "not_asked", "native_message": "",
            "threads": [{"id": 1, "name": "MainThread", "main": True, "sender": False, "daemon": False,
                         "lanes": [{"lane": "rank_2", "state": "actor_update", "since_ns": 5}],
                         "frames": [{"file": "/x/job.py", "line": 41, "func": "main", "code": "time.sleep(9)"}]}]}
    body.update(over)  # type: ignore[arg-type]
    return body


def test_a_request_rides_on_replies_and_is_read_back() -> None:
    req = StackRequest("ab12", lanes=("rank_2",), ranks=(2, 3), native=True, expires_at=2e9)
    wire = json.loads(json.dumps(IngestReply(control=RunControl([], stacks=[req])).to_wire()))
    got = IngestReply.from_wire(wire).control.stacks
    assert [r.to_wire() for r in got] == [req.to_wire()]
    assert "stacks" not in IngestReply().to_wire()  # nothing pending: the reply is as before


def test_a_malformed_request_in_a_reply_never_hides_the_others() -> None:
    good = StackRequest("cd34").to_wire()
    got = RunControl.from_wire({"stacks": [{"id": "NOT HEX"}, 7, good, {"id": "ef", "ranks": [-1]}]}).stacks
    assert [r.id for r in got] == ["cd34"]


@pytest.mark.parametrize("bad, says", [
    ({"id": "x" * 40}, "hex"),
    ({"id": "ab", "ranks": ["1"]}, "ranks"),
    ({"id": "ab", "lanes": "rank_1"}, "lanes"),
    ({"id": "ab", "expires_at": float("nan")}, "expires_at"),
])
def test_request_validation_names_the_problem(bad: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        StackRequest.from_wire(bad)


def test_selectors_follow_the_profile_rule() -> None:
    assert StackRequest("a").matches([], [], None)  # no selector: every process
    assert StackRequest("a", ranks=(3,)).matches([], [], 3)
    assert not StackRequest("a", ranks=(3,)).matches(["rank_3"], [], None)  # a lane named rank_3 is not rank 3
    assert StackRequest("a", roles=("actor-rollout",)).matches([], ["actor_rollout"], None)


def test_a_report_is_kept_as_sent_when_it_is_valid() -> None:
    rep = decode_stack_report(_report())
    t = rep["threads"][0]
    assert rep["process"]["rank"] == 2 and rep["step"] == 3 and rep["cpu_s"] == 1.5
    assert t["lanes"] == [{"lane": "rank_2", "state": "actor_update", "since_ns": 5}]
    assert t["frames"] == [{"file": "/x/job.py", "line": 41, "func": "main", "code": "time.sleep(9)"}]


def test_hostile_reports_are_bounded_not_trusted() -> None:
    frames = [{"file": "f" * 100_000, "line": 2**80, "func": "\udcff" * 3}] * (MAX_STACK_FRAMES + 50)
    threads = [{"id": i, "name": "n", "frames": frames} for i in range(MAX_STACK_THREADS + 5)]
    rep = decode_stack_report(_report(threads=threads, cpu_s=float("inf"), rss_bytes=-5, step=2**70))
    assert len(rep["threads"]) == MAX_STACK_THREADS and rep["truncated_threads"] == 5
    f = rep["threads"][0]["frames"]
    assert len(f) == MAX_STACK_FRAMES and len(f[0]["file"]) == MAX_FRAME_FILE
    assert f[0]["line"] == 0 and f[0]["func"] == "\ufffd" * 3  # out of range: 0; undecodable text replaced
    assert rep["cpu_s"] is None and rep["rss_bytes"] is None and rep["step"] is None
    json.dumps(rep)  # what is stored is plain, valid JSON


@pytest.mark.parametrize("body, says", [
    ([], "JSON object"),
    ({"threads": [{}]}, "process"),
    (_report(threads=[]), "threads"),
    (_report(threads="x"), "threads"),
    (_report(threads=[{"frames": "x"}]), "frames"),
    (_report(threads=[{"frames": [7]}]), "frame"),
    (_report(process={"host": "h", "pid": 1, "rank": -3}), "rank"),
    (_report(native_state="maybe"), "native_state"),
])
def test_unusable_reports_are_refused_with_the_reason(body: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        decode_stack_report(body)
