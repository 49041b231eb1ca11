"""`rl-insight alerts`: where notifications go (server/outbound/alerting/), through the running server's API.

    rl-insight alerts status
    rl-insight alerts receivers add team --webhook https://ci.example.com/hooks/rl
    rl-insight alerts receivers add chat --slack-url-file ~/.slack-hook --project math-rl
    rl-insight alerts receivers add oncall --email oncall@example.com --smtp smtp.example.com:587 \\
        --from rl-insight@example.com --smtp-user bot --smtp-password-file ~/.smtp-pass
    rl-insight alerts receivers list | remove NAME | test NAME

Secrets (a webhook URL whose path is its key, an SMTP password) can come from a file or the environment instead of
the command line, which every user of the host sees in `ps`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import InvalidInputError
from .options import HomeOpt, ServerUrlOpt, TokenOpt, echo_table
from .reach import require_server

alerts_app = typer.Typer(help="Notifications: where alerts are delivered (Alertmanager receivers).",
                         no_args_is_help=True)
receivers_app = typer.Typer(help="Receivers: a webhook, a Slack incoming webhook, or email.", no_args_is_help=True)
alerts_app.add_typer(receivers_app, name="receivers")
SMTP_PASSWORD_ENV = "RL_INSIGHT_SMTP_PASSWORD"


def _secret(value: Optional[str], file: Optional[Path], what: str) -> Optional[str]:
    if value is not None and file is not None:
        raise InvalidInputError(f"give {what} or {what}-file, not both")
    if file is None:
        return value
    try:
        return Path(file).expanduser().read_text().strip()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {file}: {exc.strerror}") from None


@alerts_app.command("status")
def status(server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
           home: Optional[Path] = HomeOpt) -> int:
    """Whether notifications are delivered, through which Alertmanager, to how many receivers."""
    answer = require_server(home, server_url, token, None).request("GET", "/api/v1/alerting")
    typer.echo(f"Notifications {answer['message']}")
    return 0 if answer["enabled"] else 1


@receivers_app.command("add")
def add(
    name: str = typer.Argument(..., help="The receiver's name (letters, digits, . _ -)."),
    webhook: Optional[str] = typer.Option(None, "--webhook", metavar="URL", help="POST each notification as JSON "
                                                                                 "(Alertmanager's webhook format)."),
    webhook_file: Optional[Path] = typer.Option(None, "--webhook-file", help="--webhook's URL, read from a file."),
    slack_url: Optional[str] = typer.Option(None, "--slack-url", metavar="URL",
                                            help="A Slack (or Mattermost, Rocket.Chat) incoming-webhook URL."),
    slack_url_file: Optional[Path] = typer.Option(None, "--slack-url-file", help="--slack-url, read from a file."),
    channel: Optional[str] = typer.Option(None, "--channel", help="Slack: post to this channel instead."),
    email: Optional[str] = typer.Option(None, "--email", metavar="TO", help="Send email to this address."),
    smtp: Optional[str] = typer.Option(None, "--smtp", metavar="HOST:PORT", help="Email: the SMTP server."),
    sender: Optional[str] = typer.Option(None, "--from", metavar="ADDRESS", help="Email: the From address."),
    smtp_user: Optional[str] = typer.Option(None, "--smtp-user", help="Email: SMTP login."),
    smtp_password_file: Optional[Path] = typer.Option(
        None, "--smtp-password-file", help=f"Email: the SMTP password, read from a file (or ${SMTP_PASSWORD_ENV})."),
    no_tls: bool = typer.Option(False, "--no-tls", help="Email: do not require STARTTLS (a relay on localhost)."),
    project: Optional[str] = typer.Option(None, "--project", help="Only this project's alerts (default: all)."),
    replace: bool = typer.Option(False, "--replace", help="Replace a receiver of the same name."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Add a receiver: checked by Alertmanager and loaded at once, or refused with its reason (nothing changed)."""
    kinds = [k for k, given in (("webhook", webhook or webhook_file), ("slack", slack_url or slack_url_file),
                                ("email", email)) if given]
    if len(kinds) != 1:
        raise InvalidInputError("give exactly one of --webhook, --slack-url or --email")
    body: dict[str, Any] = {"name": name, "kind": kinds[0], "project": project}
    if kinds[0] == "webhook":
        body["url"] = _secret(webhook, webhook_file, "--webhook")
    elif kinds[0] == "slack":
        body["url"] = _secret(slack_url, slack_url_file, "--slack-url")
        body["channel"] = channel
    else:
        password = _secret(None, smtp_password_file, "--smtp-password") or os.environ.get(SMTP_PASSWORD_ENV)
        body.update({"to": email, "sender": sender, "smarthost": smtp, "username": smtp_user, "password": password,
                     "require_tls": not no_tls})
    server = require_server(home, server_url, token, None)
    answer = server.request("POST", "/api/v1/alerting/receivers", params={"replace": str(replace).lower()},
                            json=body)
    typer.echo(f"receiver {name!r} added: {answer['message']}")
    return 0


@receivers_app.command("list")
def list_(server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
          home: Optional[Path] = HomeOpt) -> int:
    """The receivers (their secrets are never shown)."""
    server = require_server(home, server_url, token, None)
    rows = server.request("GET", "/api/v1/alerting/receivers")["receivers"]
    if not rows:
        typer.echo("no receivers: add one with `rl-insight alerts receivers add NAME --webhook URL` (docs/alerts.md)")
        return 0
    echo_table([[r["name"], r["kind"], r["project"] or "(all)", r["target"]] for r in rows],
               ["NAME", "KIND", "PROJECT", "DELIVERS TO"])
    return 0


@receivers_app.command("remove")
def remove(name: str = typer.Argument(..., help="The receiver's name."), server_url: Optional[str] = ServerUrlOpt,
           token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Remove a receiver (Alertmanager reloaded at once)."""
    answer = require_server(home, server_url, token, None).request("DELETE", f"/api/v1/alerting/receivers/{name}")
    typer.echo(f"receiver {name!r} removed: {answer['message']}")
    return 0


@receivers_app.command("test")
def test(name: str = typer.Argument(..., help="The receiver's name."), server_url: Optional[str] = ServerUrlOpt,
         token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Send a test notification to this receiver alone."""
    answer = require_server(home, server_url, token, None).request("POST",
                                                                   f"/api/v1/alerting/receivers/{name}/test")
    typer.echo(answer["message"])
    return 0
