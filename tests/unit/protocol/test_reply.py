"""The ingest reply (rl_insight/protocol/reply.py): what the server writes is what a client reads, and a client
reads any server's answer (older, newer, confused) without raising."""

from __future__ import annotations

import json

import pytest

from rl_insight.protocol import (
    DEFAULT_PROFILE_ACTIVITIES,
    DEFAULT_PROFILE_WINDOW_S,
    PROTOCOL_VERSIONS,
    IngestReply,
    ProfileRequest,
    RunControl,
)


def _request(rid: str = "ab12", first: int = 3, last: int = 4) -> ProfileRequest:
    return ProfileRequest(rid, "p", "e", first, last, ranks=(1,), expires_at=2e9)


def test_what_the_server_writes_the_client_reads() -> None:
    sent = IngestReply(7, 2, [{"section": "samples", "index": 3, "reason": "non_finite", "message": "m"}], "boot-1", 1,
                       PROTOCOL_VERSIONS, RunControl([_request()], 41, 1.7e9), "detail")
    wire = json.loads(json.dumps(sent.to_wire()))  # through JSON, as over HTTP
    got = IngestReply.from_wire(wire, sent=9)
    assert (got.accepted, got.rejected, got.boot_id, got.replaced_strings, got.detail) == (7, 2, "boot-1", 1, "detail")
    assert got.protocols == PROTOCOL_VERSIONS and got.errors == sent.errors
    assert got.control.run_step == 41 and got.control.run_step_at == 1.7e9
    assert got.control.profile is not None and [r.to_wire() for r in got.control.profile] == [_request().to_wire()]


def test_the_wire_keys_are_those_older_clients_read() -> None:
    wire = IngestReply(1, 0, [], "b", 0, (1, 2), RunControl([_request()], 5, 1.0)).to_wire()
    assert set(wire) == {"accepted", "rejected", "errors", "boot_id", "replaced_strings", "protocols", "profile",
                         "run_step", "run_step_at"}
    assert wire["profile"][0]["steps"] == [3, 4]
    assert "profile" not in IngestReply().to_wire() and "run_step" not in IngestReply().to_wire()


def test_a_server_that_does_not_profile_is_told_apart_from_one_with_nothing_to_ask() -> None:
    assert IngestReply.from_wire({"accepted": 1}, 1).control.profile is None
    assert IngestReply.from_wire({"accepted": 1, "profile": []}, 1).control.profile == []


@pytest.mark.parametrize("body", [None, [], "text", 12, {"accepted": "many"}, {"rejected": -4}, {"rejected": 10**30},
                                  {"protocols": "2"}, {"protocols": [2, "x", None]}, {"boot_id": 12},
                                  {"errors": "e"}, {"run_step": -1}, {"run_step": 2.5}, {"run_step": True},
                                  {"profile": "all"}, {"profile": [None, 1, {"id": "NOT HEX"}]}])
def test_any_answer_reads_without_raising_and_without_impossible_counts(body: object) -> None:
    got = IngestReply.from_wire(body, sent=10)
    assert 0 <= got.accepted <= 1010 and 0 <= got.rejected <= 1010
    assert got.boot_id is None or isinstance(got.boot_id, str)
    assert all(type(v) is int for v in got.protocols)
    assert got.control.run_step is None or (type(got.control.run_step) is int and got.control.run_step >= 0)
    assert not got.control.profile  # nothing readable was listed


def test_one_malformed_request_never_hides_the_others() -> None:
    good = _request("cd34").to_wire()
    got = RunControl.from_wire({"profile": [{"id": "zz"}, good, {**good, "steps": [5, 99]}]})
    assert got.profile is not None and [r.id for r in got.profile] == ["cd34"]


def test_request_defaults_are_stated_once() -> None:
    r = ProfileRequest.from_wire({"id": "ab", "project": "p", "experiment_name": "e", "steps": [1, 1],
                                  "activities": list(DEFAULT_PROFILE_ACTIVITIES)})
    assert r.max_window_s == DEFAULT_PROFILE_WINDOW_S and r.activities == DEFAULT_PROFILE_ACTIVITIES
    assert ProfileRequest("ab", "p", "e", 1, 1).to_wire() == {**r.to_wire(), "expires_at": 0.0}
