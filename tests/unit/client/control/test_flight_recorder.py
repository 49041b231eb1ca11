"""The flight recorder in a stack answer (client/control/stacks/flight_recorder.py, protocol/stacks.py): never
imports torch, says why there is nothing, and what it sends is bounded when the server reads it."""

from __future__ import annotations

import sys
import types

import pytest

from rl_insight.client.control.stacks import flight_recorder
from rl_insight.protocol.stacks import MAX_FR_ENTRIES, decode_stack_report
from tests.unit.server.rooms.stacks.test_groups import collective, report


def test_without_torch_nothing_is_imported_and_the_answer_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert flight_recorder.read() == {"state": "no_torch", "message": "torch is not imported in this process"}
    assert "torch" not in sys.modules


def test_torch_without_a_process_group_or_a_buffer_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """(torch.distributed as the recorder sees it, without importing torch here: the fast lane has none)"""
    dist = types.ModuleType("torch.distributed")
    dist.is_available = lambda: True  # type: ignore[attr-defined]
    dist.is_initialized = lambda: False  # type: ignore[attr-defined]
    dist.get_rank = lambda: 5  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    assert flight_recorder.read()["state"] == "not_initialized"
    dist.is_initialized = lambda: True  # type: ignore[attr-defined]
    for name in flight_recorder.BUFFER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    off = flight_recorder.read()
    assert off["state"] == "off" and off["rank"] == 5 and "TORCH_FR_BUFFER_SIZE=2000" in off["message"]
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", types.ModuleType("torch._C._distributed_c10d"))
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")  # on, but this torch cannot dump it: said, not raised
    failed = flight_recorder.read()
    assert failed["state"] == "failed" and failed["message"].startswith("reading the flight recorder:")


def _entry(seq: int, **over: object) -> dict:
    return {"seq": seq, "p2p_seq": 0, "p2p": False, "op": "gloo:all_reduce", "pg": "0", "state": "scheduled",
            "retired": True, "in_sizes": [[4]], "out_sizes": [[4]], "dtypes": ["Float"], "created_ns": 1, **over}


def test_the_server_reads_it_bounded_and_refuses_a_state_it_does_not_know() -> None:
    body = report(0, collective())
    body["flight_recorder"] = {"state": "ok", "message": "m", "rank": 0,
                               "groups": {"0": {"name": "default_pg", "enqueued": 3, "started": None, "completed": 2}},
                               "entries": [_entry(i, in_sizes=[[1] * 50] * 20, op="x" * 1000) for i in range(500)]}
    got = decode_stack_report(body)["flight_recorder"]
    assert got["groups"] == {"0": {"name": "default_pg", "enqueued": 3, "started": None, "completed": 2}}
    assert len(got["entries"]) == MAX_FR_ENTRIES and got["entries"][-1]["seq"] == 499  # the newest kept
    assert len(got["entries"][0]["in_sizes"]) == 4 and len(got["entries"][0]["in_sizes"][0]) == 8
    assert len(got["entries"][0]["op"]) == 128
    body["flight_recorder"] = {"state": "sure", "message": "?"}
    with pytest.raises(ValueError, match="flight_recorder must be an object whose state is one of"):
        decode_stack_report(body)
    body["flight_recorder"] = {"state": "off", "message": "the flight recorder is off", "entries": [_entry(1)]}
    assert decode_stack_report(body)["flight_recorder"] == {"state": "off", "message": "the flight recorder is off"}
    del body["flight_recorder"]
    assert "flight_recorder" not in decode_stack_report(body)  # an older client: nothing said, nothing invented
