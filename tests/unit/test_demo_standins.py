"""Every demo stand-in engine survives a whole step cycle (load, requests, sleep and wake around the weight
sync) and serves its metrics: a broken stand-in must fail here, not as a silent gap in a dashboard test."""

from __future__ import annotations

import urllib.request

import pytest

from rl_insight.demo.engines import Request
from rl_insight.demo.workers import ENGINES

pytestmark = pytest.mark.socket  # (the stand-in engines listen on ports)


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_stand_in_engine_full_cycle(engine: str) -> None:
    e = ENGINES[engine]()
    try:
        e.set_load(3, 2, 0.5)
        e.record(Request(100, 50, 0.1, 0.01, 1.0, 0.05, 0.2, 0.8, 20, "stop"), rng_preempt=True)
        getattr(e, "sleep", lambda: None)()
        getattr(e, "wake", lambda: None)()
        text = urllib.request.urlopen(f"http://{e.address}/metrics", timeout=5).read().decode()
        assert "_generation_tokens_total" in text or "generation_tokens" in text
    finally:
        e.close()
