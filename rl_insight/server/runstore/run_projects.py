"""The project of each run, read once from the run store and remembered (the access check asks it on every request
for a run). Invariant: a run never changes project, so a remembered answer stays true until the run is deleted —
`forget` is called then (SQLite gives the newest run's id again once that run is gone); bounded in size."""

from __future__ import annotations

from .queries import find_run_id, project_of
from .reader import RunStoreReader

MAX_REMEMBERED = 100_000


class RunProjects:
    def __init__(self, reader: RunStoreReader | None) -> None:
        self._reader = reader
        self._known: dict[int, str] = {}

    def project(self, run_id: int) -> str | None:
        """The project of a run (None: no such run, or no run store)."""
        project = self._known.get(run_id)
        if project is None and self._reader is not None:
            project = project_of(self._reader.conn(), run_id)
            if project is None:
                return None
            if len(self._known) >= MAX_REMEMBERED:
                self._known.clear()
            self._known[run_id] = project
        return project

    def forget(self, _keys: object = None) -> None:
        self._known.clear()

    def exists(self, project: str, experiment_name: str) -> bool:
        """Whether the store holds a run of this experiment."""
        return self._reader is not None and find_run_id(self._reader.conn(), project, experiment_name) is not None
