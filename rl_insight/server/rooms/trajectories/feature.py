"""The trajectories room: a run's agent-loop trajectories per step (table, distributions, a trajectory's waterfall)
on the run page, read from the run store's trajectory index (docs/trajectories.md)."""

from __future__ import annotations

from typing import Iterable

from fastapi import APIRouter

from ...state import AppState
from ..house import Room
from .routes import build_router


def assemble(st: AppState) -> None:
    """Nothing runs: the writer keeps the index with the spans (runstore/trajectories/index.py)."""


def routes(st: AppState, parts: None) -> Iterable[APIRouter]:
    return [build_router(st)]


FEATURE: Room[None] = Room("trajectories", __doc__ or "", assemble, routes, routes_need_store=True)
