"""`rl-insight server start`: the stack this home runs (stop, status, credentials, logs: stack_control.py).

`start` reads each ingest-server option under its `ServerConfig` field name, with the dataclass's default, and
builds the config from its parameters by name (`server_config`); the supervisor's own options are `StackSettings`
fields built the same way. A new option is a field plus a flag; no table maps one name to another.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlsplit

import typer

from .. import env
from ..errors import InvalidInputError, ServiceError
from ..server.config import INSIGHTS_WORKERS, STORE_WRITERS, ServerConfig
from ..services.home import Home
from ..services.settings import StackSettings
from ..services.state import StackState
from .options import ConfigOpt, HomeOpt, apply_config_file, echo_table
from .stack_control import follow_logs, print_status, print_training_side

LOOPBACK = ("127.0.0.1", "localhost", "::1")
SERVER = ServerConfig()  # the ingest server's defaults, read by the flags below
STACK = StackSettings(home=Home(Path(".")))  # the supervisor's defaults
# parameters that are neither: how this command runs, or resolved before the configs are built
NOT_CONFIG = {"ctx", "config", "detach", "attach_logs", "no_token", "home", "data_dir"}


def start(
    ctx: typer.Context,
    config: Optional[Path] = ConfigOpt,
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background and return once ready."),
    attach_logs: bool = typer.Option(False, "--attach-logs", help="In the foreground, also print every service's log "
                                                                  "lines prefixed with [service] (not with --detach)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Where the run store, TSDB, traces and Grafana "
                                                                     "keep "
                                                                     "data (default <home>/data; upstream's "
                                                                     "server.data_dir)."),
    extra_dashboard_dir: Optional[Path] = typer.Option(None, "--extra-dashboard-dir",
                                                       help="More Grafana dashboards (classic JSON) provisioned next "
                                                            "to ours."),
    export_tensorboard: Optional[Path] = typer.Option(None, "--export-tensorboard", metavar="DIR",
                                                      help="Write every run's scalars and insight metrics as "
                                                           "TensorBoard "
                                                           "events under DIR/<project>/<experiment> (extra "
                                                           "rl-insight[tensorboard])."),
    export_wandb: bool = typer.Option(SERVER.export_wandb, "--export-wandb",
                                      help="One W&B run per run, resumed across restarts (extra rl-insight[wandb]; "
                                           "WANDB_MODE=offline for `wandb sync`)."),
    wandb_project: Optional[str] = typer.Option(SERVER.wandb_project, "--wandb-project",
                                                help="W&B project (default: the run's project)."),
    wandb_entity: Optional[str] = typer.Option(SERVER.wandb_entity, "--wandb-entity", help="W&B entity."),
    host: str = typer.Option(SERVER.host, help="Ingest server bind address."),
    port: int = typer.Option(SERVER.port, help="Ingest server port."),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Directory for service logs (default <home>/logs)."),
    prometheus: bool = typer.Option(STACK.prometheus, "--prometheus/--no-prometheus",
                                    help="Run Prometheus (--no-prometheus: only the ingest server)."),
    prometheus_bin: Optional[str] = typer.Option(None, "--prometheus-bin", help="Prometheus binary to use."),
    prometheus_url: Optional[str] = typer.Option(SERVER.prometheus_url, "--prometheus-url", metavar="URL",
                                                 help="The Prometheus-compatible query endpoint the UI's panels, alert "
                                                      "history and Grafana read (VictoriaMetrics, Mimir, Thanos; with "
                                                      "--remote-write-url sending it the managed Prometheus's data). "
                                                      "Default: the managed Prometheus."),
    prometheus_host: str = typer.Option(STACK.prometheus_host, help="Prometheus bind address (loopback by default)."),
    prometheus_port: int = typer.Option(STACK.prometheus_port, help="Prometheus port."),
    scrape_interval: str = typer.Option(STACK.scrape_interval, help="Prometheus scrape interval."),
    retention: str = typer.Option(STACK.retention, help="Prometheus TSDB retention time."),
    store: Optional[str] = typer.Option(SERVER.store, "--store", envvar=env.STORE_URL, metavar="URL",
                                        help="The run store: postgresql://user@host:port/db (extra "
                                             "rl-insight[postgres]; the password from RL_INSIGHT_STORE_PASSWORD, "
                                             "~/.pgpass or ?passfile=, never in the URL) or sqlite:///FILE (default: "
                                             "a SQLite file under --data-dir). See docs/scale.md."),
    shared_dir: Optional[str] = typer.Option(SERVER.shared_dir, "--shared-dir", metavar="DIR",
                                             help="A directory every server of a fleet mounts (NFS, Lustre): profile "
                                                  "traces and their analyses, which any server then serves "
                                                  "(default: --data-dir). See docs/scale.md."),
    store_retention_days: float = typer.Option(SERVER.store_retention_days, min=0.01,
                                               help="Run store: delete runs not seen for this many days."),
    store_max_gb: float = typer.Option(SERVER.store_max_gb, min=0.01,
                                       help="Run store: delete the oldest runs while the file is larger."),
    auto_port: bool = typer.Option(STACK.auto_port, "--auto-port", help="Pick free ports for every service whose "
                                                                        "port is busy."),
    token: Optional[str] = typer.Option(None, "--token", envvar=env.TOKEN,
                                        help="Bearer token for state-changing routes (default: generated when not on "
                                             "loopback)."),
    no_token: bool = typer.Option(False, "--no-token", help="Accept writes without a token even on a network address."),
    allowed_hosts: list[str] = typer.Option(list(SERVER.allowed_hosts), "--allowed-host", metavar="NAME",
                                            help="Another name clients use for this server (DNS name behind a proxy); "
                                                 "without a token, requests for other Host names are refused "
                                                 "(DNS-rebinding defence). Repeatable."),
    max_connections: int = typer.Option(SERVER.max_connections, "--max-connections", min=16,
                                        help="Client connections the ingest server holds at once (about one per "
                                             "training process; past it new ones are closed and counted). See "
                                             "docs/scale.md."),
    keep_alive_s: float = typer.Option(SERVER.keep_alive_s, "--keep-alive-s", min=1,
                                       help="Seconds a client's connection may sit idle before the server closes "
                                            "it (longer than the clients' 10 s heartbeat keeps idle ones open)."),
    store_writer: str = typer.Option(SERVER.store_writer, "--store-writer", metavar="|".join(STORE_WRITERS),
                                     callback=lambda v: _one_of(v, STORE_WRITERS, "--store-writer"),
                                     help="Where the run store's writer runs: a process of its own (the default: "
                                          "the ingest loop never waits on its GIL) or a thread of the server."),
    insights_worker: str = typer.Option(SERVER.insights_worker, "--insights-worker",
                                        metavar="|".join(INSIGHTS_WORKERS),
                                        callback=lambda v: _one_of(v, INSIGHTS_WORKERS, "--insights-worker"),
                                        help="Where the insight metrics are computed: a process of their own (the "
                                             "default: a round never holds the ingest loop's GIL) or a thread of the "
                                             "server."),
    ready_timeout: float = typer.Option(STACK.ready_timeout, help="Seconds to wait for each service to become ready."),
    remote_write_url: Optional[str] = typer.Option(None, help="Prometheus remote_write URL (Mimir, Thanos, "
                                                              "VictoriaMetrics)."),
    tempo: bool = typer.Option(STACK.tempo, "--tempo/--no-tempo", help="Run Tempo (when installed)."),
    tempo_bin: Optional[str] = typer.Option(None, "--tempo-bin", help="Tempo binary to use."),
    tempo_host: str = typer.Option(STACK.tempo_host, help="Tempo HTTP API bind address."),
    tempo_port: int = typer.Option(STACK.tempo_port, help="Tempo HTTP API port."),
    tempo_retention: str = typer.Option(STACK.tempo_retention, help="Tempo block retention."),
    otlp_host: str = typer.Option(STACK.otlp_host, help="Tempo OTLP receivers' bind address (0.0.0.0 to accept other "
                                                        "hosts)."),
    otlp_grpc_port: int = typer.Option(STACK.otlp_grpc_port, help="Tempo OTLP gRPC port."),
    otlp_http_port: int = typer.Option(STACK.otlp_http_port, help="Tempo OTLP HTTP port."),
    otlp_endpoint: Optional[str] = typer.Option(SERVER.otlp_endpoint, help="Forward spans to this OTLP receiver "
                                                                           "instead "
                                                                          "of a managed Tempo."),
    otlp_protocol: str = typer.Option(SERVER.otlp_protocol, help="http/protobuf or grpc."),
    otlp_intake_grpc_port: int = typer.Option(SERVER.otlp_intake_grpc_port, "--otlp-intake-grpc-port", min=0, max=65535,
                                              help="Also take OTLP traces over gRPC on this port (verl's MLflow "
                                                   "traces, "
                                                   "vLLM, any SDK; extra rl-insight[grpc]). 0: off; OTLP/HTTP at "
                                                   "/v1/traces is always on."),
    stall_snapshots: bool = typer.Option(SERVER.stall_snapshots, "--stall-snapshots/--no-stall-snapshots",
                                         help="Take a stack snapshot of a run by itself when one of its lanes stalls "
                                              "or its step clock stops (see `rl-insight stacks`)."),
    stall_step_s: float = typer.Option(SERVER.stall_step_s, "--stall-step-s", min=0,
                                       help="Seconds without a new step before a run counts as stalled (0: only the "
                                            "stalled-lane insight)."),
    stall_snapshot_interval_s: float = typer.Option(SERVER.stall_snapshot_interval_s, "--stall-snapshot-interval-s",
                                                    min=60, help="At most one automatic stall episode per run this "
                                                                 "often."),
    auto_profile_on_stall: bool = typer.Option(SERVER.auto_profile_on_stall, "--auto-profile-on-stall",
                                               help="When a stalled run's stacks still move (slow, not stuck), profile "
                                                    "its next step on the stalled lanes."),
    grafana: bool = typer.Option(STACK.grafana, "--grafana/--no-grafana", help="Run Grafana (when installed)."),
    grafana_bin: Optional[str] = typer.Option(None, "--grafana-bin", help="Grafana binary to use (grafana or "
                                                                          "grafana-server)."),
    grafana_host: str = typer.Option(STACK.grafana_host, help="Grafana bind address (behind its login)."),
    grafana_port: int = typer.Option(STACK.grafana_port, help="Grafana port."),
    home: Optional[Path] = HomeOpt,
) -> int:
    """Start the ingest server (and Prometheus when available) and supervise them."""
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
        return _start_detached(h, _rerun_args(ctx, h), p["ready_timeout"], env_vars, tok, p["no_token"])

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


def _one_of(value: str, allowed: tuple[str, ...], flag: str) -> str:
    if value not in allowed:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}", param_hint=flag)
    return value


def server_config(params: dict[str, Any], token: str) -> ServerConfig:
    """The ingest server's config from `start`'s parameters, each read under its field name."""
    given = {f.name: params[f.name] for f in fields(ServerConfig)
             if f.name in params and f.name not in NOT_CONFIG and params[f.name] is not None}
    given["allowed_hosts"] = tuple(given.get("allowed_hosts", ()))
    for path in ("export_tensorboard", "shared_dir"):  # the server may run from another directory
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


def _refuse_what_cannot_run(p: dict[str, Any]) -> None:
    """Name a missing extra, a bad directory or a bad value before anything starts."""
    if p.get("prometheus_url"):
        url = urlsplit(p["prometheus_url"])
        if url.scheme not in ("http", "https") or not url.hostname:
            raise typer.BadParameter(f"{p['prometheus_url']!r} is not an http(s)://host[:port][/path] URL",
                                     param_hint="--prometheus-url")
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
    return "" if p["host"] in LOOPBACK else h.ensure_token()


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
    """This `server start` command line without --detach and --token (the token goes through the environment),
    rebuilt from the parsed options, so it works however the CLI was invoked."""
    args = ["server", "start", "--home", str(h.root)]
    for p in ctx.command.params:
        if p.name in ("detach", "token", "home") or not getattr(p, "opts", None) or p.param_type_name != "option":
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

    proc = process.spawn([sys.executable, "-m", "rl_insight", *args], log, env=env)
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
    if state.grafana_password_new:
        typer.echo(f"\nGrafana login: admin / {(h.root / 'grafana-admin-password').read_text().strip()}  "
                   "(generated now; `rl-insight server credentials` shows it again)")
    print_training_side(state, token)


