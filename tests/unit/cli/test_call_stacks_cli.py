"""`rl-insight stacks` (rl_insight/cli/call_stacks.py): what it prints of a snapshot, and how it reads `--run`."""

from __future__ import annotations

import time

import pytest

from rl_insight.cli.call_stacks import describe, resolve_run
from rl_insight.errors import InvalidInputError, NotFoundError
from rl_insight.server.rooms.stacks import groups as stack_groups
from tests.unit.server.rooms.stacks.test_groups import collective, report, sleeping


def _snapshot() -> dict:
    reports = {f"h:{1000 + r}": report(r, sleeping() if r == 2 else collective()) for r in range(4)}
    reports["h:1002"]["threads"][0]["native"] = [{"file": "/usr/lib/libc.so.6", "line": 0, "func": "clock_nanosleep"}]
    now = time.time()
    snap = {"id": "ab" * 8, "project": "p", "experiment_name": "e", "created_at": now - 3, "completed_at": now,
            "reports": reports, "missing": [], "answered": 4, "expected_count": 4, "origin": "api", "reason": ""}
    for rep in reports.values():
        rep["rss_bytes"], rep["native_state"], rep["native_message"] = 2**30, "ok", "native frames of 2 thread(s)"
    stack_groups.summarise(snap, None, time.time_ns())
    return snap


def test_describe_names_the_odd_one_out_with_its_stack_and_native_frames() -> None:
    lines = describe(_snapshot())
    text = "\n".join(lines)
    assert lines[0] == "stack snapshot abababababababab of p/e: 4 of 4 processes answered in 3.0 s"
    assert "group 2 — 1: rank_2  ODD ONE OUT" in text and "in `load_batch` at job/train.py:41 `time.sleep(30)`" in text
    assert "    rank_2: in actor_update for" in text and "RSS 1.00 GiB, CPU 1 s" in text and "step 4" in text
    assert "/job/train.py:41 load_batch    time.sleep(30)  # why" in text  # the frame, as the process reported it
    assert "native (py-spy): clock_nanosleep (libc.so.6)" in text
    assert "native frames:" not in text  # said only when py-spy could not help


def test_run_is_an_id_or_project_slash_experiment() -> None:
    class Fake:
        url = "http://x"

        def request(self, method: str, path: str, **kw: object) -> dict:
            return {"runs": [{"id": 3, "project": "p", "experiment_name": "e"},
                             {"id": 9, "project": "p", "experiment_name": "e"}]}

    assert resolve_run(Fake(), "12") == 12  # type: ignore[arg-type]
    assert resolve_run(Fake(), "p/e") == 9  # type: ignore[arg-type]  # the newest run of that name
    with pytest.raises(NotFoundError, match="no run p/x"):
        resolve_run(Fake(), "p/x")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="PROJECT/EXPERIMENT"):
        resolve_run(Fake(), "nonsense")  # type: ignore[arg-type]
