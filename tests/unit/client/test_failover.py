"""Several servers in RL_INSIGHT_SERVER_URL (issue 24, item 3), against real ingest servers: a process sticks to one,
moves to the next when it stops answering or answers 5xx, and stays there; the new server gets every counter's
cumulative total and the open states again, so totals are exact; bad lists are refused with a clear line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import rl_insight
from rl_insight.client.transport import FailoverTransport, Response, TransportError
from rl_insight.client.urls import parse_server_url, parse_server_urls
from tests.conftest import start_server, wait_until


def total(url: str, name: str) -> float | None:
    """The counter's value on that server's /metrics (None: not there)."""
    m = re.search(rf"^rl_insight_monitor_{name}_total\{{[^}}]*\}} (\S+)$", httpx.get(url + "/metrics").text, re.M)
    return float(m.group(1)) if m else None


def test_a_process_moves_on_stays_there_and_totals_stay_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = start_server(tmp_path / "a"), start_server(tmp_path / "b")
    port_a = int(a.url.rsplit(":", 1)[1])
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", f"{a.url}, {b.url}")
        rl_insight.init("p", "moves")
        rl_insight.metric_count("done", 3)
        with rl_insight.trace_state("train_batch", state_lane_id="rank_0"):
            assert rl_insight.flush(10)
            assert total(a.url, "done") == 3.0 and total(b.url, "done") is None  # sticks to the first
            a.stop()  # the server goes away mid-state
            rl_insight.metric_count("done", 2)
            assert rl_insight.flush(15)
            assert total(b.url, "done") == 5.0  # the whole total, not the 2 since the move
            # the state opened on A is open on B too (resent with the totals)
            opened = httpx.get(b.url + "/api/v1/spans/open").json()["spans"]
            assert [s["name"] for s in opened if s["lane"] == "rank_0"] == ["train_batch"]
        a2 = start_server(tmp_path / "a2", port=port_a)  # A is back: the process stays where it is
        try:
            rl_insight.metric_count("done", 1)
            assert rl_insight.flush(10)
            assert total(b.url, "done") == 6.0 and total(a2.url, "done") is None
        finally:
            a2.stop()
        rl_insight.finish()
        wait_until(lambda: httpx.get(b.url + "/api/v1/runs").json()["runs"][0]["status"] == "finished",
                   what="the run finished on the server it moved to")
    finally:
        b.stop()


class Scripted:
    """A transport that answers from a script (a status, or an exception), counting its calls."""

    def __init__(self, script: list[Any]) -> None:
        self.script, self.calls, self.closed = script, 0, 0

    def post(self, route: str, body: bytes, headers: dict[str, str]) -> Response:
        self.calls += 1
        step = self.script[min(self.calls, len(self.script)) - 1]
        if isinstance(step, Exception):
            raise step
        return Response(step, {})

    def close(self) -> None:
        self.closed += 1


def test_failover_tries_each_server_once_per_request_and_keeps_429_where_it_is() -> None:
    urls = parse_server_urls("http://a:1,http://b:2,http://c:3")
    made = {"http://a:1": Scripted([503, 200]), "http://b:2": Scripted([TransportError("refused")]),
            "http://c:3": Scripted([200, 429, 200])}
    t = FailoverTransport(urls, lambda u: made[u.text])
    assert t.post("/x", b"", {}).status == 200 and t.current.text == "http://c:3" and t.moves == 2
    assert t.post("/x", b"", {}).status == 429 and t.current.text == "http://c:3"  # busy is not down: no move
    assert t.post("/x", b"", {}).status == 200 and t.current.text == "http://c:3"
    down = FailoverTransport(urls[:2], lambda u: Scripted([TransportError("refused")]))
    with pytest.raises(TransportError, match="no server answered"):
        down.post("/x", b"", {})


def test_url_lists_are_parsed_once_each_and_bad_ones_are_named() -> None:
    assert [u.text for u in parse_server_urls("http://a:1, a:1,http://b:2/")] == ["http://a:1", "http://b:2"]
    assert parse_server_urls("h:9")[0].text == parse_server_url("h:9").text
    with pytest.raises(ValueError, match="names no server"):
        parse_server_urls(" , ")
    with pytest.raises(ValueError, match="ftp"):
        parse_server_urls("http://a:1,ftp://b")
