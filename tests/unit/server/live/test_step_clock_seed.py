"""The step clock after a restart: a run's clock starts from the run store's step marks (runstore/step_marks.py),
not from nothing, so "which step was running at t" and the run's pace hold across a restart."""

from __future__ import annotations

from pathlib import Path

from rl_insight.server.runstore.rows import SampleRow
from tests.conftest import start_server


def test_a_restarted_server_starts_a_runs_clock_from_its_stored_steps(tmp_path: Path) -> None:
    first = start_server(tmp_path, in_process=True)
    try:
        writer = first.app.state.st.writer
        writer.put_samples([SampleRow("p", "e", "training_global_step", "gauge", "{}", float(s), 1_000.0 + 10 * s,
                                      float(s)) for s in range(1, 6)])
        assert writer.flush(10)
    finally:
        first.stop()
    again = start_server(tmp_path, in_process=True)
    try:
        clock = again.app.state.st.step_clock
        assert clock.current("p", "e") is None  # (the clock learns of a run when it next logs a step)
        clock.note("p", "e", 6, 1_060.0)
        assert clock.step_at("p", "e", 1_025.0) == 3  # step 2 ended at 1,020 s (stored), so step 3 ran at 1,025 s
        assert clock.reached_at("p", "e", 4) == 1_040.0
        # the pace (10 s a step) is known at once: step 7 ends at 1,070 s, step 8 at 1,080 s, when step 9 begins
        assert clock.first_step_starting_after("p", "e", 1_075.0, now=1_060.0) == 9
    finally:
        again.stop()


def test_a_seeded_run_still_gives_its_step_to_what_arrived_before_its_first_move_here() -> None:
    from rl_insight.server.live.step_clock import StepClock

    clock, moved = StepClock(), []
    clock.seed = lambda project, experiment: [(1_010.0, 1.0), (1_020.0, 2.0)]
    clock.on_first_move.append(lambda *args: moved.append(args))
    clock.note("p", "e", 2, 1_021.0)  # (a step it already knows: no move)
    clock.note("p", "e", 3, 1_030.0)
    clock.note("p", "e", 4, 1_040.0)
    assert moved == [("p", "e", 3, 1_030.0)]  # once, at its first move on this server
