"""Making an app fast (routes taken as built, answer and error types documented by reference: routing/joined.py,
routing/models.py) documents exactly what FastAPI's own way does: the same /openapi.json, byte for byte, for a
server with and without a run store and a token; and every reference in it resolves, every component is used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from rl_insight.server import app as app_module
from rl_insight.server.config import ServerConfig
from rl_insight.server.routing import joined, models
from tests.conftest import IN_PROCESS

CONFIGS = {"default": {}, "token": {"token": "t0ken"}, "no store": {"store_enabled": False}}


def _openapi(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    cfg = ServerConfig(port=1, host="127.0.0.1", data_dir=str(tmp_path / "data"), **IN_PROCESS, **overrides)
    return app_module.create_app(cfg).openapi()


def _fastapis_own_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """Routers included with `include_router`, every answer and error type given as a route's "model"."""
    monkeypatch.setattr(app_module, "mount", lambda app, router: FastAPI.include_router(app, router))

    def nested(*routers: Any) -> Any:
        from fastapi import APIRouter

        out = APIRouter()
        for r in routers:
            out.include_router(r)
        return out

    for module in ("routes.experiments", "routes.targets", "rooms.alerting.routes", "rooms.profiles.routes",
                   "rooms.stacks.routes"):
        monkeypatch.setattr(f"rl_insight.server.{module}.joined", nested)
    monkeypatch.setattr(models, "_answer_document", lambda kind, description: {"model": kind,
                                                                                 "description": description})
    plain = models.error_responses

    def with_model(*codes: int) -> dict[int | str, dict[str, Any]]:
        return {c: {**v, "model": models.ErrorBody} for c, v in plain(*codes).items()}

    monkeypatch.setattr(models, "error_responses", with_model)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.slow  # (over 2 s a configuration: the full suite runs it)
def test_the_schema_is_fastapis_own(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = json.dumps(_openapi(tmp_path / "fast", **CONFIGS[name]))
    with monkeypatch.context() as m:
        _fastapis_own_way(m)
        own = json.dumps(_openapi(tmp_path / "own", **CONFIGS[name]))
    assert len(own) > 100_000  # (the whole API, not a stub)
    assert fast == own


def test_every_reference_resolves_and_every_component_is_used(tmp_path: Path) -> None:
    spec = _openapi(tmp_path)
    components = spec["components"]["schemas"]
    used = app_module._schema_refs(spec["paths"])
    reached = set(used)
    while True:
        more = app_module._schema_refs([components[n] for n in reached if n in components]) - reached
        if not more:
            break
        reached |= more
    assert reached - set(components) == set()
    assert set(components) - reached == set()


def test_a_joined_router_keeps_the_order_of_its_parts() -> None:
    from fastapi import APIRouter

    first, second = APIRouter(prefix="/a"), APIRouter(prefix="/a")
    first.get("/x", name="first")(lambda: 1)
    second.get("/x", name="second")(lambda: 2)
    assert [r.name for r in joined.joined(first, second).routes] == ["first", "second"]
