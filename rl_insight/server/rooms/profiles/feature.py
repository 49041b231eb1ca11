"""The profiles room: a profile of chosen steps on chosen processes, asked on the run's ingest replies, its traces
uploaded in chunks and analysed in a bounded child process (`rl-insight profile`, the run page's Profile button)."""

from __future__ import annotations

from typing import Iterable

from fastapi import APIRouter

from ...fleet.sharing import shared_records
from ...state import AppState
from ..house import Room
from .book import ProfileBook
from .routes import build_router
from .shared import shared_requests


def assemble(st: AppState) -> ProfileBook:
    cfg = st.config
    book = ProfileBook(cfg.profiles_dir, clock=st.step_clock, analysis_timeout_s=cfg.profile_analysis_timeout_s,
                       analysis_max_memory_bytes=cfg.profile_analysis_max_memory_bytes,
                       run_exists=st.runs.exists if st.reader is not None else None,
                       shared=shared_requests(shared_records(st.backend, "profile"), cfg.shared_dir,
                                              cfg.profiles_dir))
    st.life.add("profiles", stop=book.close)
    st.clients.on_silent.append(book.process_silent)  # a process killed mid-window: say so
    if st.writer is not None:  # a run removed by retention takes its traces with it
        st.writer.on_runs_deleted.append(lambda keys: book.forget_runs(drop=keys))
    st.control.add("profile", book)
    return book


def routes(st: AppState, book: ProfileBook) -> Iterable[APIRouter]:
    return [build_router(st, book)]


def profiles_of(st: AppState) -> ProfileBook:
    """The profiles room's book (for the rooms and core routes that show what it knows)."""
    book: ProfileBook = st.rooms["profiles"]
    return book


FEATURE: Room[ProfileBook] = Room("profiles", __doc__ or "", assemble, routes, cli=("profile",))
