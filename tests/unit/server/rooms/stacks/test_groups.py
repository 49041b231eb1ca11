"""Grouping a stack snapshot (server/rooms/stacks/groups.py): identical call paths together, the odd ones out named,
who moved between two snapshots."""

from __future__ import annotations

import time

from rl_insight.server.rooms.stacks import groups as sg

SITE = "/venv{n}/lib/python3.11/site-packages"
STD = "/usr/lib/python3.11"


def frame(file: str, line: int, func: str, code: str = "") -> dict:
    f = {"file": file, "line": line, "func": func}
    if code:
        f["code"] = code
    return f


def collective(n: int = 0, line: int = 3252) -> list[dict]:
    site = SITE.format(n=n)
    return [frame("/job/train.py", 10, "main"), frame("/job/train.py", 30, "step"),
            frame(f"{site}/torch/distributed/c10d_logger.py", 81, "wrapper"),
            frame(f"{site}/torch/distributed/distributed_c10d.py", line, "all_reduce", "work.wait()")]


def sleeping() -> list[dict]:
    return [frame("/job/train.py", 10, "main"), frame("/job/train.py", 41, "load_batch", "time.sleep(30)  # why")]


def report(rank: int, frames: list[dict], lane: bool = True, host: str = "node0") -> dict:
    lanes = [{"lane": f"rank_{rank}", "state": "actor_update", "since_ns": 1}] if lane else []
    return {"process": {"host": host, "pid": 1000 + rank, "rank": rank, "lanes": [f"rank_{rank}"], "roles": []},
            "cpu_s": 1.0, "step": 4,
            "threads": [{"id": 1, "name": "MainThread", "main": True, "sender": False, "lanes": lanes,
                         "frames": frames},
                        {"id": 2, "name": "rl-insight-exporter", "main": False, "sender": True, "lanes": [],
                         "frames": [frame(f"{STD}/threading.py", 1, "run")]}]}


def snapshot(reports: dict, missing: list | None = None, created_at: float = 100.0) -> dict:
    return {"id": f"s{created_at}", "created_at": created_at, "reports": reports, "missing": missing or []}


def test_the_late_rank_is_named_the_odd_one_out() -> None:
    reports = {f"node0:{1000 + r}": report(r, sleeping() if r == 512 else collective(r % 3, 3252 + r % 2))
               for r in range(1024)}
    snap = snapshot(reports)
    sg.summarise(snap, None, time.time_ns())
    first, second = snap["groups"][:2]
    # different venv paths and lines of the same function still group
    assert first["size"] == 1023 and first["labels"] == "rank_0-511, rank_513-1023"
    assert first["where"]["text"] == "`all_reduce` (torch.distributed)" and not first["odd_one_out"]
    assert second["size"] == 1 and second["labels"] == "rank_512" and second["odd_one_out"]
    assert snap["summary"].startswith("1023 of 1024 (rank_0-511, rank_513-1023) are in `all_reduce` "
                                      "(torch.distributed); rank_512 is in `load_batch` at job/train.py:41 "
                                      "`time.sleep(30)` — the odd one out")


def test_exact_lines_split_groups_only_when_asked() -> None:
    reports = {f"h:{r}": report(r, collective(0, 3252 + r % 2)) for r in range(4)}
    assert len(sg.group(sg.units(reports, []))) == 1
    assert len(sg.group(sg.units(reports, []), exact=True)) == 2


def test_processes_in_no_state_are_not_outliers_of_the_ranks() -> None:
    reports = {f"h:{r}": report(r, collective()) for r in range(3)}
    reports["h:9"] = report(9, sleeping(), lane=False)  # e.g. the driver, waiting on a pipe
    snap = snapshot(reports)
    sg.summarise(snap, None, time.time_ns())
    assert [g["odd_one_out"] for g in snap["groups"]] == [False, False]
    assert snap["summary"] == ("all 3 (rank_0-2) are in `all_reduce` (torch.distributed); 1 more process in no "
                               "state (rank 9).")


