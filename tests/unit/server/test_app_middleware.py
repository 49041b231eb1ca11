"""The app's two middlewares (pure ASGI since issue 24's fan-in work): every answer counted by route template,
method and status, and every answer — a refusal, an error, a streamed export — carrying the security headers, the
cross-site rules unchanged."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from rl_insight.server.security import SECURITY_HEADERS


def test_answers_are_counted_by_route_template_and_carry_the_security_headers(server) -> None:
    assert httpx.get(server.url + "/healthz").status_code == 200
    missing = httpx.get(server.url + "/api/v1/runs/987654")
    assert missing.status_code == 404
    for k, v in SECURITY_HEADERS.items():
        assert missing.headers.get(k) == v, k
    text = httpx.get(server.url + "/metrics").text
    assert 'rl_insight_server_http_requests_total{method="GET",route="/api/v1/runs/{run_id}",status="404"} 1.0' in text
    assert 'rl_insight_server_http_requests_total{method="GET",route="/healthz",status="200"} 1.0' in text
    # refused by the guard before any route: still the headers, and counted as unmatched by a route
    refused = httpx.post(server.url + "/api/v1/ingest", content=b"{}", headers={"Origin": "https://evil.example",
                                                                                 "Content-Type": "application/json"})
    assert refused.status_code == 403 and "cross-origin" in refused.json()["detail"]
    assert refused.headers.get("X-Frame-Options") == "DENY"
    preflight = httpx.options(server.url + "/api/v1/ingest")
    assert preflight.status_code == 405 and preflight.headers.get("X-Content-Type-Options") == "nosniff"
    # a route that sets its own CSP keeps it (the guard only fills what is missing)
    page = httpx.get(server.url + "/")
    assert page.status_code == 200 and page.headers.get("Content-Security-Policy")


def test_ingest_served_below_fastapi_is_counted_documented_and_refuses_other_methods(server) -> None:
    """routes/ingest.py serves POST /api/v1/ingest from a Starlette route ahead of FastAPI's: the answers are counted
    under the route's template like every other, the schema still documents it, other methods are 405, and app.py's
    error mapping answers its errors (the body's problem named, the security headers on)."""
    body = {"v": 1, "client": {"id": "c1", "pid": 1, "host": "h", "project": "p", "experiment_name": "e"},
            "series": [{"k": "g", "n": "reward", "l": {"project": "p", "experiment_name": "e"}}],
            "samples": [[0, 1.0e9, 1, 0.5]]}
    ok = httpx.post(server.url + "/api/v1/ingest", json=body)
    assert ok.status_code == 200 and ok.json()["accepted"] == 1, ok.text
    bad = httpx.post(server.url + "/api/v1/ingest", content=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["detail"]
    assert bad.headers.get("X-Content-Type-Options") == "nosniff"
    assert httpx.get(server.url + "/api/v1/ingest").status_code == 405
    text = httpx.get(server.url + "/metrics").text
    assert 'rl_insight_server_http_requests_total{method="POST",route="/api/v1/ingest",status="200"} 1.0' in text
    assert 'rl_insight_server_http_requests_total{method="POST",route="/api/v1/ingest",status="400"} 1.0' in text
    spec = httpx.get(server.url + "/openapi.json").json()["paths"]["/api/v1/ingest"]
    assert list(spec) == ["post"] and spec["post"]["requestBody"]["required"] is True
    assert {"200", "401", "413", "503"} <= set(spec["post"]["responses"])


FRAMEWORK_SPANS = r'''
import asyncio, tempfile, httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # a global provider, as OTel's auto-instrumentation sets one
from rl_insight.server.app import create_app
from rl_insight.server.config import ServerConfig
app = create_app(ServerConfig(data_dir=tempfile.mkdtemp(), store_enabled=False))
async def main():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        assert (await c.get("/healthz")).status_code == 200
asyncio.run(main())
print(len(exporter.get_finished_spans()))
'''


def test_the_servers_own_requests_are_not_traced_through_a_global_opentelemetry_provider() -> None:
    """FastAPI 0.165+ traces every request once a global OpenTelemetry provider exists; the server turns that off
    (app._framework_telemetry_off): its answers are counted on /metrics, not spans among the user's traces. In a
    process of its own, since a global provider is set once a process."""
    import fastapi

    if tuple(int(x) for x in fastapi.__version__.split(".")[:2]) < (0, 165):
        pytest.skip(f"FastAPI {fastapi.__version__} has no request telemetry to turn off")
    done = subprocess.run([sys.executable, "-c", FRAMEWORK_SPANS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0"


def test_ingest_on_the_hot_route_keeps_the_apps_error_mapping_and_counting(tmp_path, monkeypatch) -> None:
    """Ingest is served by http/hot_route.HotRoute inside the guard and the counter: an error of ours is answered by
    app.py's handler (status, hint, Retry-After), an unexpected one by the catch-all 500, both counted under the
    route's template with the security headers on."""
    import asyncio

    from rl_insight.errors import BusyError
    from rl_insight.server.app import create_app
    from rl_insight.server.config import ServerConfig

    app = create_app(ServerConfig(data_dir=str(tmp_path), store_enabled=False))
    st = app.state.st
    raised: list[Exception] = [BusyError("the store is behind", hint="send it again", retry_after_s=3),
                               RuntimeError("boom")]

    def failing(obj: object, projects: object = None) -> None:
        raise raised.pop(0)

    monkeypatch.setattr(st.intake, "batch", failing)

    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            return [await c.post("/api/v1/ingest", json={"v": 1}) for _ in range(2)]

    busy, broken = asyncio.run(go())
    assert busy.status_code == 503 and busy.headers["Retry-After"] == "3", busy.text
    assert busy.json() == {"detail": "the store is behind", "hint": "send it again"}
    assert broken.status_code == 500 and "internal error (RuntimeError)" in broken.json()["detail"]
    for answer in (busy, broken):
        assert answer.headers.get("X-Frame-Options") == "DENY"
    counted = {(s.labels["route"], s.labels["status"]): s.value for m in st.metrics.requests.collect()
               for s in m.samples if s.name.endswith("_total")}
    assert counted[("/api/v1/ingest", "503")] == 1 and counted[("/api/v1/ingest", "500")] == 1
