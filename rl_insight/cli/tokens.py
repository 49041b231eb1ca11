"""`rl-insight server tokens`: named tokens with a role and projects (server/access/, docs/access.md), through the
running server's API with an admin token (the server's own, `rl-insight server credentials`).

    rl-insight server tokens create ci-math --role ingest --project math-rl --expires 90d
    rl-insight server tokens list
    rl-insight server tokens revoke ci-math

`create` prints the secret once, alone on its last line (`TOKEN=$(rl-insight server tokens create … | tail -1)`);
the server keeps only its hash.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Optional

import typer

from .alerts import parse_duration
from .options import HomeOpt, ServerUrlOpt, TokenOpt, echo_table
from .reach import require_server

tokens_app = typer.Typer(help="Named tokens: viewer, operator, ingest or admin, for some projects or all.",
                         no_args_is_help=True)


def _when(t: Optional[float]) -> str:
    return "–" if t is None else datetime.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M")


@tokens_app.command("create")
def create(
    name: str = typer.Argument(..., help="The token's name (who or what uses it: alice, ci-math, grafana)."),
    role: str = typer.Option(..., "--role", help="viewer (reads), operator (also profiles, stack snapshots, "
                             "silences, rules), ingest (only sends data), admin (everything, tokens too)."),
    project: Optional[list[str]] = typer.Option(None, "--project", help="A project it is for (repeat; none: all)."),
    expires: Optional[str] = typer.Option(None, "--expires", help="It stops working after 30m, 12h, 90d (none: "
                                          "when revoked)."),
    server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt,
) -> int:
    """Create a named token; its secret is printed once, on the last line."""
    body = {"name": name, "role": role, "projects": project or None,
            "expires_s": parse_duration(expires) if expires else None}
    answer = require_server(home, server_url, token, None).request("POST", "/api/v1/tokens", json=body)
    info = answer["info"]
    scope = ", ".join(info["projects"]) if info["projects"] else "every project"
    typer.echo(f"Created token {info['name']!r}: {info['role']} of {scope}, "
               + (f"until {_when(info['expires'])}." if info["expires"] else "until revoked."))
    typer.echo("Its secret, shown this once (the server keeps only its hash):")
    typer.echo(answer["token"])
    return 0


@tokens_app.command("list")
def list_tokens(server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
                home: Optional[Path] = HomeOpt) -> int:
    """Every named token: role, projects, when made and by whom, last used, expiry, revoked (never the secret)."""
    rows = require_server(home, server_url, token, None).request("GET", "/api/v1/tokens")["tokens"]
    if not rows:
        typer.echo("No named tokens (the server's own token is the admin token).")
        return 0
    echo_table([[r["name"], r["role"], ", ".join(r["projects"]) if r["projects"] else "all",
                 f"{_when(r['created'])} by {r['created_by']}", _when(r.get("last_used")), _when(r["expires"]),
                 _when(r["revoked"])] for r in rows],
               ["NAME", "ROLE", "PROJECTS", "CREATED", "LAST USED", "EXPIRES", "REVOKED"])
    return 0


@tokens_app.command("revoke")
def revoke(name: str = typer.Argument(..., help="The token's name."),
           server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
           home: Optional[Path] = HomeOpt) -> int:
    """Revoke a token: it stops working on every server of the store within seconds, no restart."""
    info = require_server(home, server_url, token, None).request("DELETE", f"/api/v1/tokens/{name}")
    typer.echo(f"Revoked token {info['name']!r} ({info['role']}) at {_when(info['revoked'])}.")
    return 0


def audit(
    who: Optional[str] = typer.Option(None, "--who", help="Only this token's actions."),
    limit: int = typer.Option(50, "--limit", min=1, max=5000, help="The newest this many."),
    since: Optional[str] = typer.Option(None, "--since", help="Only the last 30m, 12h, 7d."),
    server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt,
) -> int:
    """The audit log: who changed what, when, from where (tokens, profiles, stack snapshots, alerting), newest first."""
    import time as _time

    params: dict[str, object] = {"limit": limit}
    if who:
        params["who"] = who
    if since:
        params["since"] = _time.time() - parse_duration(since)
    rows = require_server(home, server_url, token, None).request("GET", "/api/v1/audit", params=params)["entries"]
    if not rows:
        typer.echo("No actions logged" + (f" by {who}" if who else "") + ".")
        return 0
    echo_table([[datetime.datetime.fromtimestamp(r["at"]).strftime("%Y-%m-%d %H:%M:%S"), r["who"], r["role"],
                 r["address"], f"{r['method']} {r['path']}",
                 str(r["status"]) + (" refused" if r.get("refused") else ""),
                 " ".join(f"{k}={v}" for k, v in r["what"].items())] for r in rows],
               ["WHEN", "WHO", "ROLE", "FROM", "ACTION", "STATUS", "WHAT"])
    return 0
