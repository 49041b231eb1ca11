"""The options of `rl-insight server start` (cli/stack.py), made from where they are declared.

Each `ServerConfig` and `StackSettings` field declared with `option(...)` (server/config.py) is one option: its flag
is the field's name (`store_max_gb` -> `--store-max-gb`, or the field's own spelling), its help, type and default are
the field's, and its environment variable is RL_INSIGHT_SERVER_<NAME> (or the field's established name,
RL_INSIGHT_TOKEN). Only what is not configuration is declared here: how this command runs (--detach, --attach-logs,
--no-token) and where its data goes by default (--data-dir: <home>/data).
"""

from __future__ import annotations

import inspect
import types
import typing
from dataclasses import MISSING, Field, fields
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from .. import env
from ..server.config import Flag, ServerConfig, flag_of
from ..services.home import Home
from ..services.settings import StackSettings

# How this command runs (not configuration)
DetachFlag = Annotated[bool, typer.Option('--detach', '-d', help='Run in the background and return once ready.')]
AttachLogsFlag = Annotated[
    bool,
    typer.Option(
        '--attach-logs',
        help="In the foreground, also print every service's log lines prefixed with [service] (not with --detach).",
    ),
]
DataDirFlag = Annotated[
    Optional[Path],
    typer.Option(
        '--data-dir',
        help=(
            "Where the run store, TSDB, traces and Grafana keep data (default <home>/data; upstream's server.data_dir)."
        ),
    ),
]
NoTokenFlag = Annotated[
    bool, typer.Option('--no-token', help='Accept writes without a token even on a network address.')
]


def _one_of(allowed: tuple[str, ...], flag: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in allowed:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}", param_hint=flag)
        return value
    return check


def _cli_type(kind: Any) -> Any:
    """The field's type as a command line reads it: a tuple is a repeatable option (a list), `X | None` optional."""
    if typing.get_origin(kind) is tuple:
        return list[typing.get_args(kind)[0]]  # type: ignore[misc]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        return Optional[inner[0]]
    return kind


def _default(f: Field) -> Any:
    value = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[operator]  # (one is set)
    return list(value) if isinstance(value, tuple) else value


def _option(name: str, kind: Any, spec: Flag) -> typer.models.OptionInfo:
    derived = "--" + name.replace("_", "-")
    decls = (spec.flag,) if isinstance(spec.flag, str) else spec.flag or (derived,)
    extra: dict[str, Any] = {k: v for k, v in (("metavar", spec.metavar), ("min", spec.min), ("max", spec.max))
                             if v is not None}
    if spec.choices:
        extra["callback"] = _one_of(spec.choices, decls[0])
    return typer.Option(*decls, help=spec.help, envvar=spec.env or env.SERVER_OPTION_PREFIX + name.upper(), **extra)


def config_parameters() -> list[inspect.Parameter]:
    """`start`'s parameters for every field declared as an option, in the order of the fields (the server's, then
    the other services')."""
    out = []
    for cls in (ServerConfig, StackSettings):
        hints = typing.get_type_hints(cls, {"Path": Path, "Home": Home, "ServerConfig": ServerConfig})
        for f in fields(cls):
            spec = flag_of(f)
            if spec is None:
                continue
            kind = _cli_type(hints[f.name])
            out.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=_default(f),
                                         annotation=Annotated[kind, _option(f.name, kind, spec)]))
    return out
