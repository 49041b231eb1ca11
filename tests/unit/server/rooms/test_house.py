"""The house: a feature is a folder under server/rooms/ with a `feature.py` declaring one Room, found (not listed),
assembled on the kernel in the order its `after` says, started after the kernel's parts and stopped before them, its
routes mounted with their access declared; a room dropped in as a folder is served with no other file touched."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Iterator

import httpx
import pytest

import rl_insight.server.rooms as rooms_package
from rl_insight.protocol.reply import CONTROL_KINDS
from rl_insight.server.config import ServerConfig
from rl_insight.server.control.run_control import RunControlBuilder
from rl_insight.server.rooms.house import RoomError, discover, furnish
from rl_insight.server.state import AppState
from tests.conftest import IN_PROCESS, start_server


def test_the_rooms_are_found_in_the_order_their_after_says() -> None:
    names = [room.name for room in discover()]
    assert set(names) >= {"alerting", "profiles", "stacks"}
    for room in discover():
        assert all(names.index(before) < names.index(room.name) for before in room.after), room.name
        assert room.summary.strip(), f"room {room.name} says nothing about itself"


def test_furnished_every_kind_of_control_request_has_its_one_book_and_the_rooms_stop_before_the_kernel(
        tmp_path: Path) -> None:
    st = AppState(ServerConfig(port=1, host="127.0.0.1", data_dir=str(tmp_path), **IN_PROCESS))
    kernel_parts = [p.name for p in st.life.parts]
    assert st.control.missing() == sorted(kind.key for kind in CONTROL_KINDS)  # (the kernel keeps no kind itself)
    furnish(st, discover())
    assert st.control.missing() == [] and set(st.control.sources) == {kind.key for kind in CONTROL_KINDS}
    names = [p.name for p in st.life.parts]
    assert names[:len(kernel_parts)] == kernel_parts  # (rooms start after the kernel, stop before it)
    assert {"profiles", "stack snapshots", "notifications"} <= set(names[len(kernel_parts):])
    with pytest.raises(ValueError, match="already have their book"):
        st.control.add("stacks", st.control.sources["stacks"])
    with pytest.raises(ValueError, match="no kind of request: 'flamegraph'"):
        RunControlBuilder(st.step_clock).add("flamegraph", st.control.sources["profile"])
    st.start()
    st.stop()


def test_a_server_whose_rooms_leave_a_kind_of_request_without_a_book_refuses_to_start(tmp_path: Path) -> None:
    st = AppState(ServerConfig(port=1, host="127.0.0.1", data_dir=str(tmp_path), **IN_PROCESS))
    with pytest.raises(RoomError, match=r"no room keeps the control requests of kind \['profile', 'stacks'\]"):
        furnish(st, [])  # (no rooms: the kernel keeps no kind of request itself)


@pytest.fixture()
def extra_rooms(tmp_path: Path) -> Iterator[Path]:
    """A folder searched for rooms besides server/rooms/ (as a plugin's would be), removed afterwards."""
    folder = tmp_path / "rooms"
    folder.mkdir()
    rooms_package.__path__.append(str(folder))
    try:
        yield folder
    finally:
        rooms_package.__path__.remove(str(folder))
        for name in [m for m in sys.modules if m.startswith("rl_insight.server.rooms.") and
                     getattr(sys.modules[m], "__file__", "") and str(folder) in sys.modules[m].__file__]:
            del sys.modules[name]


def _room(folder: Path, name: str, feature: str) -> None:
    (folder / name).mkdir()
    (folder / name / "__init__.py").write_text(f'"""The {name} room (a test\'s)."""\n')
    (folder / name / "feature.py").write_text(textwrap.dedent(feature))


def test_a_room_dropped_in_as_a_folder_is_assembled_started_and_served_with_its_access_declared(
        extra_rooms: Path, tmp_path: Path) -> None:
    _room(extra_rooms, "greetings", '''
        """Says hello: a room of one route, one running part and one hook."""
        from fastapi import APIRouter
        from rl_insight.server.access.declared import declare
        from rl_insight.server.rooms.house import Room

        SAID = []

        def assemble(st):
            st.life.add("greetings", lambda: SAID.append("start"), lambda: SAID.append("stop"))
            return {"word": "hello", "after profiles": "profiles" in st.rooms}

        def routes(st, parts):
            r = APIRouter(prefix="/api/v1/greetings")

            @r.get("", **declare(st.auth, "read", "global"))
            async def greet() -> dict:
                return parts

            return [r]

        FEATURE = Room("greetings", __doc__, assemble, routes, after=("profiles",))
    ''')
    srv = start_server(tmp_path / "srv", token="t0ken-for-the-greetings-room", in_process=True)
    try:
        url = srv.url + "/api/v1/greetings"
        assert httpx.get(url).status_code == 401  # (its access, declared where it is registered, enforced)
        said = httpx.get(url, headers={"Authorization": "Bearer t0ken-for-the-greetings-room"}).json()
        assert said == {"word": "hello", "after profiles": True}
        spec = httpx.get(srv.url + "/openapi.json").json()
        assert spec["paths"]["/api/v1/greetings"]["get"]["x-rl-insight-access"]["who"] == "read"
        feature = sys.modules["rl_insight.server.rooms.greetings.feature"]
        assert feature.SAID == ["start"]
    finally:
        srv.stop()
    assert feature.SAID == ["start", "stop"]


@pytest.mark.parametrize("feature, says", [
    ('FEATURE = None\n', r"rl_insight\.server\.rooms\.broken\.feature declares no FEATURE = Room\(name='broken'"),
    ('from rl_insight.server.rooms.house import Room\n'
     'FEATURE = Room("broken", "x", lambda st: None, lambda st, p: [], after=("nowhere",))\n',
     r"room 'broken' comes after \['nowhere'\], which no room is"),
    ('from rl_insight.server.rooms.house import Room\n'
     'FEATURE = Room("broken", "x", lambda st: None, lambda st, p: [], after=("cyclic",))\n',
     r"rooms wait on each other: \['broken', 'cyclic'\]"),
])
def test_a_room_that_cannot_be_furnished_is_refused_by_name(extra_rooms: Path, feature: str, says: str) -> None:
    _room(extra_rooms, "broken", feature)
    _room(extra_rooms, "cyclic", 'from rl_insight.server.rooms.house import Room\n'
          'FEATURE = Room("cyclic", "x", lambda st: None, lambda st, p: [], after=("broken",))\n')
    with pytest.raises(RoomError, match=says):
        discover()
