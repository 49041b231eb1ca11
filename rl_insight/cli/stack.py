"""`rl-insight server start`: the stack this home runs (stop, status, credentials, logs: stack_control.py).

`start` reads each ingest-server option under its `ServerConfig` field name, with the dataclass's default, and
builds the config from its parameters by name (`server_config`); the supervisor's own options are `StackSettings`
fields built the same way. A new option is a field plus a flag; no table maps one name to another.
"""

from __future__ import annotations

import inspect
import os
import signal
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

import typer

from .. import env
from ..child import python_command, python_env
from ..errors import InvalidInputError, ServiceError
from ..server.config import ServerConfig
from ..services.home import Home
from ..services.settings import StackSettings
from ..services.state import StackState
from .options import ConfigOpt, HomeOpt, apply_config_file, echo_table
from .stack_control import follow_logs, print_status, print_training_side
from .start_flags import AttachLogsFlag, DataDirFlag, DetachFlag, NoTokenFlag, config_parameters

LOOPBACK = ("127.0.0.1", "localhost", "::1")
SERVER = ServerConfig()  # the ingest server's defaults, read by the flags below
STACK = StackSettings(home=Home(Path(".")))  # the supervisor's defaults
# parameters that are neither: how this command runs, or resolved before the configs are built
NOT_CONFIG = {"ctx", "config", "detach", "attach_logs", "no_token", "home", "data_dir"}
SECRET_OPTIONS = ("metrics_token",)  # compared with the running server's, never printed


def start(ctx: typer.Context, **given: Any) -> int:
    """Start the ingest server (and Prometheus when available) and supervise them."""
    # (every option is a config field, server/config.py `option`; they are read below by name, from ctx.params)
    config, home = given.get("config"), given.get("home")
    if config is not None and not apply_config_file(ctx, config).enabled:
        typer.echo("RL-Insight server management is disabled by config.")
        return 0
    p = ctx.params  # from here on: flag > upstream's file > default, for every option
    if p["detach"] and p["attach_logs"]:
        raise typer.BadParameter("--attach-logs prints the logs of a foreground stack; it cannot be used with --detach",
                                 param_hint="--attach-logs")
    _refuse_what_cannot_run(p)
    h = Home.resolve(home)
    h.ensure()
    state = StackState.read(h)
    if state and state.supervisor_alive():
        _refuse_other_port(ctx, state)
        _refuse_other_options(ctx, h, state)
        return _already_running(h, state)

    tok = _token(h, p)
    if p["detach"]:
        env_vars = {k: v for k, v in os.environ.items() if k != "RL_INSIGHT_TOKEN"}
        if tok:
            env_vars["RL_INSIGHT_TOKEN"] = tok  # through the environment: argv is visible to every user in `ps`
        if p.get("metrics_token"):
            env_vars[env.METRICS_TOKEN] = p["metrics_token"]
        return _start_detached(h, _rerun_args(ctx, h), p["ready_timeout"], env_vars, tok, p["no_token"])

    return _run_in_foreground(h, p, tok)


def _param(name: str, kind: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default)


# `start`'s parameters: how it runs, then every configuration field declared as an option (cli/start_flags.py)
start.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
     _param("config", Optional[Path], ConfigOpt), _param("detach", DetachFlag, False),
     _param("attach_logs", AttachLogsFlag, False), _param("data_dir", DataDirFlag, None),
     _param("no_token", NoTokenFlag, False), *config_parameters(), _param("home", Optional[Path], HomeOpt)],
    return_annotation=int)


def _run_in_foreground(h: Home, p: dict[str, Any], tok: str) -> int:
    """Plan and start the stack, print where it is, supervise it until a signal: the supervisor's exit status."""
    from ..services.supervisor import Supervisor  # (the service stack: loaded by the command that starts it)

    sup = Supervisor(stack_settings(h, p, server_config(p, tok)),
                     report=lambda msg: typer.echo(f"[rl-insight] {msg}", err=True))
    sup.plan()
    stop_now = lambda *_: sup.request_stop()  # noqa: E731 - a signal handler: one expression, named for reading
    signal.signal(signal.SIGTERM, stop_now)
    signal.signal(signal.SIGINT, stop_now)
    offsets = {svc.name: (svc.log.stat().st_size if svc.log.exists() else 0) for svc in sup.services}
    sup.start()
    _print_started(h, StackState.read(h), tok)
    typer.echo("Press Ctrl+C to stop.")
    if p["attach_logs"]:  # from where each log stood before this start: its start-up lines too
        follow_logs([(svc.name, svc.log, offsets.get(svc.name, 0)) for svc in sup.services], stop=sup._stopping)
    return sup.watch()


