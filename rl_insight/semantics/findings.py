"""Findings: one shape for what every detector reports about a run (issue 66) — the hang verdict, the fail-slow
radar's stragglers, and the detectors that come after them — and one descriptor per kind of finding.

A finding is `{"kind", "subject", "cause", "first_step", "last_step", "steps", "excess_s", "confidence",
"evidence", "next", "sentence"}` (`Finding`), plus `open` (still going on) and `pattern` where the kind has them.
Invariant: a kind is described once, here (`KINDS`); the API validates `?kind=` against it, the CLI offers its
names, the session publishes it for the UI; a detector's module makes findings of its kind only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from typing_extensions import NotRequired, TypedDict


class Finding(TypedDict):
    kind: str
    subject: str  # the lane (`rank_5`, `replica_3`), or `the job` when no one lane is the cause
    cause: str  # the kind's cause class (a straggler's `compute`, a hang's verdict class)
    first_step: Optional[int]
    last_step: Optional[int]
    steps: int  # the steps it was seen in
    excess_s: Optional[float]  # what it costs a step (a straggler), or how long the run has not moved (a hang)
    confidence: float  # 0–1
    evidence: list[str]
    next: list[str]  # what to check next
    sentence: str
    open: NotRequired[bool]
    pattern: NotRequired[str]  # a straggler's: chronic, ongoing, one-off


@dataclass(frozen=True)
class FindingKind:
    name: str
    words: str  # what a finding of this kind is, for people
    decided_by: str  # the module that decides it


KINDS: tuple[FindingKind, ...] = (
    FindingKind("hang", "the job is stuck: the verdict of its latest stack snapshot",
                "rl_insight/server/rooms/stacks/verdict.py"),
    FindingKind("straggler", "one lane makes every step slower: the fail-slow radar",
                "rl_insight/semantics/stragglers.py"),
)
BY_NAME: dict[str, FindingKind] = {k.name: k for k in KINDS}


def kinds_json() -> dict[str, dict[str, str]]:
    return {k.name: {key: v for key, v in asdict(k).items() if key != "name"} for k in KINDS}


def from_verdict(verdict: dict[str, Any] | None, status: str, hang_classes: tuple[str, ...]) -> Finding | None:
    """The run's hang finding: its latest verdict when that verdict says the job is stuck (a hang class, or any
    verdict with culprits while the run is stalled or hung); None for a healthy job or no verdict."""
    if verdict is None:
        return None
    cls = verdict["class"]
    if cls not in hang_classes and not (status in ("stalled", "hung") and verdict.get("culprits")
                                        and cls not in ("not_stuck", "slow_healthy")):
        return None
    culprits = list(verdict.get("culprits") or [])
    return {"kind": "hang", "subject": ", ".join(culprits) or "the job", "cause": cls,
            "first_step": verdict.get("step"), "last_step": verdict.get("step"), "steps": 1, "excess_s": None,
            "confidence": 1.0 if cls in hang_classes else 0.5, "evidence": list(verdict.get("evidence") or []),
            "next": list(verdict.get("next") or []), "sentence": verdict.get("sentence") or cls,
            "open": status in ("stalled", "hung")}
