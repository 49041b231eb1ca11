"""Configuration once (cli/stack.py, server/config.py, cli/reach.py): each `server start` option has the name and
the default of the config field it sets, and the CLI finds its server by one rule."""

from __future__ import annotations

import inspect
from dataclasses import fields
from pathlib import Path

import pytest
import typer

from rl_insight.cli import stack
from rl_insight.cli.main import app
from rl_insight.cli.reach import find_server, require_server
from rl_insight.errors import ServiceError
from rl_insight.server.config import ServerConfig
from rl_insight.services.home import Home
from rl_insight.services.supervisor import StackSettings

SERVER_FIELDS = {f.name for f in fields(ServerConfig)}
STACK_FIELDS = {f.name for f in fields(StackSettings)}


def _start_params() -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(stack.start).parameters)


def test_every_start_option_is_a_config_field_or_says_why_not() -> None:
    unexplained = [n for n in _start_params() if n not in SERVER_FIELDS | STACK_FIELDS | stack.NOT_CONFIG]
    assert unexplained == []


@pytest.mark.parametrize(
    "name", sorted((SERVER_FIELDS | STACK_FIELDS) & set(_start_params()) - stack.NOT_CONFIG - {"token"})
)
def test_an_options_default_is_its_fields_default(name: str) -> None:
    option = _start_params()[name].default
    default = option.default if isinstance(option, typer.models.OptionInfo) else option
    field_default = getattr(stack.SERVER if name in SERVER_FIELDS else stack.STACK, name)
    assert default == (list(field_default) if isinstance(field_default, tuple) else field_default)


def test_the_parameters_build_both_configs_by_name(tmp_path: Path) -> None:
    params = {n: None for n in _start_params()}
    params.update(
        host="127.0.0.1",
        port=18181,
        store_max_gb=0.25,
        store_retention_days=2.0,
        allowed_hosts=["a.example"],
        otlp_intake_grpc_port=4399,
        prometheus=False,
        ready_timeout=5.0,
        tempo_port=3201,
    )
    server = stack.server_config(params, "tok")
    assert (server.port, server.store_max_bytes, server.store_retention_days, server.allowed_hosts, server.token,
            server.otlp_intake_grpc_port) == (18181, 2**28, 2.0, ("a.example",), "tok", 4399)
    settings = stack.stack_settings(Home(tmp_path), params, server)
    assert settings.server is server and (settings.prometheus, settings.ready_timeout, settings.tempo_port) == (
        False,
        5.0,
        3201,
    )


def test_a_detached_start_passes_a_negative_flag_on() -> None:
    command = typer.main.get_command(app)
    start = command.commands["server"].commands["start"]
    ctx = start.make_context("start", ["--no-prometheus", "--port", "18182", "--allowed-host", "x.example"])
    args = stack._rerun_args(ctx, Home(Path("/tmp/h")))
    assert "--no-prometheus" in args and args[args.index("--port") + 1] == "18182" and "x.example" in args
    assert "--prometheus" not in args and "--tempo" not in args  # defaults are not repeated


def test_which_server_follows_one_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RL_INSIGHT_SERVER_URL", raising=False)
    cfg = tmp_path / "upstream.yaml"
    cfg.write_text("server:\n  port: 18999\n")
    assert find_server(tmp_path, None, None, None) is None  # no guessed address
    with pytest.raises(ServiceError, match="no rl-insight server is running") as err:
        require_server(tmp_path, None, None, None)
    assert "--server-url" in (err.value.hint or "")
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", "http://env.example:1")
    assert find_server(tmp_path, None, "t", None).url == "http://env.example:1"
    assert find_server(tmp_path, None, "t", cfg).url == "http://127.0.0.1:18999"
    got = find_server(tmp_path, "http://flag.example:2/", "t", cfg)
    assert got is not None and got.url == "http://flag.example:2" and got.headers == {"Authorization": "Bearer t"}


@pytest.mark.parametrize("flag", ["--store-writer", "--insights-worker"])
def test_a_worker_kind_that_does_not_exist_is_refused_before_anything_starts(tmp_path: Path, flag: str) -> None:
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["server", "start", flag, "fork", "--home", str(tmp_path)])
    assert result.exit_code == 2 and "'fork' is not one of process, thread" in result.output
    assert not any(tmp_path.iterdir())  # nothing was started or written


def test_an_option_is_declared_once_and_its_flag_help_and_env_var_are_made_from_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 65: a field declared with `option(...)` is a `server start` flag with the field's help, default and an
    environment variable (RL_INSIGHT_SERVER_<NAME>, or the field's established name); no other place names it."""
    from rl_insight.cli import start_flags
    from rl_insight.server.config import flag_of

    declared = {f.name: flag_of(f) for f in fields(ServerConfig) + fields(StackSettings) if flag_of(f) is not None}
    params = _start_params()
    assert set(declared) <= set(params) and len(declared) > 50
    flags_source = Path(start_flags.__file__).read_text()
    assert not [n for n in declared if f'"--{n.replace("_", "-")}"' in flags_source or f"'--{n.replace('_', '-')}'"
                in flags_source]  # (no flag of a field is written in the CLI's module)
    command = typer.main.get_command(app).commands["server"].commands["start"]
    by_name = {p.name: p for p in command.params}
    for name, spec in declared.items():
        assert by_name[name].help == spec.help, name
        assert by_name[name].envvar == (spec.env or f"RL_INSIGHT_SERVER_{name.upper()}"), name
    monkeypatch.setenv("RL_INSIGHT_SERVER_STORE_MAX_GB", "3.5")
    monkeypatch.setenv("RL_INSIGHT_SERVER_PROMETHEUS", "false")
    ctx = command.make_context("start", ["--port", "18183"])
    assert (ctx.params["store_max_gb"], ctx.params["prometheus"], ctx.params["port"]) == (3.5, False, 18183)
    monkeypatch.setenv("RL_INSIGHT_SERVER_STORE_WRITER", "elsewhere")
    with pytest.raises(Exception, match="not one of process, thread"):
        command.make_context("start", [])
