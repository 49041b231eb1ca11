"""The server's parts start in the order they were added and stop in the reverse order, once; a part whose start
never ran is not stopped; one failing stop is logged and the others still stop (server/workers/lifecycle.py); and
AppState adds its parts so that the run store's writer closes last (the rooms' parts: tests/unit/server/rooms/)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from rl_insight.server.config import ServerConfig
from rl_insight.server.state import AppState
from rl_insight.server.workers.lifecycle import Lifecycle
from tests.conftest import IN_PROCESS


def test_start_in_order_stop_in_reverse_and_a_failing_stop_costs_no_other(caplog: pytest.LogCaptureFixture) -> None:
    said: list[str] = []
    life = Lifecycle()
    life.add("a", lambda: said.append("start a"), lambda: said.append("stop a"))
    life.add("b", stop=lambda: 1 / 0)
    life.add("c", lambda: said.append("start c"), lambda: said.append("stop c"))
    life.start()
    with caplog.at_level(logging.WARNING, "rl_insight.server"):
        life.stop()
    assert said == ["start a", "start c", "stop c", "stop a"]
    assert "stopping b failed: division by zero" in caplog.text
    life.stop()  # (twice: nothing more)
    assert said[-1] == "stop a" and len(said) == 4


def test_a_part_whose_start_failed_is_not_stopped() -> None:
    said: list[str] = []
    life = Lifecycle()
    life.add("a", lambda: said.append("start a"), lambda: said.append("stop a"))
    life.add("b", lambda: 1 / 0, lambda: said.append("stop b"))
    with pytest.raises(ZeroDivisionError):
        life.start()
    life.stop()
    assert said == ["start a", "stop a"]


def test_a_part_added_ahead_of_another_stops_after_it_and_an_unknown_one_is_refused() -> None:
    said: list[str] = []
    life = Lifecycle()
    life.add("rounds", stop=lambda: said.append("rounds"))
    life.add("final", stop=lambda: said.append("final"), before="rounds")
    with pytest.raises(ValueError, match="no part 'nowhere' to add 'x' before"):
        life.add("x", before="nowhere")
    life.start()
    life.stop()
    assert said == ["rounds", "final"]


def test_the_servers_writer_closes_last_after_the_final_export_and_the_insight_rounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rl_insight.server.rooms import house
    from rl_insight.server.rooms.exports import feature as exports
    from rl_insight.server.rooms.exports.exporters import Exporters, LiveExporter

    monkeypatch.setattr(exports, "build_exporters", lambda cfg: Exporters([LiveExporter("stub", lambda p, e: None)]))
    st = AppState(ServerConfig(port=1, host="127.0.0.1", data_dir=str(tmp_path), **IN_PROCESS))
    house.furnish(st, house.discover())
    names = [p.name for p in st.life.parts]
    assert names[0] == "run store writer"  # (stopped last)
    assert names.index("final insight export") < names.index("insights")  # (exported after the rounds stop)
    assert names.index("exports") < names.index("final insight export")  # (closed after the final export)
    assert st.intake.on_samples  # (each batch's samples reach the exporters)
    st.start()
    st.stop()
