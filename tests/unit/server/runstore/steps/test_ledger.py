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
