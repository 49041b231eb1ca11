"""Step 1 exists (issue 51 item 7): each step ends at its first step-metric sample, and the first step begins with
the run's first event, so the insights, the critical path and the step table all know it."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from tests.conftest import start_server


def test_the_first_step_begins_with_the_run(tmp_path: Path) -> None:
    srv = start_server(tmp_path, stall_snapshots=False)
    try:
        t0 = time.time() - 30
        lanes = {"project": "p", "experiment_name": "e"}
        spans = [{"id": f"{i:016x}", "name": "train_batch", "lane": "rank_0", "kind": "state",
                  "start_ns": int((t0 + 5 * i) * 1e9), "end_ns": int((t0 + 5 * i + 3) * 1e9), "attributes": lanes}
                 for i in range(3)]
        samples = [[0, t0 + 5 * i + 4, i + 1, i + 1] for i in range(3)]  # step i+1 logged as it ends
        body = {"v": 1, "client": {"id": "c", "project": "p", "experiment_name": "e"},
                "series": [{"k": "g", "n": "training/global_step", "l": lanes}], "samples": samples, "spans": spans}
        assert httpx.post(srv.url + "/api/v1/ingest", json=body).json()["accepted"] == 6
        srv.app.state.st.writer.flush(10)
        rid = httpx.get(srv.url + "/api/v1/runs").json()["runs"][0]["id"]
        steps = httpx.get(f"{srv.url}/api/v1/runs/{rid}/insights", params={"window_s": 600}).json()["steps"]
        assert [s["step"] for s in steps] == [1, 2, 3]
        assert steps[0]["start_ns"] == int(t0 * 1e9) and steps[0]["states"] == {"train_batch": 3.0}
        path = httpx.get(f"{srv.url}/api/v1/runs/{rid}/critical-path", params={"step": 1}).json()
        assert path["step"] == 1 and [e["name"] for e in path["elements"]] == ["train_batch"]
    finally:
        srv.stop()
