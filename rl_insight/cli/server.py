"""`rl-insight server …`: the command groups, assembled. Each group lives in its own module:
the stack this home runs (`stack.py`), scrape targets (`targets.py`), experiments (`experiments.py`), binaries
(`install.py`), moving the run store (`migrate.py`); commands that talk to a running server reach it through
`reach.py`."""

from __future__ import annotations

import typer

from .experiments import experiments_app
from .install import bundle, install
from .migrate import migrate
from .stack import start
from .stack_control import credentials, logs, status, stop
from .targets import targets_app
from .tokens import audit, tokens_app

server_app = typer.Typer(
    rich_markup_mode=None,  # help is plain text: `[service]` stays, no markup is eaten
    help="Run the ingest server with Prometheus, and manage scrape targets.", no_args_is_help=True)
for name, command in (("start", start), ("stop", stop), ("status", status), ("credentials", credentials),
                      ("logs", logs), ("install", install), ("bundle", bundle), ("migrate", migrate),
                      ("audit", audit)):
    server_app.command(name)(command)
server_app.add_typer(targets_app, name="targets")
server_app.add_typer(experiments_app, name="experiments")
server_app.add_typer(tokens_app, name="tokens")
