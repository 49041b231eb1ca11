"""What the CLI's commands share: the common options, the table printer, and upstream's `--config` file.

Options are typer objects built once here, so that `--home`, `--config`, `--server-url` and `--token` read the
same (flag, environment variable, help) in every command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from .. import env
from ..errors import InvalidInputError

HomeOpt = typer.Option(None, "--home", envvar=env.HOME, help="State directory (default ~/.rl-insight).")
ConfigOpt = typer.Option(None, "--config", exists=True, dir_okay=False,
                         help="Upstream RL-Insight's server YAML (ports, binary paths, data dir, retention); "
                              "flags win over it.")
ServerUrlOpt = typer.Option(None, "--server-url", help="Server to talk to (default: RL_INSIGHT_SERVER_URL, else the "
                                                       "one this home runs).")
TokenOpt = typer.Option(None, "--token", envvar=env.TOKEN,
                        help="Bearer token (default: the running server's, else <home>/token).")


def echo_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        typer.echo("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def config_url(config: Path | None) -> str | None:
    """The ingest server of upstream's `--config` file (`server.port` on this host), when given. Commands that
    need nothing from the file still call this: a broken file is reported, as upstream does."""
    if config is None:
        return None
    from . import upstream_config

    port = upstream_config.load(Path(config)).values.get("port")
    return f"http://127.0.0.1:{port}" if port else None


def apply_config_file(ctx: typer.Context, path: Path) -> Any:
    """Upstream's YAML: each value it sets replaces our default unless the flag was given (flag > file > default)."""
    from . import upstream_config

    cfg = upstream_config.load(Path(path))
    for option, value in cfg.values.items():
        if option not in ctx.params:
            continue  # e.g. install_dir for `server start`: used by `server install`
        source = ctx.get_parameter_source(option)  # typer may vendor click: compare by name, not by enum class
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            ctx.params[option] = value
    if cfg.unknown:
        typer.secho(f"warning: {path}: unknown keys ignored: {', '.join(cfg.unknown)}", err=True, fg="yellow")
    if cfg.ignored:
        typer.echo(
            f"note: {path}: not needed by rl-insight (it renders these itself): {', '.join(cfg.ignored)}", err=True
        )
    return cfg


MAX_RANGE_ITEMS = 1 << 16  # `0-99999999` would build a list the size of memory


def int_ranges(text: str | None, flag: str) -> list[int]:
    """`0,2,4-7` as [0, 2, 4, 5, 6, 7]: the one grammar of `--ranks` and `--steps` lists (in order, no repeats).
    InvalidInputError naming the flag otherwise."""
    out: dict[int, None] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        first_s, sep, last_s = part.partition("-")
        try:
            first = int(first_s)
            last = int(last_s) if sep else first
        except ValueError:
            raise InvalidInputError(f"{flag} takes numbers and ranges like 0,2,4-7; got {text!r}") from None
        if first < 0 or last < first or last - first >= MAX_RANGE_ITEMS or len(out) >= MAX_RANGE_ITEMS:
            raise InvalidInputError(f"{flag} {part!r}: give non-negative ranges first-last with first <= last "
                                    f"(at most {MAX_RANGE_ITEMS} numbers)")
        out.update(dict.fromkeys(range(first, last + 1)))
    return list(out)
