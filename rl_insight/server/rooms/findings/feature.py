"""The findings room: what every detector found in a run, in one shape — a hung job (the stacks room's verdict), the
lanes that make every step slower (the fail-slow radar) — for the run page, `rl-insight findings` and the API."""

from __future__ import annotations

from typing import Iterable

from fastapi import APIRouter

from ...state import AppState
from ..house import Room
from .routes import build_router


def assemble(st: AppState) -> None:
    """Nothing runs yet: the radar reads the run's stored steps when asked (routes.py keeps each run's answer until
    its next step)."""


def routes(st: AppState, parts: None) -> Iterable[APIRouter]:
    return [build_router(st)]


FEATURE: Room[None] = Room("findings", __doc__ or "", assemble, routes, after=("stacks",), routes_need_store=True,
                           cli=("findings",))
