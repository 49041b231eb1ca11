"""The verdict's classes, each described once: its words (the head of the verdict's sentence), whether it makes a
stalled run hung at once, and whether its culprits are the likely cause (the run page outlines them on the
timeline). The verdict (verdict.py) decides among them in this order; the stall watch reads `hang`; the UI reads the
whole table from the server (`GET /api/v1/session`'s `verdict_classes`), never a copy of its own; `records.VerdictClass`
is the same names for mypy (a test ties the two).

Invariant: a class is added here and decided by one rule in verdict.py, with its case in the verdict's tests and the
fault corpus (bench/bench_verdict.py); nothing else lists the classes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class VerdictKind:
    name: str
    words: str  # the verdict's sentence starts with these
    hang: bool  # a stalled run given this verdict is hung at once (in_collective: only once nobody moved)
    names_culprits: bool  # its culprits are the likely cause: outlined on the timeline, named in the notification


CLASSES: tuple[VerdictKind, ...] = (
    VerdictKind("not_stuck", "not stuck: every lane is within its usual time", hang=False, names_culprits=False),
    VerdictKind("dead_process", "hung: a process died", hang=True, names_culprits=True),
    VerdictKind("unresponsive", "hung: a process cannot answer", hang=True, names_culprits=True),
    VerdictKind("desync", "hung: ranks desynchronized", hang=True, names_culprits=True),
    VerdictKind("late_rank", "hung: a rank never reached the collective", hang=True, names_culprits=True),
    VerdictKind("unfinished", "hung: a rank never finished the collective", hang=True, names_culprits=True),
    VerdictKind("in_collective", "hung in a collective", hang=False, names_culprits=True),
    VerdictKind("not_collective", "stuck outside the collectives", hang=False, names_culprits=True),
    VerdictKind("slow_healthy", "slow, not stuck", hang=False, names_culprits=False),
    VerdictKind("unknown", "no verdict", hang=False, names_culprits=True),
)
BY_NAME: dict[str, VerdictKind] = {k.name: k for k in CLASSES}
HANG_CLASSES: tuple[str, ...] = tuple(k.name for k in CLASSES if k.hang)


def as_json() -> dict[str, dict[str, object]]:
    """The table as the UI reads it: name -> words, hang, names_culprits."""
    return {k.name: {key: v for key, v in asdict(k).items() if key != "name"} for k in CLASSES}
