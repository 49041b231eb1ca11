"""`rl-insight server migrate --from FILE|URL --to postgresql://…`: move a run store
(server/runstore/backend/transfer.py), resumable, with a count per table at the end. Stop the servers writing to the
source first: what they write after a table was copied is not moved."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import env
from ..server.runstore.backend.location import existing_store, parse_store
from ..services.home import Home
from .options import HomeOpt


def migrate(
    source: Optional[str] = typer.Option(None, "--from", metavar="FILE|URL",
                                         help="The store to move: a SQLite file, sqlite:///FILE or postgresql://… "
                                              "(default: <home>/data/runstore.sqlite)."),
    destination: str = typer.Option(..., "--to", metavar="URL", envvar=env.STORE_URL,
                                     help="An empty PostgreSQL database: postgresql://user@host:port/db (the "
                                          "password from RL_INSIGHT_STORE_PASSWORD, ~/.pgpass or ?passfile=)."),
    chunk: int = typer.Option(5000, "--chunk", min=1, max=1_000_000, help="Rows per transaction."),
    home: Optional[Path] = HomeOpt,
) -> int:
    """Move a run store to PostgreSQL without loss; run it again to resume after an interruption."""
    from ..server.runstore.backend.transfer import migrate as move

    data_dir = Home.resolve(home).data_dir
    try:
        src = existing_store(source, data_dir)
    except FileNotFoundError as missing:
        raise typer.BadParameter(f"no run store at {missing}", param_hint="--from") from None
    dst = parse_store(destination, data_dir)
    typer.echo(f"moving {src.display} -> {dst.display}")
    shown: dict[str, int] = {}

    def progress(table: str, n: int) -> None:
        if n - shown.get(table, 0) >= 100_000:
            shown[table] = n
            typer.echo(f"  {table}: {n:,} rows")

    report = move(src, dst, chunk=chunk, progress=progress)
    if report.resumed:
        typer.echo("(resumed where the previous run stopped)")
    for table, (a, b) in report.counts.items():
        typer.echo(f"  {table:<15} {a:>12,} rows -> {b:>12,} ({report.copied[table]:,} copied now)")
    typer.echo(f"done: point the servers at it with `rl-insight server start --store {dst.display}`")
    return 0
