"""Target registration: upstream payloads, validation (nothing written on error), file_sd format, DELETE."""

from __future__ import annotations

import json

import httpx
import pytest

from rl_insight.errors import InvalidInputError
from rl_insight.server.prometheus.targets import TargetRegistry, validate_target


def register(server, payload, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(server.url + "/api/v1/prometheus/targets", json=payload, headers=headers)


@pytest.mark.parametrize("raw,normalized", [
    ("10.0.0.5:8000", "10.0.0.5:8000"),
    ("node-01.cluster.local:9100", "node-01.cluster.local:9100"),
    ("[::1]:9090", "[::1]:9090"),
    ("[2001:db8::7]:443", "[2001:db8::7]:443"),
    (" localhost:1 ", "localhost:1"),
])
def test_valid_targets(raw, normalized) -> None:
    assert validate_target(raw) == normalized


@pytest.mark.parametrize("raw,needle", [
    ("10.0.0.5", "port is missing"),
    ("http://10.0.0.5:8000", "without scheme"),
    ("10.0.0.5:8000/metrics", "without scheme or path"),
    ("10.0.0.5:0", "1 to 65535"),
    ("10.0.0.5:70000", "1 to 65535"),
    ("300.1.1.1:80", "not a valid IPv4"),
    ("::1:9090", "brackets"),
    ("[fe80::zz]:80", "not a valid IPv6"),
    ("bad_host!:80", "not a valid hostname"),
    ("", "host:port"),
    (None, "host:port"),
])
def test_invalid_targets(raw, needle) -> None:
    with pytest.raises(InvalidInputError, match=needle):
        validate_target(raw)


def test_upstream_payload_shapes_and_file_sd_format(server) -> None:
    r = register(server, {
        "job_name": "vllm",
        "labels": {"model": "qwen"},
        "project": "p", "experiment_name": "e",
        "targets": ["10.0.0.1:8000", {"target": "10.0.0.2:8000", "labels": {"replica": 1, "model": "override"}}],
    })
    assert r.status_code == 200, r.text
    assert r.json()["target_count"] == 2 and r.json()["job_name"] == "vllm"
    groups = json.loads(server.config.targets_file.read_text())
    assert groups == [
        {
            "targets": ["10.0.0.1:8000"],
            "labels": {"__rl_insight_job": "vllm", "model": "qwen", "project": "p", "experiment_name": "e"},
        },
        {
            "targets": ["10.0.0.2:8000"],
            "labels": {
                "__rl_insight_job": "vllm",
                "model": "override",
                "replica": "1",
                "project": "p",
                "experiment_name": "e",
            },
        },
    ]
    # re-registering replaces labels (upsert keyed by job and target)
    register(server, {"job_name": "vllm", "targets": [{"target": "10.0.0.1:8000", "labels": {"replica": 0}}]})
    listed = httpx.get(server.url + "/api/v1/targets", params={"job": "vllm"}).json()["targets"]
    assert [t["labels"] for t in listed if t["target"] == "10.0.0.1:8000"] == [{"replica": "0"}]


def test_default_job_name(server) -> None:
    assert register(server, {"targets": ["h:1"]}).json()["job_name"] == "trainer_metrics"


@pytest.mark.parametrize("payload,needle", [
    ({"targets": []}, "non-empty list"),
    ({"targets": "h:1"}, "non-empty list"),
    ({"targets": ["h:1", "nope"]}, "port is missing"),
    ({"targets": [{"labels": {}}]}, "without 'target'"),
    ({"targets": [42]}, "must be a 'host:port' string"),
    ({"targets": ["h:1"], "labels": {"bad-name": "x"}}, "not a valid Prometheus label name"),
    ({"targets": ["h:1"], "labels": {"__meta": "x"}}, "not a valid Prometheus label name"),
    ({"targets": [{"target": "h:1", "labels": {"job": "x"}}]}, "set by Prometheus"),
    ({"targets": ["h:1"], "labels": ["x"]}, "must be an object"),
    ({"targets": ["h:1"], "job_name": "   "}, "job_name"),
    ({"targets": ["h:1"], "job_name": 5}, "job_name"),
    ({"targets": ["h:1"], "project": ""}, "project"),
])
def test_invalid_registration_is_400_as_upstream_and_writes_nothing(server, payload, needle) -> None:
    register(server, {"job_name": "keep", "targets": ["10.9.9.9:1"]})
    before = server.config.targets_file.read_bytes()
    r = register(server, payload)
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["detail"], str)  # upstream's shape: {"detail": "<text>"}
    assert needle in r.json()["detail"]
    assert server.config.targets_file.read_bytes() == before


def test_delete_target_job_and_experiment(server) -> None:
    register(server, {"job_name": "vllm", "project": "p", "experiment_name": "e1", "targets": ["a:1", "b:1"]})
    register(server, {"job_name": "tq", "project": "p", "experiment_name": "e2", "targets": ["c:1"]})
    register(server, {"job_name": "node", "targets": ["d:1", "e:1"]})
    def d(**q: str) -> httpx.Response:
        return httpx.delete(server.url + "/api/v1/targets", params=q)

    assert d(target="a:1").json()["removed"] == 1
    assert d(project="p", experiment_name="e2").json()["removed"] == 1
    assert d(job="node").json()["removed"] == 2
    assert d().status_code == 422  # refusing to delete everything by accident
    assert d(target="not a target").status_code == 422
    assert [t["target"] for t in httpx.get(server.url + "/api/v1/targets").json()["targets"]] == ["b:1"]


def test_registry_persists_and_recovers_from_corrupt_file(tmp_path) -> None:
    path = tmp_path / "targets" / "t.json"
    reg = TargetRegistry(path)
    reg.upsert("vllm", [("h:1", {"replica": "0"})])
    assert [t.to_api() for t in TargetRegistry(path).list()] == [
        {"job": "vllm", "target": "h:1", "labels": {"replica": "0"}}
    ]
    path.write_text("{ torn")
    reg = TargetRegistry(path)
    assert reg.list() == [] and reg.recovered_from is not None
    assert reg.recovered_from.read_text() == "{ torn"  # the damaged file is kept, not overwritten
    assert json.loads(path.read_text()) == []


def test_registry_cap(tmp_path) -> None:
    reg = TargetRegistry(tmp_path / "t.json", max_targets=2)
    reg.upsert("j", [("a:1", {}), ("b:1", {})])
    with pytest.raises(InvalidInputError, match="full"):
        reg.upsert("j", [("c:1", {})])
    assert len(reg.list()) == 2
