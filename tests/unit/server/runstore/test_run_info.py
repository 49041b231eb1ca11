"""Run config and tags: what init(config=...) describes, through the wire, into the run store and API."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest

import rl_insight
from rl_insight.client.runinfo import MAX_KEYS, describe, flatten
from rl_insight.protocol import decode_batch
from rl_insight.server.runstore import queries as q
from rl_insight.server.runstore.reader import RunStoreReader
from rl_insight.server.runstore.rows import SampleRow
from rl_insight.server.runstore.writer import RunStoreWriter
from tests.conftest import wait_until

SERVER_ON_A_PORT = "the rl_insight client sends through the stdlib, not httpx"  # (tests/lanes.py)


class DictConfigLike:
    """OmegaConf's DictConfig shape: items(), keys(), [], get(), and an interpolation that fails to resolve."""

    def __init__(self, d: dict) -> None:
        self._d = d

    def keys(self):
        return self._d.keys()

    def __getitem__(self, k):
        v = self._d[k]
        if v == "${missing}":
            raise KeyError("Interpolation key 'missing' not found")
        return DictConfigLike(v) if isinstance(v, dict) else v

    def items(self):
        for k, v in self._d.items():
            if v == "${missing}":
                raise KeyError("Interpolation key 'missing' not found")
            yield k, DictConfigLike(v) if isinstance(v, dict) else v

    def get(self, k, default=None):
        v = self._d.get(k, default)
        return DictConfigLike(v) if isinstance(v, dict) else v


def test_describe_flattens_redacts_and_tags() -> None:
    cfg = {
        "trainer": {"tags": ["grpo", "7b"], "total_epochs": 3, "wandb_api_key": "sk-123"},
        "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}, "rollout": {"name": "vllm", "n": 5}},
        "server": {"url": "http://h:18080", "token": "abc"},
        "big": 2**60,
        "nan": float("nan"),
        "empty": {},
        "ranks": [0, 1],
    }
    d = describe(cfg, env_tags="night, grpo")
    c = d["config"]
    assert c["actor_rollout_ref.actor.optim.lr"] == 1e-6 and c["actor_rollout_ref.rollout.name"] == "vllm"
    assert c["trainer.wandb_api_key"] == "***" and c["server.token"] == "***"  # secrets never leave the process
    assert c["big"] == str(2**60) and c["nan"] == "nan" and c["empty"] == "{}" and c["ranks"] == "[0, 1]"
    assert d["tags"] == ["grpo", "7b", "night"]
    assert describe(None) is None and describe({}) is None


def test_describe_survives_dictconfig_quirks_and_caps_size() -> None:
    flat = flatten(DictConfigLike({"a": {"b": 1, "c": "${missing}"}, "d": 2}))
    assert flat == {"a.b": 1, "a.c": "<unreadable>", "d": 2}  # one bad interpolation costs only its own key
    huge = {f"k{i}": "x" * 5000 for i in range(MAX_KEYS + 50)}
    flat = flatten(huge)
    assert len(flat) == MAX_KEYS and all(len(v) <= 1024 for v in flat.values())
    deep: dict = {}
    node = deep
    for _ in range(50):
        node["n"] = {}
        node = node["n"]
    assert len(flatten(deep)) == 1  # depth is bounded; nothing raised


def test_protocol_keeps_valid_entries_and_drops_the_rest() -> None:
    body = {"v": 1, "client": {"id": "c1", "project": "p", "experiment_name": "e", "run": {
        "config": {"lr": 1e-6, "name": "x\ud800y", "nested": {"no": 1}, "": 1, "big": 2**70, "ok": True, "none": None},
        "tags": ["a", 1, "b" * 500, "c"]}}}
    b = decode_batch(body)
    assert b.client.run_config == {"lr": 1e-6, "name": "x\ufffdy", "big": str(2**70), "ok": True, "none": None}
    assert b.client.run_tags == ["a", "c"]
    assert decode_batch({"v": 1, "client": {"id": "c1", "run": "junk"}}).client.run_config is None


