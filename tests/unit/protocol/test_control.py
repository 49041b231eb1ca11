"""What every kind of control request shares (protocol/control.py, reply.CONTROL_KINDS): the one selector rule and
its one validation, and a reply that carries every registered kind, a new one by one entry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rl_insight.protocol import ProfileRequest, RunControl, StackRequest, reply
from rl_insight.protocol.control import MAX_SELECTORS, Selector, request_id


def test_the_selector_rule() -> None:
    assert Selector().picks(["x"], [], None) and not Selector()  # none named: every process
    s = Selector(lanes=("rollout/replica_1",), roles=("reward-model",), ranks=(3,))
    assert s.picks(["rollout/replica_1"], [], None)  # any lane named
    assert s.picks([], ["reward_model"], None)  # a role, - and _ alike
    assert s.picks([], [], 3) and not s.picks([], [], 4) and not s.picks(["other"], ["actor"], None)
    assert s.describe() == "lanes rollout/replica_1 or roles reward-model or ranks 3"
    assert Selector().describe() == "every process"


@pytest.mark.parametrize("body, message", [
    ({"lanes": "rank_0"}, "lanes must be a list"),
    ({"roles": ["x"] * (MAX_SELECTORS + 1)}, "roles must be a list of at most"),
    ({"ranks": [-1]}, "ranks must be a list of non-negative integers"),
    ({"ranks": [True]}, "ranks must be a list of non-negative integers"),
    ({"lanes": [""]}, "lanes"),
    ({"lanes": ["x" * 5000]}, "lanes"),
])
def test_one_validation_for_every_kind(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Selector.from_wire(body)
    # both kinds read their selector with it: the same words for the same mistake
    with pytest.raises(ValueError, match=message):
        StackRequest.from_wire({"id": "ab", **body})
    with pytest.raises(ValueError, match=message):
        ProfileRequest.from_wire({"id": "ab", "project": "p", "experiment_name": "e", "steps": [1, 1],
                                  "activities": ["cpu"], **body})


def test_a_request_id_is_short_lowercase_hex() -> None:
    assert request_id({"id": "00ff"}, "x") == "00ff"
    for bad in ("", "AB", "zz", "a" * 33, 7, None):
        with pytest.raises(ValueError, match="x id must be 1-32 lowercase hex digits"):
            request_id({"id": bad}, "x")


def test_each_kind_round_trips_through_a_reply() -> None:
    profile = ProfileRequest("ab", "p", "e", 3, 3, lanes=("actor/rank_0",), expires_at=2e9)
    stacks = StackRequest("cd", ranks=(1, 2), native=True, expires_at=2e9)
    wire = json.loads(json.dumps(RunControl([profile], 7, 1.5, [stacks]).to_wire()))
    got = RunControl.from_wire(wire)
    assert [r.to_wire() for r in got.profile or []] == [profile.to_wire()]
    assert [r.to_wire() for r in got.stacks] == [stacks.to_wire()] and got.stacks[0].selector == stacks.selector
    assert (got.run_step, got.run_step_at) == (7, 1.5)
    # profile lists are authoritative even empty; nothing pending of a kind that says so by absence is not sent
    assert RunControl([], stacks=[]).to_wire() == {"profile": []}
    assert RunControl.from_wire({}).profile is None and RunControl.from_wire({}).stacks == []


class _Dump:
    """A third kind, as a later feature would add one (e.g. a memory snapshot)."""

    def __init__(self, rid: str, selector: Selector) -> None:
        self.id, self.selector, self.expires_at = rid, selector, 0.0

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, **self.selector.to_wire()}

    @classmethod
    def from_wire(cls, d: Any) -> _Dump:
        if not isinstance(d, dict):
            raise ValueError("a dump request must be an object")
        return cls(request_id(d, "dump request"), Selector.from_wire(d))

    def matches(self, lanes: Any, roles: Any, rank: int | None) -> bool:
        return self.selector.picks(lanes, roles, rank)


def test_a_new_kind_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reply, "CONTROL_KINDS", (*reply.CONTROL_KINDS, reply.ControlKind("dumps", _Dump, False)))
    sent = RunControl(requests={"profile": [], "stacks": [], "dumps": [_Dump("ef", Selector(ranks=(0,)))]})
    wire = json.loads(json.dumps(sent.to_wire()))
    assert wire == {"profile": [], "dumps": [{"id": "ef", "lanes": [], "roles": [], "ranks": [0]}]}
    got = RunControl.from_wire({**wire, "dumps": [*wire["dumps"], {"id": "NOT HEX"}]})  # a bad entry is skipped
    dumps = got.requests["dumps"] or []
    assert [d.id for d in dumps] == ["ef"] and dumps[0].matches([], [], 0) and not dumps[0].matches([], [], 1)
