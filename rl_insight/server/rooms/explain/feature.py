"""The explain room: why a step took as long as it did (its critical path and what-ifs), where a window of steps went
(the goodput ledger: every device-second in one reason), and what changed between two runs (`rl-insight runs explain`,
`runs ledger`, `runs diff`, the run page's step breakdown)."""

from __future__ import annotations

from typing import Iterable

from fastapi import APIRouter

from ...state import AppState
from ..house import Room
from .routes import build_router


def assemble(st: AppState) -> None:
    """Nothing runs: the insight rounds keep the per-step rows it reads (runstore/steps/step_stats.py)."""


def routes(st: AppState, parts: None) -> Iterable[APIRouter]:
    return [build_router(st)]


FEATURE: Room[None] = Room("explain", __doc__ or "", assemble, routes, routes_need_store=True,
                           cli=("runs explain", "runs ledger", "runs diff"))
