"""The ledger's read model (runstore/steps/ledger.py): devices per rollout replica from the run's config, said in
words, and the stored per-class rows weighed into device-seconds that still tile the step."""

from __future__ import annotations

from rl_insight.server.runstore.steps.ledger import rollout_devices, weigh
from rl_insight.server.runstore.steps.step_stats import ledger_rows

S = 10**9


def test_devices_per_replica_come_from_the_config_or_say_they_do_not() -> None:
    nested = {"actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": 4}}}
    assert rollout_devices(nested) == (4.0, "each rollout replica counts 4 devices (the run's config: "
                                            "actor_rollout_ref.rollout.tensor_model_parallel_size)")
    assert rollout_devices({"actor_rollout_ref.rollout.tensor_model_parallel_size": 2})[0] == 2.0
    for unknown in (None, {}, {"actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": "4"}}},
                    {"rollout.tp_size": 10**6}, {"rollout.tp_size": True}):
        n, note = rollout_devices(unknown)
        assert n == 1.0 and "does not say its tensor-parallel size" in note


def test_stored_rowsweighed_by_devices_still_tile_the_step() -> None:
    spans = [{"lane": "replica_0", "name": "vllm_generate", "kind": "state", "start_ns": 0, "end_ns": 6 * S},
             {"lane": "rank_0", "name": "train_batch", "kind": "state", "start_ns": 6 * S, "end_ns": 10 * S},
             {"lane": "experiment=e/trajectory=1", "name": "agent_turn", "kind": "state", "start_ns": 0,
              "end_ns": 10 * S}]
    rows = ledger_rows(spans, 0, 10 * S, 10 * S)
    by = {(lane, name): v for lane, name, v in rows}
    assert by[("@ledger_lanes", "trainer")] == 1 and by[("@ledger_lanes", "rollout")] == 1
    assert ("@ledger_lanes", "other") not in by  # a trajectory's lane is not a worker
    reasons, devices = weigh({k: v for (lane, k), v in by.items() if lane == "@ledger"},
                              {k: v for (lane, k), v in by.items() if lane == "@ledger_lanes"}, per_replica=4)
    assert devices == 5 and sum(reasons.values()) == 10 * 5
    assert reasons == {"generating": 24, "waiting: training": 16, "waiting: rollout": 6, "training": 4}


def test_a_price_per_device_hour_prices_the_window_and_what_did_not_train(tmp_path) -> None:
    import httpx

    from tests.conftest import start_server
    from tests.unit.server.routes.test_read_results import _steps_of_a_run

    srv = start_server(tmp_path, gpu_hour_cost=3.6)  # 0.001 a device-second
    try:
        _steps_of_a_run(srv.url, "q", "priced")
        srv.app.state.st.writer.flush(10)
        rid = httpx.get(srv.url + "/api/v1/runs").json()["runs"][0]["id"]
        d = httpx.get(f"{srv.url}/api/v1/runs/{rid}/ledger").json()
    finally:
        srv.stop()
    assert d["steps"] and d["cost"]["per_device_hour"] == 3.6
    assert abs(d["cost"]["total"] - d["run"]["total"] / 1000) < 1e-9
    assert abs(d["cost"]["not_training"] - (d["run"]["total"] - d["run"]["reasons"]["training"]) / 1000) < 1e-9
    assert abs(d["cost"]["per_step"] * len(d["steps"]) - d["cost"]["total"]) < 1e-9
    assert max(s["devices"] for s in d["steps"]) == 3  # one trainer rank, two replicas (the lanes with a state)
    for s in d["steps"]:
        assert abs(sum(s["reasons"].values()) - s["devices"] * s["wall_s"]) < 1e-6


RANK_1 = r"""
import sys, time
import rl_insight
rl_insight.init(project="p", experiment_name="crash")
block = rl_insight.trace_state("update_actor", state_lane_id="rank_1")
block.__enter__()
if sys.argv[1] == "dies":
    assert rl_insight.flush(10)
    print("ready", flush=True)
    time.sleep(600)  # killed here, its state open
time.sleep(0.3)
block.__exit__(None, None, None)
rl_insight.finish(10)
"""


def test_a_process_killed_mid_state_and_restarted_is_lost_time(tmp_path, monkeypatch) -> None:
    """Real processes: rank_1's is killed in its update (SIGKILL: no finish) and another takes its lane 2.5 s later;
    the server cuts the open state short when the process falls silent, and the step's ledger counts the state and
    the wait for the restart as lost on rank_1, and rank_0's wait meanwhile too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import httpx

    import rl_insight
    from tests.conftest import start_server

    srv = start_server(tmp_path, client_silence_s=1.0)
    env = {**os.environ, "RL_INSIGHT_SERVER_URL": srv.url}
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
    dies = subprocess.Popen([sys.executable, "-c", RANK_1, "dies"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        rl_insight.init(project="p", experiment_name="crash")
        with rl_insight.trace_state("update_actor", state_lane_id="rank_0"):
            time.sleep(0.2)
        rl_insight.metric_gauge("training/global_step", 1)
        assert rl_insight.flush(10)
        assert dies.stdout is not None and dies.stdout.readline().strip() == "ready"
        dies.send_signal(signal.SIGKILL)
        dies.wait(10)
        time.sleep(2.5)  # the job stands still until the process is back
        subprocess.run([sys.executable, "-c", RANK_1, "restarted"], env=env, timeout=60, check=True)
        with rl_insight.trace_state("update_actor", state_lane_id="rank_0"):
            time.sleep(0.2)
        rl_insight.metric_gauge("training/global_step", 2)
        rl_insight.finish(10)
        srv.app.state.st.writer.flush(10)
        rid = httpx.get(srv.url + "/api/v1/runs").json()["runs"][0]["id"]
        step = httpx.get(f"{srv.url}/api/v1/runs/{rid}/ledger", params={"steps": "2-2"}).json()["steps"][0]
    finally:
        dies.kill()
        srv.stop()
    lost = step["reasons"].get("lost: crash or restart", 0.0)
    assert abs(sum(step["reasons"].values()) - step["wall_s"] * step["devices"]) < 1e-6
    # rank_1 from its cut-short state to the restart (≥ 2.5 s) and rank_0 while it waited for nothing else (≥ 2.5 s)
    assert lost >= 5.0 and step["devices"] == 2, step
    assert step["reasons"]["training"] >= 0.45, step  # rank_0's update and the restarted process's
