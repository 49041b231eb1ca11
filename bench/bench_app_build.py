"""What making a server's app costs (each test of the in-process lane makes one, every server start makes one): the
app as built (routes taken as built, answer and error types documented by reference: server/routing/joined.py,
routing/models.py) against FastAPI's own way (routers included with `include_router`, every answer and error type a
route's "model"), interleaved in one process, with both apps' /openapi.json checked equal.

    python bench/bench_app_build.py --rounds 7
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import machine  # noqa: E402
from rl_insight.server import app as app_module  # noqa: E402
from rl_insight.server.config import ServerConfig  # noqa: E402
from rl_insight.server.routing import models  # noqa: E402


@contextlib.contextmanager
def fastapis_own_way() -> Iterator[None]:
    """Routers included with `include_router`, every answer and error type a route's "model" (what the app did
    before 2026-12-07)."""
    from fastapi import APIRouter, FastAPI

    def nested(*routers: Any) -> Any:
        out = APIRouter()
        for r in routers:
            out.include_router(r)
        return out

    saved: list[tuple[Any, str, Any]] = []

    def put(owner: Any, name: str, value: Any) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    import importlib

    put(app_module, "mount", lambda app, router: FastAPI.include_router(app, router))
    for module in ("alerting", "experiments", "profiles", "stacks", "targets"):
        put(importlib.import_module(f"rl_insight.server.routes.{module}"), "joined", nested)
    plain = models.error_responses
    put(models, "_answer_document", lambda kind, description: {"model": kind, "description": description})
    put(models, "error_responses", lambda *codes: {c: {**v, "model": models.ErrorBody}
                                                    for c, v in plain(*codes).items()})
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def build() -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as d:
        cfg = ServerConfig(port=1, host="127.0.0.1", data_dir=d, token="t", store_writer="thread",
                           insights_worker="thread")
        t0 = time.perf_counter()
        app = app_module.create_app(cfg)
        took = time.perf_counter() - t0
        return took, json.dumps(app.openapi())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    build()  # (imports and the schemas made once a process: not what a test or a start pays each time)
    with fastapis_own_way():
        build()
    ours, theirs = [], []
    for _ in range(args.rounds):
        took, spec = build()
        ours.append(took)
        with fastapis_own_way():
            took_own, spec_own = build()
        theirs.append(took_own)
        assert spec == spec_own, "the two ways document different APIs"
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"machine: {machine()}")
    print(f"create_app, median of {args.rounds} interleaved: as built {a * 1000:.0f} ms, FastAPI's own way "
          f"{b * 1000:.0f} ms: {b / a:.2f}x; /openapi.json identical")


if __name__ == "__main__":
    main()
