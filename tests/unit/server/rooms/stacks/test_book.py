"""The stack snapshot book (stacks/book.py) and the stall watch (rooms/stacks/stall_watch.py): who is asked,
when a snapshot is complete, what survives a restart, bounds and retention."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rl_insight.errors import ConflictError, InvalidInputError, NotFoundError
from rl_insight.protocol.stacks import MAX_WAIT_S
from rl_insight.server.live.run_conditions import RunConditions
from rl_insight.server.live.step_clock import StepClock
from rl_insight.server.rooms.stacks.book import MAX_KEPT_PER_RUN, StackBook
from rl_insight.server.rooms.stacks.stall_watch import StallWatch
from tests.unit.server.rooms.stacks.test_groups import collective, report, sleeping

RUN = ("p", "e")


def procs(n: int = 4, lanes: bool = True) -> list[dict[str, Any]]:
    return [{"client_id": f"c{r}", "host": "h", "pid": 1000 + r, "rank": None, "lanes": [f"rank_{r}"] if lanes else [],
             "last_seen_ns": time.time_ns(), "open": []} for r in range(n)]


def book_of(tmp_path: Path, live: list[dict[str, Any]] | None = None) -> StackBook:
    return StackBook(tmp_path / "stacks", lambda p, e: list(live if live is not None else procs()) if (p, e) == RUN
                     else [])


def answer(book: StackBook, sid: str, rank: int, frames: list | None = None) -> dict:
    body = report(rank, frames or collective())
    body["process"]["pid"] = 1000 + rank
    body["process"]["host"] = "h"
    return book.report(sid, json.loads(json.dumps(body)))


def test_every_expected_answer_completes_the_snapshot(tmp_path: Path) -> None:
    book = book_of(tmp_path)
    snap = book.create(*RUN)
    assert snap["state"] == "pending" and snap["expected_count"] == 4
    assert [r.id for r in book.open_requests(*RUN)] == [snap["id"]] and book.open_requests("p", "other") == []
    for r in range(4):
        answer(book, snap["id"], r, sleeping() if r == 2 else None)
    done = book.get(snap["id"])
    assert done["state"] == "complete" and done["answered"] == 4 and book.open_requests(*RUN) == []
    assert "rank_2 is in `load_batch`" in done["summary"]
    with pytest.raises(ConflictError, match="too late"):
        answer(book, snap["id"], 1)


def test_a_running_book_groups_the_last_answer_on_its_own_thread(tmp_path: Path) -> None:
    """Issue 49 item 3: grouping (~0.5 s for a thousand processes) neither holds the event loop nor the last
    answering process's request: report() wakes the book's thread, which completes the snapshot at once."""
    import threading

    book = StackBook(tmp_path / "stacks", lambda p, e: procs(), tick_s=3600)  # (no tick would come by itself)
    completed_on: list[str] = []
    book.on_complete.append(lambda snap: completed_on.append(threading.current_thread().name))
    book.start()
    try:
        snap = book.create(*RUN)
        for r in range(4):
            assert answer(book, snap["id"], r)["process"] == f"h:{1000 + r}"
        deadline = time.monotonic() + 10
        # (the state says complete before the book's thread has run the completion's callbacks: wait for both)
        while (book.get(snap["id"])["state"] != "complete" or not completed_on) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert book.get(snap["id"])["state"] == "complete" and book.get(snap["id"])["answered"] == 4
        assert completed_on == ["rl-insight-stack-snapshots"]  # not the answering (test) thread
    finally:
        book.stop()


def test_grouping_by_line_when_asked(tmp_path: Path) -> None:
    book = book_of(tmp_path)
    snap = book.create(*RUN)
    for r in range(4):
        answer(book, snap["id"], r, collective(0, 3252 + r % 2))
    assert len(book.get(snap["id"])["groups"]) == 1
    exact = book.get(snap["id"], exact=True)
    assert [g["size"] for g in exact["groups"]] == [2, 2] and exact["summary"].endswith("(grouped by line)")


def test_the_deadline_completes_it_with_the_silent_listed(tmp_path: Path) -> None:
    book = book_of(tmp_path)
    snap = book.create(*RUN, deadline_s=5)
    answer(book, snap["id"], 0)
    assert book.tick(now=time.time() + 1) == 0
    assert book.tick(now=time.time() + 6) == 1
    done = book.get(snap["id"])
    assert [p["pid"] for p in done["missing"]] == [1001, 1002, 1003]
    assert "did not answer" in done["summary"]


def test_past_the_deadline_it_waits_for_beating_ranks_that_hold_a_state(tmp_path: Path) -> None:
    """Issue 51 item 2: on a loaded host the hung ranks answer last. Past its deadline a snapshot waits on, a
    heartbeat at a time, while a rank that holds a state has not answered and still beats (the replies list it with
    the later expiry), and completes when it answers; silent ones and ranks in no state are not waited for."""
    live = procs()
    for p in live[2:]:
        p["open"] = [{"lane": p["lanes"][0], "state": "train_batch", "since_ns": time.time_ns() - 226 * 10**9}]
    book = book_of(tmp_path, live)
    snap = book.create(*RUN, deadline_s=5)
    answer(book, snap["id"], 0)
    answer(book, snap["id"], 1)
    t0 = snap["created_at"]
    live[2]["last_seen_ns"] = live[3]["last_seen_ns"] = int((t0 + 1) * 1e9)  # both beat after it was asked
    assert book.tick(now=t0 + 6) == 0  # due, but ranks 2 and 3 hold train_batch and still beat
    (req,) = book.open_requests(*RUN)
    assert req.expires_at == book.get(snap["id"])["deadline_at"] > t0 + 6
    answer(book, snap["id"], 2)
    live[3]["last_seen_ns"] = int((t0 - 1) * 1e9)  # rank 3 went quiet: not waited for any more
    assert book.tick(now=t0 + 12) == 1
    done = book.get(snap["id"])
    assert [p["pid"] for p in done["missing"]] == [1003]
    assert done["summary"].startswith("rank_3 did not answer within "), done["summary"]
    # however long they beat, it waits MAX_WAIT_S at the most
    snap = book.create(*RUN, deadline_s=5)
    live[3]["last_seen_ns"] = int((snap["created_at"] + 1) * 1e9)
    assert book.tick(now=snap["created_at"] + 30) == 0
    assert book.tick(now=snap["created_at"] + MAX_WAIT_S + 0.1) == 1


def test_who_can_be_asked(tmp_path: Path) -> None:
    with pytest.raises(ConflictError, match="no process of run p/other is alive"):
        book_of(tmp_path).create("p", "other")
    with pytest.raises(ConflictError, match=r"matches ranks 1; it has 4 live processes, none reports a rank, "
                                            r"lanes rank_0-3"):
        book_of(tmp_path).create(*RUN, ranks=[1])
    assert book_of(tmp_path).create(*RUN, lanes=["rank_1"])["expected_count"] == 1
    with pytest.raises(InvalidInputError, match="deadline_s"):
        book_of(tmp_path).create(*RUN, deadline_s=0.1)


def test_pending_snapshots_per_run_are_bounded(tmp_path: Path) -> None:
    book = book_of(tmp_path)
    for _ in range(4):
        book.create(*RUN)
    with pytest.raises(ConflictError, match="being collected"):
        book.create(*RUN)


def test_a_restart_completes_what_was_pending_and_keeps_the_rest(tmp_path: Path) -> None:
    book = book_of(tmp_path)
    done = book.create(*RUN)
    for r in range(4):
        answer(book, done["id"], r)
    pending = book.create(*RUN)
    again = book_of(tmp_path)
    assert again.get(done["id"])["summary"] == book.get(done["id"])["summary"]
    interrupted = again.get(pending["id"])
    assert interrupted["state"] == "complete" and "restarted" in interrupted["note"]
    (tmp_path / "stacks" / "0123456789abcdef.json").write_text("{not json")  # a foreign or torn file is skipped
    assert len(book_of(tmp_path).list(*RUN)) == 2


def test_kept_per_run_and_retention(tmp_path: Path) -> None:
    book = book_of(tmp_path)
    for _ in range(MAX_KEPT_PER_RUN + 2):
        snap = book.create(*RUN, deadline_s=1)
        book.tick(now=time.time() + 2)
    assert len(book.list(*RUN)) == MAX_KEPT_PER_RUN
    assert len(list((tmp_path / "stacks").glob("*.json"))) == MAX_KEPT_PER_RUN
    assert book.forget_runs({RUN}) == MAX_KEPT_PER_RUN
    assert list((tmp_path / "stacks").glob("*.json")) == []
    with pytest.raises(NotFoundError):
        book.get(snap["id"])


def test_the_stall_watch_takes_an_episode_of_two_snapshots(tmp_path: Path) -> None:
    book, clock = book_of(tmp_path), StepClock()
    watch = StallWatch(book, clock, RunConditions(clock, 0), interval_s=900, confirm_after_s=30)
    stalled = {RUN: {"stalled": [{"lane": "rank_2", "state": "actor_update", "open_s": 300.0, "usual_p95_s": 4.0}]}}
    now = time.time()
    assert watch.on_insights({RUN: {"stalled": []}}, now) == 0
    assert watch.on_insights(stalled, now) == 1
    assert watch.on_insights(stalled, now + 15) == 0  # the second one waits for confirm_after_s
    assert watch.on_insights(stalled, now + 31) == 1
    assert watch.on_insights(stalled, now + 200) == 0  # one episode per interval
    snaps = book.list(*RUN)
    assert [s["origin"] for s in snaps] == ["auto", "auto"]
    assert snaps[-1]["reason"] == "stall: rank_2 has been in actor_update for 300 s (usually 4 s at most)"
    assert watch.on_insights(stalled, now + 901) == 1  # a new episode


def test_the_step_clock_stalling_counts_too() -> None:
    clock = StepClock()
    clock.note("p", "e", 7, time.time() - 1000)
    conditions = RunConditions(clock, 600)
    assert conditions.stall_of(RUN, {"stalled": []}, time.time())[0].startswith("no step has ended for 1000 s")
    assert RunConditions(clock, 0).stall_of(RUN, {}, time.time()) is None
    conditions.on_insights({RUN: {"stalled": []}})
    assert conditions.of(RUN) == "stalled" and conditions.all() == {RUN: "stalled"}


def test_a_slow_stall_arms_a_profile_of_the_next_step(tmp_path: Path) -> None:
    from rl_insight.server.rooms.profiles.book import ProfileBook

    book, clock = book_of(tmp_path), StepClock()
    now = time.time()
    for step in range(1, 6):
        clock.note("p", "e", step, now - 60 + 10 * step)  # a step every 10 s
    profiles = ProfileBook(tmp_path / "profiles", analyze=False, clock=clock)
    conditions = RunConditions(clock, 0)
    watch = StallWatch(book, clock, conditions, interval_s=900, profiles=profiles, auto_profile=True,
                       confirm_after_s=30)
    stalled = {RUN: {"stalled": [{"lane": "rank_2", "state": "actor_update", "open_s": 300.0, "usual_p95_s": 4.0}]}}
    conditions.on_insights(stalled, now)
    watch.on_insights(stalled, now)
    first = book.list(*RUN)[0]["id"]
    for r in range(4):
        answer(book, first, r)
    watch.on_insights(stalled, now + 31)
    second = next(s["id"] for s in book.list(*RUN) if s["id"] != first)
    for r in range(4):  # rank 0 moved: slow, not stuck
        answer(book, second, r, collective(0, 3300) if r == 0 else None)
    (req,) = profiles.list("p", "e")
    assert req["origin"] == "auto" and req["request"]["lanes"] == ["rank_2"] and watch.profiled == 1
    assert conditions.of(RUN) == "stalled"  # slow, not hung


def test_a_stuck_stall_arms_no_profile(tmp_path: Path) -> None:
    from rl_insight.server.rooms.profiles.book import ProfileBook

    book, clock = book_of(tmp_path), StepClock()
    clock.note("p", "e", 3, time.time() - 100)
    profiles = ProfileBook(tmp_path / "profiles", analyze=False, clock=clock)
    conditions = RunConditions(clock, 0)
    watch = StallWatch(book, clock, conditions, interval_s=900, profiles=profiles, auto_profile=True,
                       confirm_after_s=30)
    stalled = {RUN: {"stalled": [{"lane": "rank_2", "state": "actor_update", "open_s": 300.0, "usual_p95_s": 4.0}]}}
    now = time.time()
    for at in (now, now + 31):
        conditions.on_insights(stalled, at)
        assert conditions.of(RUN) == "stalled"
        watch.on_insights(stalled, at)
        sid = next(s["id"] for s in book.list(*RUN) if s["state"] == "pending")
        for r in range(4):
            answer(book, sid, r)
    assert profiles.list("p", "e") == [] and watch.profiled == 0
    assert conditions.of(RUN) == "hung" and "nobody moved" in conditions.stall(RUN).hung
    conditions.on_insights({RUN: {"stalled": []}}, now + 60)  # it moves again
    assert conditions.of(RUN) is None


def _amplifier(host: str, pid: int) -> dict[str, Any]:
    """What the probe sent: 256 threads × 128 empty frames, every thread claiming to be the main one and to hold
    64 lanes (~140 kB on the wire, ~45 times that decoded before)."""
    return {"process": {"host": host, "pid": pid, "lanes": ["rank_0"]}, "native_state": "not_asked",
            "threads": [{"id": i, "name": "t", "main": True, "frames": [{}] * 128,
                         "lanes": [{"lane": f"l{j}", "state": "s"} for j in range(64)]} for i in range(256)]}


@pytest.mark.slow  # (over 2 s: the full suite runs it)
def test_answers_come_only_from_the_processes_asked(tmp_path: Path) -> None:
    book = book_of(tmp_path)
    snap = book.create(*RUN)
    for pid in range(100):  # invented host:pid keys
        with pytest.raises(ConflictError, match="did not ask process evil:"):
            book.report(snap["id"], _amplifier("evil", pid))
    assert book.refused_answers == 100
    assert book.get(snap["id"], reports=True)["state"] == "pending" and book._bytes[snap["id"]] == 0


def test_a_report_is_bounded_by_what_it_holds_decoded_with_one_main_thread(tmp_path: Path) -> None:
    from rl_insight.protocol import decode_stack_report
    from rl_insight.protocol.stacks import MAX_HELD_LANES, MAX_STACK_REPORT_KEPT_BYTES

    rep = decode_stack_report(_amplifier("h", 1000))
    assert sum(t["main"] for t in rep["threads"]) == 1  # the first that said so
    assert sum(len(t["lanes"]) for t in rep["threads"]) == MAX_HELD_LANES  # each lane held once
    assert all(t["frames"] == [] for t in rep["threads"])  # frames naming nothing are not kept
    assert rep["kept_bytes"] < 200_000  # was ~6 MB decoded
    real = {"process": {"host": "h", "pid": 1001}, "threads": [
        {"id": i, "name": f"worker-{i}", "main": i == 0, "lanes": [{"lane": "rank_1", "state": "x"}] if i == 1 else [],
         "frames": [{"file": f"/site-packages/pkg/mod_{j}.py" + "x" * 400, "func": "f" * 200, "line": j,
                     "code": "c" * 200} for j in range(128)]} for i in range(256)]}
    rep = decode_stack_report(real)
    assert rep["kept_bytes"] <= MAX_STACK_REPORT_KEPT_BYTES
    main, holder = rep["threads"][0], rep["threads"][1]
    assert len(main["frames"]) == 128 and len(holder["frames"]) == 128  # what says where the work is: whole
    cut = [t for t in rep["threads"] if len(t["frames"]) == 1]
    assert cut and all(t["cut_frames"] == 127 and t["frames"][0]["line"] == 127 for t in cut)  # innermost kept


def test_a_process_that_went_silent_before_it_was_asked_is_the_likely_hang(tmp_path: Path) -> None:
    """A rank that died (or froze) more than the silence window before the snapshot is no longer live: it cannot be
    asked, but the snapshot lists it as not answering, with the state it held, and the verdict names it."""
    now = time.time_ns()
    gone = [{"client_id": "c2", "host": "h", "pid": 1002, "rank": 2, "lanes": ["rank_2"],
             "last_seen_ns": now - 60 * 10**9,
             "open": [{"lane": "rank_2", "state": "train_batch", "since_ns": now - 90 * 10**9}]}]
    live = [p for p in procs() if p["pid"] != 1002]
    book = StackBook(tmp_path / "stacks", lambda p, e: list(live), gone=lambda p, e: list(gone))
    snap = book.create(*RUN)
    for r in (0, 1, 3):
        answer(book, snap["id"], r)
    done = book.get(snap["id"])
    assert done["state"] == "complete" and [(p["pid"], p["gone"]) for p in done["missing"]] == [(1002, True)]
    assert done["summary"].startswith("rank_2 did not answer")
    assert (done["verdict"]["class"], done["verdict"]["culprits"]) == ("dead_process", ["rank_2"])


def test_an_answer_claiming_2_62_collectives_delays_no_other_snapshot(tmp_path: Path) -> None:
    """Issue 64: one flight-recorder group claiming 2^62 enqueued collectives (accepted) once made the verdict walk
    every sequence number on the book's thread: no snapshot of any run completed again. The work is bounded by the
    entries sent; the next run's snapshot completes on the same running book."""
    runs = {RUN: procs(), ("q", "e"): procs()}
    book = StackBook(tmp_path / "stacks", lambda p, e: list(runs.get((p, e), [])), tick_s=3600)
    book.start()
    try:
        claimed = book.create(*RUN)
        for r in range(4):
            body = report(r, collective())
            body["process"]["pid"], body["process"]["host"] = 1000 + r, "h"
            body["flight_recorder"] = {"state": "ok", "groups": {"0": {"name": "default_pg", "enqueued": 2**62 if r == 0
                                                                       else 3, "completed": 0}},
                                       "entries": [{"seq": s, "op": "gloo:all_reduce", "pg": "0", "in_sizes": [[4]]}
                                                   for s in (1, 2, 3)]}
            book.report(claimed["id"], json.loads(json.dumps(body)))
        other = book.create("q", "e")
        for r in range(4):
            answer(book, other["id"], r)
        deadline = time.monotonic() + 60  # a bound on a hang, not a speed target
        while book.get(other["id"])["state"] != "complete" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert book.get(other["id"])["state"] == "complete"
        verdict = book.get(claimed["id"])["verdict"]
        assert verdict["class"] == "late_rank" and verdict["culprits"] == ["rank_1", "rank_2", "rank_3"]
    finally:
        book.stop()
