"""How the app finds the rooms, orders them, assembles them on the kernel and gathers their routes (the rooms' package
docstring says what a room is and what stays true).
"""


from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, TypeVar

from fastapi import APIRouter

from ..state import AppState

P = TypeVar("P")


@dataclass(frozen=True)
class Room(Generic[P]):
    """A feature, as the kernel sees it. `assemble` makes the room's parts from the kernel's (adding what runs to
    `st.life` and hooking onto the kernel's events) and returns them; they are kept as `st.rooms[name]`. `routes`
    gives the room's routers, built from the kernel and those parts; with `routes_need_store` they are mounted only
    when the server keeps a run store. `cli` names the `rl-insight` commands that are this room's (they live in
    `rl_insight/cli/`, the only layer that prints: docs/decisions/043)."""

    name: str
    summary: str
    assemble: Callable[[AppState], P]
    routes: Callable[[AppState, P], Iterable[APIRouter]]
    after: tuple[str, ...] = ()
    routes_need_store: bool = False
    cli: tuple[str, ...] = ()


class RoomError(RuntimeError):
    """A room that cannot be furnished: its folder declares no Room of its name, or its `after` is wrong."""


def discover(package: str = __package__ or "") -> list[Room[Any]]:
    """Every room under this package (or another package of rooms), ordered so that each comes after the rooms
    its `after` names; among rooms free to go in any order, by name (the same order on every start)."""
    found: dict[str, Room[Any]] = {}
    for info in sorted(pkgutil.iter_modules(importlib.import_module(package).__path__), key=lambda i: i.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{package}.{info.name}.feature")
        room = getattr(module, "FEATURE", None)
        if not isinstance(room, Room) or room.name != info.name:
            raise RoomError(f"{package}.{info.name}.feature declares no FEATURE = Room(name={info.name!r}, ...)")
        found[room.name] = room
    return _in_order(found)


def _in_order(rooms: dict[str, Room[Any]]) -> list[Room[Any]]:
    ordered: list[Room[Any]] = []
    placed: set[str] = set()
    for room in rooms.values():
        unknown = set(room.after) - set(rooms)
        if unknown:
            raise RoomError(f"room {room.name!r} comes after {sorted(unknown)}, which no room is")
    while len(ordered) < len(rooms):
        ready = [r for r in rooms.values() if r.name not in placed and placed.issuperset(r.after)]
        if not ready:
            raise RoomError(f"rooms wait on each other: {sorted(set(rooms) - placed)}")
        for room in ready:  # (already by name)
            ordered.append(room)
            placed.add(room.name)
    return ordered


def furnish(st: AppState, rooms: Iterable[Room[Any]]) -> None:
    """Assemble each room on the kernel, in order; then check that every kind of control request has its book."""
    for room in rooms:
        st.rooms[room.name] = room.assemble(st)
    missing = st.control.missing()
    if missing:
        raise RoomError(f"no room keeps the control requests of kind {missing} (protocol/reply.py CONTROL_KINDS)")


def routers(st: AppState, rooms: Iterable[Room[Any]]) -> list[APIRouter]:
    """The rooms' routers, in the rooms' order (those needing the run store only when there is one)."""
    out: list[APIRouter] = []
    for room in rooms:
        if room.routes_need_store and st.reader is None:
            continue
        out.extend(room.routes(st, st.rooms[room.name]))
    return out