def server_config(params: dict[str, Any], token: str) -> ServerConfig:
    """The ingest server's config from `start`'s parameters, each read under its field name."""
    given = {f.name: params[f.name] for f in fields(ServerConfig)
             if f.name in params and f.name not in NOT_CONFIG and params[f.name] is not None}
    given["allowed_hosts"] = tuple(given.get("allowed_hosts", ()))
    given["trusted_proxy"] = tuple(given.get("trusted_proxy", ()))
    for path in ("export_tensorboard", "shared_dir", "access_map"):  # the server may run from another directory
        if given.get(path):
            given[path] = str(Path(given[path]).expanduser().resolve())
    return ServerConfig(**{**given, "token": token})


def stack_settings(h: Home, params: dict[str, Any], server: ServerConfig) -> StackSettings:
    """The supervisor's settings from `start`'s parameters, each read under its field name."""
    given = {f.name: params[f.name] for f in fields(StackSettings)
             if f.name in params and f.name not in NOT_CONFIG and params[f.name] is not None}
    for path in ("log_dir", "extra_dashboard_dir"):
        if path in given:
            given[path] = Path(given[path])
    data_dir = params.get("data_dir")
    return StackSettings(home=h, server=server, data_dir=Path(data_dir) if data_dir else None, **given)


def _refuse_bad_urls(p: dict[str, Any]) -> None:
    for url_flag in ("prometheus_url", "public_url"):
        if p.get(url_flag):
            url = urlsplit(p[url_flag])
            if url.scheme not in ("http", "https") or not url.hostname:
                raise typer.BadParameter(f"{p[url_flag]!r} is not an http(s)://host[:port][/path] URL",
                                         param_hint="--" + url_flag.replace("_", "-"))


def _refuse_what_cannot_run(p: dict[str, Any]) -> None:
    """Name a missing extra, a bad directory or a bad value before anything starts."""
    if p.get("store"):  # (read as the server will: its config's location; a backend that needs an extra says so)
        from ..server.runstore.backend import open_backend

        open_backend(server_config(p, "").store_location).check_available()
    if p["export_tensorboard"] is not None:
        from ..export.tensorboard_writer import _import as need_tensorboard

        need_tensorboard()
    if p["export_wandb"]:
        from ..export.wandb_writer import _import as need_wandb

        need_wandb()
    if p["extra_dashboard_dir"] is not None:
        from ..services.grafana import extra_dashboards

        extra_dashboards(Path(p["extra_dashboard_dir"]))
    _refuse_bad_urls(p)
    from ..errors import ConfigError
    from ..server.rooms.alerting.am_config import Grouping

    try:
        Grouping(p["alert_group_wait"], p["alert_group_interval"], p["alert_repeat_interval"])
    except ConfigError as exc:
        raise typer.BadParameter(exc.message, param_hint="--" + exc.message.split()[0].replace("_", "-")) from None
    if p["otlp_protocol"] not in ("http/protobuf", "grpc"):
        raise typer.BadParameter("must be http/protobuf or grpc", param_hint="--otlp-protocol")
    if p["otlp_protocol"] == "grpc" or p["otlp_intake_grpc_port"]:
        from ..server.outbound.otlp import require_grpc

        require_grpc()


def _token(h: Home, p: dict[str, Any]) -> str:
    if p["no_token"]:
        if p["host"] not in LOOPBACK:
            typer.secho(f"warning: --no-token: anyone who can reach {p['host']}:{p['port']} can write metrics and "
                        "scrape targets", err=True, fg="yellow")
        return ""
    if p["token"]:
        return str(p["token"])
    # single sign-on needs a token even on loopback: without one every request is trusted (server/access/sso.py)
    return "" if p["host"] in LOOPBACK and not p.get("trusted_proxy") else h.ensure_token()


