"""The steps: their windows, a run's insights over a time window, one step's critical path and facts, two runs'
difference, the goodput ledger, the usual step length, the stragglers."""

from __future__ import annotations

from .. import step_marks
from ..bound import Bound, StoreKind
from . import explain, ledger
from .run_insights import median_step_s, run_insights, run_step_windows
from .stragglers import run_stragglers


class StepReads(StoreKind):
    windows = Bound(run_step_windows)
    insights = Bound(run_insights)
    path = Bound(explain.step_path)
    facts = Bound(explain.step_facts)
    diff = Bound(explain.runs_diff)
    ledger = Bound(ledger.run_ledger)
    median_s = Bound(median_step_s)
    stragglers = Bound(run_stragglers)  # the fail-slow radar over the run's last steps
    marks = Bound(step_marks.marks)  # (time, step) the run's step metric ended each step at: the step clock's seed
