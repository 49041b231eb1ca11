"""`rl-insight` command line. The only layer that prints or exits; errors map to exit codes here.

Exit codes: 0 ok; 1 runtime failure (a service failed, store not writable); 2 invalid input or
missing binary; 3 busy port; 130 interrupted.
"""

from __future__ import annotations

import sys
from typing import Any

import click
import typer

from .. import env
from .._version import __version__
from ..errors import RLInsightError
from .alerts import alerts_app
from .analyze import analyze
from .call_stacks import stacks
from .demo import demo
from .diagnose import diagnose
from .export import export
from .findings import findings
from .mcp_server import mcp
from .profile import profile_app
from .runs import runs_app
from .server import server_app

app = typer.Typer(
    rich_markup_mode=None,  # help is plain text: `[service]` stays, no markup is eaten
    help="rl-insight: live observability for RL post-training jobs.", no_args_is_help=True,
    add_completion=False, pretty_exceptions_enable=False)
app.add_typer(server_app, name="server")
app.add_typer(profile_app, name="profile")
app.add_typer(runs_app, name="runs")
app.add_typer(alerts_app, name="alerts")
app.command("demo")(demo)
app.command("analyze")(analyze)
app.command("export")(export)
app.command("stacks")(stacks)
app.command("diagnose")(diagnose)
app.command("findings")(findings)
app.command("mcp")(mcp)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rl-insight v{__version__}")
        raise typer.Exit()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
    log_level: str = typer.Option(
        "WARNING",
        "--log-level",
        envvar=env.LOG_LEVEL,
        case_sensitive=False,
        help=f"Log level of the CLI's own messages: {', '.join(LOG_LEVELS)} (upstream's flag).",
    ),
) -> None:
    """rl-insight: live observability for RL post-training jobs."""
    level = log_level.upper()
    if level not in LOG_LEVELS:
        raise typer.BadParameter(f"must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}", param_hint="--log-level")
    import logging

    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


# Recent typer versions vendor click: accept both click's and typer's exception classes.
_EXIT: tuple[type[Any], ...] = tuple({click.exceptions.Exit, typer.Exit})
_ABORT: tuple[type[BaseException], ...] = tuple({click.exceptions.Abort, typer.Abort, KeyboardInterrupt})
_USAGE: tuple[type[click.ClickException], ...] = tuple(
    {click.ClickException, *(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")})


def main(argv: list[str] | None = None) -> None:
    command = typer.main.get_command(app)
    try:
        rc = command.main(
            args=argv if argv is not None else sys.argv[1:], prog_name="rl-insight", standalone_mode=False
        )
    except _EXIT as exc:
        sys.exit(exc.exit_code)
    except _ABORT:
        typer.echo("Interrupted.", err=True)
        sys.exit(130)
    except _USAGE as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except RLInsightError as exc:
        typer.secho(f"Error: {exc.message}", err=True, fg="red")
        if exc.hint:
            typer.echo(f"  next step: {exc.hint}", err=True)
        sys.exit(exc.exit_code)
    # The command is done: move every object out of the collector's reach, so interpreter exit does not walk
    # pandas' and matplotlib's object graphs (0.1-0.3 s after an analysis); atexit handlers still run.
    import gc

    gc.freeze()
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