def _refuse_other_port(ctx: typer.Context, state: StackState) -> None:
    """A second `server start --port X` while a server runs on another port: say so, never ignore the flag."""
    source = ctx.get_parameter_source("port")  # typer may vendor click: compare by name, not by enum class
    if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
        return
    wanted = ctx.params["port"]
    running = state.ingest_url.rsplit(":", 1)[-1].rstrip("/")
    if running.isdigit() and int(running) != wanted:
        raise InvalidInputError(f"a server of this home already runs on port {running} ({state.ingest_url}); "
                                f"--port {wanted} was not applied",
                                hint="`rl-insight server stop`, then start again with --port; or use another --home")


def _given(ctx: typer.Context) -> list[str]:
    """The parameters this command line (or upstream's --config file) set, not left at their defaults."""
    out = []
    for name in ctx.params:
        source = ctx.get_parameter_source(name)  # typer may vendor click: compare by name, not by enum class
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.append(name)
    return out


def _refuse_other_options(ctx: typer.Context, h: Home, state: StackState) -> None:
    """A second `server start` with an option the running server runs with another value (`--store postgresql://…`
    beside a server on SQLite): refused, each such option named with the value it runs with — never an exit 0 that
    leaves the running server as it was. What cannot be compared (the token) is left out."""
    from ..server.config import ServerConfig

    p = ctx.params
    try:
        running = ServerConfig.from_file(h.runtime_dir / "server.json")
    except Exception:  # (a server of an older version, or the file gone: the port check above still holds)
        return
    wanted = server_config(p, "")
    differ: list[str] = []
    for name in _given(ctx):
        if name in NOT_CONFIG or name in ("port", "token"):
            continue
        if hasattr(running, name):
            have, want = getattr(running, name), getattr(wanted, name)
        elif name in ("prometheus_port", "grafana_port") and state.service(name.split("_")[0]) is not None:
            have, want = state.service(name.split("_")[0]).port, p[name]  # type: ignore[union-attr]
        else:
            continue
        if (tuple(have) if isinstance(have, list) else have) != (tuple(want) if isinstance(want, list) else want):
            if name in SECRET_OPTIONS:  # named, never echoed
                differ.append(f"--{name.replace('_', '-')} (it runs with another)")
                continue
            shown = "its default" if have is None else have
            differ.append(f"--{name.replace('_', '-')} {want} (it runs with {shown})")
    if differ:
        raise InvalidInputError(f"a server of this home already runs ({state.ingest_url}) with other options; not "
                                f"applied: {'; '.join(differ)}",
                                hint="`rl-insight server stop`, then start again with them; or use another --home")


def _already_running(h: Home, state: StackState) -> int:
    typer.echo(f"rl-insight server is already running (supervisor pid {state.supervisor.pid}).")
    rc = print_status(h, state)
    print_training_side(state, h.running_token())
    loopback = any(state.ingest_url.startswith(f"http://{n}") for n in ("127.", "localhost", "[::1]"))
    if loopback or not state.token_required:
        what = " and ".join(w for w, bad in (("listens on loopback only", loopback),
                                             ("has no token", not state.token_required)) if bad)
        typer.secho(f"warning: the running server {what} (e.g. one `rl-insight demo` started); training processes on "
                    "other hosts cannot use it. To serve a real job: `rl-insight server stop`, then start again.",
                    err=True, fg="yellow")
    return rc


def _rerun_args(ctx: typer.Context, h: Home) -> list[str]:
    """This `server start` command line without --detach, --token and --metrics-token (secrets go through the
    environment),
    rebuilt from the parsed options, so it works however the CLI was invoked."""
    args = ["server", "start", "--home", str(h.root)]
    for p in ctx.command.params:
        if p.name in ("detach", "token", "metrics_token", "home") or not getattr(p, "opts", None) or \
                p.param_type_name != "option":
            continue
        value = ctx.params.get(p.name)
        if value is None or value == p.default:
            continue
        if getattr(p, "is_flag", False):
            if value:
                args.append(p.opts[0])
            elif p.secondary_opts:  # --prometheus/--no-prometheus given as --no-prometheus
                args.append(p.secondary_opts[0])
        elif isinstance(value, (list, tuple)):  # repeatable options
            for v in value:
                args += [p.opts[0], str(v)]
        else:
            args += [p.opts[0], str(value)]
    return args


