"""The test process's caches (tests/process_caches.py): two apps share one adapter per parameter that is
declared the same, and a bad value is refused the same way by both, with the same words."""

from __future__ import annotations

from pathlib import Path

import httpx
from fastapi.routing import APIRoute

from tests import process_caches
from tests.conftest import start_server


def _adapters(app: object) -> dict[tuple[str, str], object]:
    found = {}
    for route in app.routes:  # type: ignore[attr-defined]
        if isinstance(route, APIRoute):
            for param in route.dependant.query_params:
                found[(route.path, param.name)] = param._type_adapter
    return found


def test_two_apps_share_each_parameters_validator_and_refuse_alike(tmp_path: Path) -> None:
    assert process_caches.installed(), "tests/conftest.py installs the sharing before any app is built"
    first = start_server(tmp_path / "a", in_process=True)
    second = start_server(tmp_path / "b", in_process=True)
    try:
        a, b = _adapters(first.app), _adapters(second.app)
        assert a and a.keys() == b.keys()
        assert all(a[k] is b[k] for k in a), "the same declaration compiled twice"
        assert len({id(x) for x in a.values()}) < len(a)  # (parameters declared alike on two routes share one too)
        answers = [httpx.get(f"{s.url}/api/v1/runs", params={"limit": "0"}) for s in (first, second)]
        assert [r.status_code for r in answers] == [422, 422]
        assert answers[0].json() == answers[1].json()
        assert "greater than or equal to 1" in answers[0].text
        assert httpx.get(f"{first.url}/api/v1/runs", params={"limit": "2"}).status_code == 200
    finally:
        first.stop()
        second.stop()


def _tls(client: httpx.Client) -> object:
    return client._transport._pool._ssl_context  # type: ignore[attr-defined]


def test_clients_share_one_tls_context_per_setting_and_a_custom_one_is_their_own() -> None:
    import ssl

    with httpx.Client() as a, httpx.Client() as b, httpx.Client(verify=False) as lax, httpx.Client(verify=False) as c:
        assert _tls(a) is _tls(b)
        assert _tls(lax) is _tls(c) and _tls(lax) is not _tls(a)
        assert _tls(a).verify_mode == ssl.CERT_REQUIRED and _tls(lax).verify_mode == ssl.CERT_NONE  # type: ignore[attr-defined]
    own = ssl.create_default_context()
    with httpx.Client(verify=own) as mine:
        assert _tls(mine) is own
