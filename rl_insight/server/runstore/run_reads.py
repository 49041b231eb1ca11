"""The runs: one run, a run's id by name, listings (the run list, a project's runs), states left open."""

from __future__ import annotations

from . import queries as q
from . import run_list
from .bound import Bound, StoreKind


class RunReads(StoreKind):
    get = Bound(q.get_run)
    find_id = Bound(q.find_run_id)
    project_of = Bound(q.project_of)
    listed = Bound(run_list.list_runs)  # the run list's page: filters, search, sort
    of_project = Bound(q.list_runs)  # every run (of a project): the experiments list, a rule's run
    open_states = Bound(q.open_states)