def test_without_lanes_the_processes_themselves_are_compared() -> None:
    reports = {f"h:{r}": report(r, sleeping() if r == 1 else collective(), lane=False) for r in range(4)}
    snap = snapshot(reports)
    sg.summarise(snap, None, time.time_ns())
    assert snap["groups"][1]["labels"] == "rank 1" and snap["groups"][1]["odd_one_out"]


def test_a_process_that_did_not_answer_is_a_suspect() -> None:
    now = time.time_ns()
    missing = [{"host": "node3", "pid": 5, "rank": 3, "lanes": ["rank_3"], "last_seen_ns": now - 40 * 10**9,
                "open": [{"lane": "rank_3", "state": "actor_update", "since_ns": now - 95 * 10**9}]}]
    snap = snapshot({f"h:{r}": report(r, collective()) for r in range(3)}, missing)
    sg.summarise(snap, None, now)
    silent = snap["groups"][-1]
    assert not silent["answered"] and silent["labels"] == "rank_3"
    assert snap["summary"].startswith("rank_3 did not answer, last seen 40 s ago, in actor_update for 95 s — the "
                                      "likely hang; of those that answered, all 3 (rank_0-2) are in `all_reduce`")


def test_a_snapshot_never_leads_with_an_innocent_process() -> None:
    """Issue 51 item 2: on a loaded host the hung ranks could not answer in time and the rollout worker could; the
    sentence led with the worker. Those that hold a state and did not answer come first, with how long they hold it;
    a silent process in no state is a suspect after everyone else."""
    now = time.time_ns()
    missing = [{"host": "n", "pid": 10 + r, "rank": r, "lanes": [f"rank_{r}"], "last_seen_ns": now - 3 * 10**9,
                "open": [{"lane": f"rank_{r}", "state": "train_batch", "since_ns": now - 226 * 10**9}]}
               for r in range(4)]
    missing.append({"host": "n", "pid": 99, "rank": None, "lanes": [], "last_seen_ns": now - 5 * 10**9, "open": []})
    snap = snapshot({"h:9": report(9, sleeping(), lane=False)}, missing)
    snap["completed_at"] = snap["created_at"] + 40
    sg.summarise(snap, None, now)
    assert snap["summary"].startswith("rank_0-3 did not answer within 40 s, last seen 3 s ago, in train_batch for "
                                      "226 s — the likely hang; of those that answered, rank 9 is in `load_batch`")
    assert snap["summary"].endswith("n:99 did not answer within 40 s, last seen 5 s ago — a suspect too."), \
        snap["summary"]


def test_a_second_snapshot_says_who_moved() -> None:
    first = snapshot({f"h:{r}": report(r, collective()) for r in range(4)}, created_at=100.0)
    sg.summarise(first, None, time.time_ns())
    moved = {f"h:{r}": report(r, collective(0, 3300) if r == 0 else collective()) for r in range(4)}
    second = snapshot(moved, created_at=106.0)
    sg.summarise(second, first, time.time_ns())
    assert second["moved"]["did_not_move"] == "rank_1-3" and second["moved"]["moved"] == "rank_0"
    assert second["summary"].endswith("6 s after the previous snapshot, rank_1-3 did not move.")
    still = snapshot({f"h:{r}": report(r, collective()) for r in range(4)}, created_at=111.0)
    sg.summarise(still, first, time.time_ns())
    assert still["summary"].endswith("nobody moved: stuck.")


def test_short_paths() -> None:
    assert sg.short_path("/a/venv/lib/python3.11/site-packages/torch/x.py") == "torch/x.py"
    assert sg.short_path("/usr/lib/python3.11/threading.py") == "<stdlib>/threading.py"
    assert sg.short_path("/home/u/proj/train.py") == "proj/train.py"
    assert sg.package("/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py") == "torch.distributed"
