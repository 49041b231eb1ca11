"""A run's findings over HTTP and the CLI (rooms/findings/): a rank that computes longer than its peers from some
step on is a straggler finding with its cause; a healthy run has none; a kind that does not exist is refused by
name; a run that does not exist is a 404."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import start_server

LABELS = {"project": "p", "experiment_name": "radar"}


def _job(ranks: int, steps: int, slow_rank: int | None, from_step: int, seed: int) -> dict[str, Any]:
    """One batch: each step the ranks load, compute (the slow rank 25 % longer from `from_step`), all-reduce (the
    last arrival plus 0.2 s) and the step metric is logged as the step ends."""
    rng = random.Random(seed)
    t = time.time() - steps * 2.0 - 10
    spans, samples = [], []
    n = 0
    for step in range(1, steps + 1):
        arrive = {}
        for r in range(ranks):
            c = (1.25 if r == slow_rank and step >= from_step else 1.0) * rng.uniform(0.997, 1.003)
            for name, a, b in (("get_batch", t, t + 0.1), ("forward_backward", t + 0.1, t + 0.1 + c)):
                spans.append({"id": f"{n:016x}", "name": name, "lane": f"rank_{r}", "kind": "state",
                              "start_ns": int(a * 1e9), "end_ns": int(b * 1e9), "attributes": LABELS})
                n += 1
            arrive[r] = t + 0.1 + c
        end = max(arrive.values()) + 0.2
        for r in range(ranks):
            spans.append({"id": f"{n:016x}", "name": "all_reduce", "lane": f"rank_{r}", "kind": "state",
                          "start_ns": int(arrive[r] * 1e9), "end_ns": int(end * 1e9), "attributes": LABELS})
            n += 1
        samples.append([0, end + 0.001, step, step])
        t = end + 0.01
    return {"v": 1, "client": {"id": "job", **LABELS}, "series": [{"k": "g", "n": "training/global_step",
                                                                      "l": LABELS}],
            "samples": samples, "spans": spans}


@pytest.fixture
def server(tmp_path: Path):
    srv = start_server(tmp_path, in_process=True, stall_snapshots=False)
    yield srv
    srv.stop()


def _run(srv: Any, body: dict[str, Any]) -> int:
    assert httpx.post(srv.url + "/api/v1/ingest", json=body).status_code == 200
    srv.app.state.st.writer.flush(10)
    return httpx.get(srv.url + "/api/v1/runs").json()["runs"][0]["id"]


def test_a_slow_rank_is_a_straggler_finding_with_its_cause_and_the_cli_prints_it(
        server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    rid = _run(server, _job(8, 24, slow_rank=3, from_step=10, seed=4))
    answer = httpx.get(f"{server.url}/api/v1/runs/{rid}/findings").json()
    assert set(answer["kinds"]) == {"hang", "straggler"}
    (f,) = answer["findings"]
    assert (f["kind"], f["subject"], f["cause"]) == ("straggler", "rank_3", "compute")
    assert 10 <= f["first_step"] <= 12 and f["last_step"] == 24 and f["open"] is True
    assert f["excess_s"] == pytest.approx(0.25, rel=0.2) and f["steps"] >= 10
    assert "rank_3" in f["sentence"] and f["evidence"] and f["next"]
    assert httpx.get(f"{server.url}/api/v1/runs/{rid}/findings", params={"kind": "hang"}).json()["findings"] == []
    from rl_insight.cli.main import main

    with pytest.raises(SystemExit) as done:
        main(["findings", "--run", str(rid), "--server-url", server.url])
    said = capsys.readouterr().out
    assert done.value.code == 1, said  # an open finding
    assert "[straggler] rank_3: compute" in said and "check next:" in said


def test_a_healthy_run_has_no_finding_and_bad_asks_are_refused_by_name(server: Any) -> None:
    rid = _run(server, _job(8, 24, slow_rank=None, from_step=0, seed=9))
    assert httpx.get(f"{server.url}/api/v1/runs/{rid}/findings").json()["findings"] == []
    bad = httpx.get(f"{server.url}/api/v1/runs/{rid}/findings", params={"kind": "nope"})
    assert bad.status_code in (400, 422) and "nope" in bad.text and "straggler" in bad.text
    missing = httpx.get(f"{server.url}/api/v1/runs/9999/findings")
    assert missing.status_code == 404