def test_old_store_is_migrated_without_losing_data(tmp_path: Path) -> None:
    path = tmp_path / "runstore.sqlite"
    w = RunStoreWriter(path)
    w.put_samples([SampleRow("p", "e", "loss", "g", "{}", 1.0, 1.0, 0.5)])
    assert w.flush()
    w.close()
    conn = sqlite3.connect(path)  # make it look like a version-1 store (before runs.config/tags)
    conn.execute("ALTER TABLE runs DROP COLUMN config")
    conn.execute("ALTER TABLE runs DROP COLUMN tags")
    conn.execute("ALTER TABLE fleet_clients DROP COLUMN process")  # (and before version 7's column)
    conn.execute("DROP TABLE fleet_records")
    conn.execute("DROP TABLE span_lod")
    conn.execute("DROP TABLE span_lod_dirty")
    conn.execute("ALTER TABLE series DROP COLUMN n_samples")  # (and before version 9's totals)
    conn.execute("ALTER TABLE series DROP COLUMN last_step")
    conn.execute("ALTER TABLE series DROP COLUMN logged_name")  # (and before version 11's)
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()
    w = RunStoreWriter(path)
    w.put_run_info("p", "e", {"lr": 0.1}, ["x"])
    assert w.flush()
    run = q.get_run(RunStoreReader(path).conn(), 1, include_config=True)
    assert run["config"] == {"lr": 0.1} and run["tags"] == ["x"] and run["last_step"] == 1.0
    assert q.series(RunStoreReader(path).conn(), 1, "loss")["series"][0]["points"]
    listed = q.metric_names(RunStoreReader(path).conn(), 1)  # the totals of the samples stored before the upgrade
    assert [(m["name"], m["samples"], m["last_step"], m["logged"]) for m in listed] == [("loss", 1, 1.0, "loss")]
    w.close()
    from rl_insight.server.runstore.backend import SCHEMA_VERSION

    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 12
    assert "process" in {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(fleet_clients)")}
    assert sqlite3.connect(path).execute("SELECT count(*) FROM fleet_records").fetchone()[0] == 0
    assert sqlite3.connect(path).execute("SELECT count(*) FROM span_lod").fetchone()[0] == 0


def test_config_reaches_the_run_api_and_again_after_a_server_restart(server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server.url)
    monkeypatch.setenv("RL_INSIGHT_TAGS", "from-env")
    rl_insight.init(
        project="p", experiment_name="cfg", config={"trainer": {"tags": ["t1"]}, "lr": 3e-4, "token": "hide"}
    )
    rl_insight.metric_gauge("training/global_step", 1.0)
    assert rl_insight.flush(10)
    run = wait_until(lambda: (httpx.get(server.url + "/api/v1/runs").json()["runs"] or [None])[0], what="the run")
    assert run["tags"] == ["t1", "from-env"]
    full = httpx.get(f"{server.url}/api/v1/runs/{run['id']}").json()
    assert full["config"]["lr"] == 3e-4 and full["config"]["token"] == "***" and full["duration_s"] >= 0


def test_secrets_the_round_three_probe_read_back_are_masked_through_the_run_api(server) -> None:
    """Sent by a client that redacts nothing (the server redacts again): a key inside a command line, an Azure
    connection string's AccountKey, and keys named sas, session_id and pass (issue 49 item 14)."""
    import time

    config = {
        "cmd": "python -m verl.trainer.main_ppo --wandb_api_key=abcdef0123456789 trainer.n_gpus_per_node=8",
        "cmd2": "python train.py --hf_token hf_notashape12 --lr 1e-5",
        "storage": "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Zm9vYmFyYmF6cXV4cXV1eA==;"
                   "EndpointSuffix=core.windows.net",
        "blob.sas": "sv=2022-11-02&ss=b&srt=co&sp=rl&sig=Q2xlYXJseUFTaWduYXR1cmU%3D",
        "http.session_id": "3f2a9c8e-live-session", "db.pass": "hunter2-pass", "trainer.max_tokens": 512,
        "trainer.num_passes": 2,
    }
    body = {"v": 1, "client": {"id": "c", "project": "p", "experiment_name": "secrets", "run": {"config": config}},
            "series": [{"k": "g", "n": "training/global_step"}], "samples": [[0, time.time(), 1, 1.0]]}
    assert httpx.post(server.url + "/api/v1/ingest", json=body).status_code == 200
    run = wait_until(lambda: next((r for r in httpx.get(server.url + "/api/v1/runs").json()["runs"]
                                   if r["experiment_name"] == "secrets"), None), what="the run")
    got = httpx.get(f"{server.url}/api/v1/runs/{run['id']}").json()["config"]
    text = __import__("json").dumps(got)
    for secret in ("abcdef0123456789", "hf_notashape12", "Zm9vYmFyYmF6cXV4cXV1eA", "Q2xlYXJseUFTaWduYXR1cmU",
                   "3f2a9c8e", "hunter2"):
        assert secret not in text, (secret, got)
    assert got["trainer.max_tokens"] == 512 and got["trainer.num_passes"] == 2  # not secrets
    assert "trainer.n_gpus_per_node=8" in got["cmd"] and "--lr 1e-5" in got["cmd2"]  # the rest of the line kept
