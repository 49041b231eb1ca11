"""Every route that changes something documents its answer's type under the status it answers with (issue 65: 5 of 24
did), and what it answers is that type: called in process (Starlette's TestClient: no socket, no thread of uvicorn),
each answer checked against its TypedDict, key by key; and a comparison's run ids past int64 (found by the fuzz)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typing_extensions import get_type_hints, is_typeddict

from rl_insight.server.app import create_app
from rl_insight.server.config import ServerConfig
from rl_insight.server.rooms.profiles.records import ProfileView
from rl_insight.server.routes.tokens import CreatedToken
from rl_insight.server.routing import change_answers as ca
from tests.conftest import IN_PROCESS

TOKEN = "change-answers-token"
H = {"Authorization": f"Bearer {TOKEN}"}


def conforms(kind: Any, answer: Any, where: str = "") -> list[str]:
    """What of `answer` is not `kind` (a TypedDict): unknown keys, required keys missing, nested TypedDicts too."""
    if not is_typeddict(kind):
        return []
    if not isinstance(answer, dict):
        return [f"{where or 'answer'}: not an object"]
    hints = get_type_hints(kind)
    problems = [f"{where}{k}: not in {kind.__name__}" for k in answer if k not in hints]
    problems += [f"{where}{k}: missing" for k in kind.__required_keys__ if k not in answer]
    for k, v in answer.items():
        if k in hints:
            problems += conforms(hints[k], v, f"{where}{k}.")
    return problems


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = tmp_path_factory.mktemp("change") / "data"
    app = create_app(ServerConfig(port=1, host="127.0.0.1", data_dir=str(data), token=TOKEN, **IN_PROCESS))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        yield c


def test_every_change_route_documents_a_typed_answer_under_its_status(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    untyped = []
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method == "get":
                continue
            ok = next((c for c in op["responses"] if c.startswith("2")), None)
            content = op["responses"][ok].get("content", {}) if ok else {}
            schema = content.get("application/json", {}).get("schema", {})
            if "$ref" not in schema and "properties" not in schema:
                untyped.append(f"{method.upper()} {path} {ok}")
    assert untyped == []


def test_the_answers_are_their_types(client: TestClient, tmp_path: Path) -> None:
    run = {"project": "p", "experiment_name": "e"}
    batch = {"v": 1, "client": {"id": "c1", **run}, "samples": [[0, 1.0e9, 3, 3.0]],
             "series": [{"k": "g", "n": "training/global_step", "l": run}]}
    assert client.post("/api/v1/ingest", json=batch, headers=H).status_code == 200
    client.app.state.st.writer.flush(10)  # type: ignore[attr-defined]
    run_id = client.get("/api/v1/runs", headers=H).json()["runs"][0]["id"]
    target = {"job_name": "j", "targets": ["127.0.0.1:9"], **run}
    assert client.post("/api/v1/prometheus/targets", json=target, headers=H).status_code == 200

    calls: list[tuple[Any, str, str, dict[str, Any], int]] = [
        (ca.SignedIn, "POST", "/api/v1/login", {"json": {"token": TOKEN}}, 200),
        (CreatedToken, "POST", "/api/v1/tokens", {"json": {"name": "reader", "role": "viewer"}}, 201),
        (ca.ExperimentChanged, "POST", "/api/v1/experiments/archive", {"json": run}, 200),
        (ca.ExperimentChanged, "POST", "/api/v1/experiments/restore", {"json": run}, 200),
        (ProfileView, "POST", "/api/v1/profiles", {"json": {"run_id": run_id, "steps": "10"}}, 201),
        (ca.TargetsRemoved, "DELETE", "/api/v1/targets", {"params": run}, 200),
        (ca.OtlpAnswer, "POST", "/v1/traces", {"json": {"resourceSpans": []}}, 200),
    ]
    for kind, method, path, kw, status in calls:
        r = client.request(method, path, headers=H, **kw)
        assert r.status_code == status, (path, r.text)
        assert conforms(kind, r.json()) == [], (path, r.json())
    made = client.get("/api/v1/profiles", headers=H).json()["profiles"][0]["id"]
    r = client.delete(f"/api/v1/profiles/{made}", headers=H)
    assert r.status_code == 200 and r.json()["state"] == "cancelled" and conforms(ProfileView, r.json()) == [], r.text
    r = client.post(f"/api/v1/profiles/{made}/upload/trace.json.gz", params={"offset": 0, "total": 4},
                    content=b"\x1f\x8b", headers={**H, "content-type": "application/octet-stream"})
    assert r.status_code in (200, 409) and (r.status_code == 409 or conforms(ca.ChunkStored, r.json()) == []), r.text


def test_a_run_id_past_int64_in_a_comparison_is_no_run(client: TestClient) -> None:
    """`runs=1,9452709206267178244` matches the documented pattern (which cannot bound a number) but names no run: 404,
    as the random schema fuzz expects of a schema-valid request, never 422 (found by it)."""
    r = client.get("/api/v1/series", params={"name": "x", "runs": "1,9452709206267178244"}, headers=H)
    assert r.status_code == 404 and "9452709206267178244" in r.json()["detail"], r.text
    assert client.get("/api/v1/series", params={"name": "x", "runs": "1,,2"}, headers=H).status_code == 422