def _start_detached(
    h: Home, args: list[str], ready_timeout: float, env: dict[str, str], tok: str, no_token: bool
) -> int:
    """Re-run `server start` without --detach as a background supervisor, then wait until it is ready."""
    if no_token and "--no-token" not in args:
        args.append("--no-token")
    log = h.logs_dir / "supervisor.log"
    from ..services import process

    proc = process.spawn(python_command("rl_insight", *args), log, env=python_env(env))
    deadline = time.monotonic() + ready_timeout * 2 + 10
    while time.monotonic() < deadline:
        state = StackState.read(h)
        if state and state.ready and state.supervisor.pid == proc.pid:
            _print_started(h, state, tok)
            typer.echo(f"Running in the background (supervisor pid {proc.pid}); stop with `rl-insight server stop`.")
            return 0
        if proc.poll() is not None:
            raise ServiceError(f"the background server exited with code {proc.returncode}; see {log}:\n{_tail(log)}")
        time.sleep(0.2)
    raise ServiceError(f"the background server did not become ready in time; see {log}")


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _receivers_kept(h: Home) -> int:
    """How many alert receivers the started server's data directory holds (0 when it cannot be read)."""
    import json

    from ..server.rooms.alerting.notifications import config_paths
    from ..server.rooms.alerting.receivers import ReceiverFile

    try:
        data_dir = json.loads((h.runtime_dir / "server.json").read_text()).get("data_dir") or h.data_dir
        return len(ReceiverFile(config_paths(Path(data_dir))[0]).load())
    except Exception:  # (a word of advice at start: never a reason to fail it)
        return 0


def _print_started(h: Home, state: StackState | None, token: str) -> None:
    if state is None:
        raise ServiceError(f"the server started but its state file {h.state_file} cannot be read")
    typer.echo(f"rl-insight server is ready (home {h.root}).")
    rows = [[s.name, str(s.pid), s.url or "", s.version, s.log] for s in state.services]
    echo_table(rows, ["SERVICE", "PID", "URL", "VERSION", "LOG"])
    for moved in state.moved_ports:  # not only in the log: the addresses above are not the usual ones
        typer.secho(moved, fg="yellow")
    # optional services whose binaries are not installed: one line, not two per service (the UI works without them)
    absent = [m for m in state.missing if "not found" in m.reason]
    if absent:
        typer.secho(f"not running, not installed (optional: ingest and the built-in UI work without them): "
                    f"{', '.join(m.name for m in absent)}", fg="yellow")
        typer.echo("  to get them: `rl-insight server install` (or --local-archive with a bundle), or pass "
                   + " / ".join(f"--{m.name}-bin PATH" for m in absent) + "; `rl-insight server status` says more")
    for m in state.missing:
        if m in absent:
            continue
        typer.secho(f"{m.name} is not running: {m.reason}", fg="yellow")
        if m.hint:
            typer.echo(f"  to get it: {m.hint}")
    if state.service("alertmanager") is not None:
        kept = _receivers_kept(h)
        if kept:  # (a restarted server keeps its receivers: no advice to add one it has)
            typer.echo(f"Notifications: through Alertmanager to {kept} receiver{'s' if kept > 1 else ''} "
                       "(`rl-insight alerts receivers list`)")
        else:
            typer.echo("Notifications: through Alertmanager; say where with `rl-insight alerts receivers add` "
                       "(docs/alerts.md)")
    if state.grafana_password_new:
        typer.echo(f"\nGrafana login: admin / {(h.root / 'grafana-admin-password').read_text().strip()}  "
                   "(generated now; `rl-insight server credentials` shows it again)")
    print_training_side(state, token)


