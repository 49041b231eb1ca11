"""Sign-in (routes/session.py): wrong tokens are limited per address (issue 49 item 12: 1,000 wrong tokens took 0.6 s
before); the right token still signs in elsewhere, and the limit passes with its window."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from rl_insight.errors import RateLimitedError
from rl_insight.server.routes.session import MAX_FAILURES, WINDOW_S, FailedAttempts
from tests.conftest import start_server


def test_wrong_tokens_from_one_address_are_answered_429_with_retry_after(tmp_path: Path) -> None:
    srv = start_server(tmp_path, token="s3cret-token")
    try:
        answers = [httpx.post(srv.url + "/api/v1/login", json={"token": f"guess-{i}"}) for i in range(50)]
        codes = [r.status_code for r in answers]
        assert codes[:MAX_FAILURES] == [401] * MAX_FAILURES and set(codes[MAX_FAILURES:]) == {429}, codes
        late = answers[-1]
        assert 1 <= int(late.headers["Retry-After"]) <= WINDOW_S + 1
        assert "too many wrong tokens" in late.json()["detail"]
        # even the right token waits out the window from this address (a guesser learns nothing from it)
        assert httpx.post(srv.url + "/api/v1/login", json={"token": "s3cret-token"}).status_code == 429
        # the API itself, with the token in the header, is not affected
        assert httpx.get(srv.url + "/api/v1/runs", headers={"Authorization": "Bearer s3cret-token"}).is_success
    finally:
        srv.stop()


def test_the_window_slides_and_addresses_are_bounded() -> None:
    now = [0.0]
    attempts = FailedAttempts(clock=lambda: now[0])
    for _ in range(MAX_FAILURES):
        attempts.check("a")
        attempts.failed("a")
    with pytest.raises(RateLimitedError) as err:
        attempts.check("a")
    assert err.value.http_status == 429 and err.value.retry_after_s >= 1
    attempts.check("b")  # another address is not limited
    now[0] = WINDOW_S + 1
    attempts.check("a")  # its failures left the window
    for i in range(20_000):
        attempts.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(attempts._by_address) <= 10_000
