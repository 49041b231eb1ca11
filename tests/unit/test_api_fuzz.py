"""Property-based fuzz of the whole HTTP API from its own /openapi.json (schemathesis + hypothesis),
over real HTTP against a real server with data in its run store: no answer is a 5xx, and every
answer matches the documented schema (status code and body).

Bounded: about 15 generated requests per operation (a few hundred in all), plus hostile strings
(lone surrogates, huge numbers) mixed into the bodies by hypothesis' own generation.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from tests.conftest import start_server

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.checks import not_a_server_error  # noqa: E402

EXAMPLES_PER_OPERATION = 15


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    srv = start_server(Path(tmp_path_factory.mktemp("fuzz")), token="fuzz-token")
    auth = {"Authorization": "Bearer fuzz-token", "Content-Type": "application/json"}
    now = time.time()
    batch = {"v": 1, "client": {"id": "seed", "project": "p", "experiment_name": "e"},
             "series": [{"k": "g", "n": "training/global_step", "l": {"project": "p", "experiment_name": "e"}}],
             "samples": [[0, now - 2, 1, 1.0], [0, now, 2, 2.0]],
             "spans": [{"id": "s1", "name": "vllm_generate", "lane": "replica_0", "kind": "state", "start_ns": int((now - 2) * 1e9),
                        "end_ns": int(now * 1e9), "attributes": {"project": "p", "experiment_name": "e"}}]}
    assert httpx.post(srv.url + "/api/v1/ingest", json=batch, headers=auth).status_code == 200
    srv.app.state.st.writer.flush(10)
    spec = httpx.get(srv.url + "/openapi.json").json()
    yield srv, spec, {"Authorization": "Bearer fuzz-token"}
    srv.stop()


def test_no_operation_answers_5xx_or_breaks_its_schema(live) -> None:
    srv, spec, auth = live
    schema = schemathesis.openapi.from_dict(spec)
    schema.config.update(base_url=srv.url)
    problems: list[str] = []
    calls = 0
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    for result in schema.get_all_operations():
        op = result.ok()

        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy())
        def run(case) -> None:
            nonlocal calls
            with_auth = calls % 2 == 0  # half with the token: reach the handlers; half without: the 401 path
            headers = dict(auth) if with_auth else {}
            response = case.call(headers=headers, timeout=20)
            calls += 1
            try:
                case.validate_response(response, checks=checks, headers=headers)
            except BaseException as exc:  # noqa: BLE001 - schemathesis raises exception groups; report all at the end
                if isinstance(exc, KeyboardInterrupt):
                    raise
                problems.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {str(exc)[:400]}")

        run()
    assert calls >= 200
    assert not problems, "\n".join(problems[:20])
    assert httpx.get(srv.url + "/metrics").status_code == 200
