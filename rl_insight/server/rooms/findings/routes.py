"""A run's findings over HTTP, one shape for every detector (semantics/findings.py):

    GET /api/v1/runs/{run_id}/findings[?kind=hang|straggler]
        {"run_id", "findings": [{kind, subject, cause, first_step, last_step, steps, excess_s, confidence, evidence,
         next, sentence, open?, pattern?}], "kinds": {name: {words, decided_by}}}

The hang finding comes from the run's latest stack snapshot's verdict (the stacks room); the stragglers from the
fail-slow radar over the run's last steps (runstore/steps/stragglers.py), kept per run until a step is added.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Optional

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from typing_extensions import TypedDict

from ....errors import InvalidInputError
from ....semantics import findings as kinds
from ....semantics.findings import Finding
from ...access.declared import declare
from ...routing.models import error_responses, typed_answer
from ...routing.params import RunId
from ...state import AppState
from ..stacks.feature import stacks_of
from ..stacks.verdict_classes import HANG_CLASSES

CACHED_RUNS = 64  # runs whose straggler findings are kept (until the run's next step)


class FindingsAnswer(TypedDict):
    run_id: int
    findings: list[Finding]
    kinds: dict[str, dict[str, str]]


class _RadarCache:
    """Each run's straggler findings by its last step window: the radar runs again only once a step was added."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: OrderedDict[int, tuple[tuple[int, int, int] | None, list[Finding]]] = OrderedDict()

    def get(self, run_id: int, last: tuple[int, int, int] | None) -> list[Finding] | None:
        with self._lock:
            kept = self._kept.get(run_id)
            if kept is None or kept[0] != last:
                return None
            self._kept.move_to_end(run_id)
            return kept[1]

    def put(self, run_id: int, last: tuple[int, int, int] | None, found: list[Finding]) -> None:
        with self._lock:
            self._kept[run_id] = (last, found)
            self._kept.move_to_end(run_id)
            while len(self._kept) > CACHED_RUNS:
                self._kept.popitem(last=False)


def build_router(st: AppState) -> APIRouter:
    assert st.reader is not None
    reader, cfg = st.reader, st.config
    cache = _RadarCache()
    r = APIRouter(prefix="/api/v1/runs", tags=["findings"], responses=error_responses(401, 403, 404, 422))

    def stragglers(run_id: int) -> list[Finding]:
        windows = reader.steps.windows(run_id, cfg.step_metric)
        last = windows[-1] if windows else None
        found = cache.get(run_id, last)
        if found is None:
            found = reader.steps.stragglers(run_id, windows)
            cache.put(run_id, last, found)
        return found

    def hang(run_id: int) -> list[Finding]:
        run = reader.runs.get(run_id, cfg.live_window_s, conditions=st.conditions.all())
        key = (run["project"], run["experiment_name"])
        snap = stacks_of(st).latest_complete(*key) if all(key) else None
        found = kinds.from_verdict(snap.get("verdict") if snap is not None else None, run["status"], HANG_CLASSES)
        return [found] if found is not None else []

    @r.get("/{run_id}/findings", **declare(st.auth, "read", "named"),
           **typed_answer(FindingsAnswer, "what the detectors found in the run"))
    async def run_findings(run_id: RunId, kind: Optional[str] = Query(
            None, max_length=64, json_schema_extra={"enum": list(kinds.BY_NAME)},
            description="only findings of this kind: " + ", ".join(kinds.BY_NAME))) -> dict[str, Any]:
        """What every detector found in the run, in one shape: a hung job (its latest stack snapshot's verdict) and
        the lanes that make every step slower (the fail-slow radar, over the run's last steps), each with its
        cause, the steps, what it costs, the evidence and what to check next. Open findings first."""
        if kind is not None and kind not in kinds.BY_NAME:
            raise InvalidInputError(f"no kind of finding {kind!r}", hint="kinds: " + ", ".join(kinds.BY_NAME))

        def work() -> dict[str, Any]:
            found = (hang(run_id) if kind in (None, "hang") else []) + \
                (stragglers(run_id) if kind in (None, "straggler") else [])
            if kind is None and not found:
                reader.runs.get(run_id, cfg.live_window_s)  # (a run that does not exist: 404, not an empty list)
            found.sort(key=lambda f: (not f.get("open", False), -(f.get("last_step") or 0)))
            return {"run_id": run_id, "findings": found, "kinds": kinds.kinds_json()}
        return await run_in_threadpool(work)

    return r
