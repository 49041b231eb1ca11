"""`rl-insight alerts receivers add`, made from the receiver kinds (server/rooms/alerting/kinds/): each kind's flags
build the body the API takes — secrets from a file or the environment, a negated bool — and a choice of kinds that is
not exactly one is refused before anything is sent. In process (Typer's runner; the server is a recorder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rl_insight.cli import alerts
from rl_insight.cli.main import app
from rl_insight.errors import InvalidInputError


class Recorder:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def request(self, method: str, path: str, params: Any = None, json: Any = None) -> dict[str, Any]:
        self.sent.append({"method": method, "path": path, "params": params, "json": json})
        return {"message": "applied"}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    monkeypatch.setattr(alerts, "require_server", lambda *a, **k: rec)
    return rec


def _add(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, ["alerts", "receivers", "add", *args], env=env, catch_exceptions=False)


def test_each_kind_builds_its_body(server: Recorder, tmp_path: Path) -> None:
    hook = tmp_path / "hook"
    hook.write_text("https://hooks.example.com/T0/B0/secret\n")
    assert _add("team", "--webhook-file", str(hook), "--project", "math").exit_code == 0
    assert _add("chat", "--slack-url", "https://hooks.slack.com/x", "--channel", "#rl", "--replace").exit_code == 0
    mail = _add("oncall", "--email", "oncall@example.com", "--smtp", "smtp.example.com:587", "--from",
                "rl@example.com", "--smtp-user", "bot", "--no-tls", env={"RL_INSIGHT_SMTP_PASSWORD": "pw"})
    assert mail.exit_code == 0
    bodies = [s["json"] for s in server.sent]
    assert bodies[0] == {"name": "team", "kind": "webhook", "project": "math",
                         "url": "https://hooks.example.com/T0/B0/secret"}
    assert bodies[1] == {"name": "chat", "kind": "slack", "project": None, "url": "https://hooks.slack.com/x",
                         "channel": "#rl"}
    assert bodies[2] == {"name": "oncall", "kind": "email", "project": None, "to": "oncall@example.com",
                         "sender": "rl@example.com", "smarthost": "smtp.example.com:587", "username": "bot",
                         "password": "pw", "require_tls": False}
    assert [s["params"] for s in server.sent] == [{"replace": "false"}, {"replace": "true"}, {"replace": "false"}]


def test_not_exactly_one_kind_is_refused_before_anything_is_sent(server: Recorder) -> None:
    for args in ((), ("--webhook", "https://a.example.com/h", "--email", "x@example.com")):
        r = CliRunner().invoke(app, ["alerts", "receivers", "add", "x", *args])  # (main() prints what it raises)
        assert isinstance(r.exception, InvalidInputError), r.output
        assert str(r.exception) == "give exactly one of --webhook, --slack-url or --email"
    assert server.sent == []
