"""The stacks room: a snapshot of every thread's stack in a run's live processes (with torch's flight recorder),
grouped and judged (the verdict: hung, where, who), asked by people or by the stall watch when a lane stops moving
(`rl-insight stacks`, `rl-insight diagnose`, the run page)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from fastapi import APIRouter

from ...fleet.sharing import shared_snapshots
from ...state import AppState
from ..house import Room
from ..profiles.feature import profiles_of
from .book import StackBook
from .routes import build_router
from .stall_watch import StallWatch


@dataclass(frozen=True)
class Stacks:
    book: StackBook
    stall_watch: StallWatch | None  # (None: no insight rounds, or --no-stall-snapshots)


def assemble(st: AppState) -> Stacks:
    cfg = st.config
    conditions = st.conditions
    book = StackBook(Path(cfg.data_dir).expanduser() / "stacks", st.run_processes,
                     shared=shared_snapshots(st.backend), gone=st.clients.gone,
                     lanes_usual=lambda p, e: conditions.lanes_usual((p, e)))
    st.life.add("stack snapshots", book.start, book.stop)
    if st.writer is not None:  # a run removed by retention takes its snapshots with it
        st.writer.on_runs_deleted.append(lambda keys: book.forget_runs(drop=keys))
    st.control.add("stacks", book)
    watch = None
    if st.insight is not None and cfg.stall_snapshots:  # a stalled run's stacks, taken by the server
        watch = StallWatch(book, st.step_clock, conditions, interval_s=cfg.stall_snapshot_interval_s,
                           profiles=profiles_of(st), auto_profile=cfg.auto_profile_on_stall,
                           confirm_after_s=cfg.stall_confirm_s)
        st.insight.on_refresh.append(watch.on_insights)
    return Stacks(book, watch)


def routes(st: AppState, stacks: Stacks) -> Iterable[APIRouter]:
    return [build_router(st, stacks.book)]


def stacks_of(st: AppState) -> StackBook:
    """The stacks room's book (for the rooms and core routes that show what it knows)."""
    stacks: Stacks = st.rooms["stacks"]
    return stacks.book


FEATURE: Room[Stacks] = Room("stacks", __doc__ or "", assemble, routes, after=("profiles",), routes_need_store=True,
                             cli=("stacks", "diagnose"))
