"""`rl-insight server start | stop | status | targets …`."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import typer
import yaml

from .. import env
from ..errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    RLInsightError,
    ServiceError,
    UnauthorizedError,
)
from ..server.config import (
    DEFAULT_PORT,
    DEFAULT_RETENTION_DAYS,
    DEFAULT_STORE_MAX_BYTES,
    ServerConfig,
)
from ..server.prometheus.targets import TargetRegistry, parse_registration
from ..services import process
from ..services.home import Home
from ..services.state import StackState
from ..services.supervisor import StackSettings, Supervisor, service_status

server_app = typer.Typer(help="Run the ingest server with Prometheus, and manage scrape targets.", no_args_is_help=True)
targets_app = typer.Typer(help="Register, list and remove Prometheus scrape targets.", no_args_is_help=True)
server_app.add_typer(targets_app, name="targets")
experiments_app = typer.Typer(help="Experiments (a run's scrape targets): list, show, archive, restore.", no_args_is_help=True)
server_app.add_typer(experiments_app, name="experiments")

HomeOpt = typer.Option(None, "--home", envvar=env.HOME, help="State directory (default ~/.rl-insight).")
ConfigOpt = typer.Option(None, "--config", exists=True, dir_okay=False,
                         help="Upstream RL-Insight's server YAML (ports, binary paths, data dir, retention); flags win over it.")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _echo_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        typer.echo("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


# ---------------------------------------------------------------------------- start
@server_app.command("start")
def start(
    ctx: typer.Context,
    config: Optional[Path] = ConfigOpt,
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background and return once ready."),
    attach_logs: bool = typer.Option(False, "--attach-logs", help="In the foreground, also print every service's log lines "
                                                                  "prefixed with [service] (not with --detach)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Where the run store, TSDB, traces and Grafana keep data "
                                                                     "(default <home>/data; upstream's server.data_dir)."),
    extra_dashboard_dir: Optional[Path] = typer.Option(None, "--extra-dashboard-dir",
                                                       help="More Grafana dashboards (classic JSON) provisioned next to ours."),
    export_tensorboard: Optional[Path] = typer.Option(None, "--export-tensorboard", metavar="DIR",
                                                      help="Write every run's scalars and insight metrics as TensorBoard events "
                                                           "under DIR/<project>/<experiment> (extra rl-insight[tensorboard])."),
    export_wandb: bool = typer.Option(False, "--export-wandb", help="One W&B run per run, resumed across restarts "
                                                                    "(extra rl-insight[wandb]; WANDB_MODE=offline for `wandb sync`)."),
    wandb_project: Optional[str] = typer.Option(None, "--wandb-project", help="W&B project (default: the run's project)."),
    wandb_entity: Optional[str] = typer.Option(None, "--wandb-entity", help="W&B entity."),
    host: str = typer.Option("0.0.0.0", help="Ingest server bind address."),
    port: int = typer.Option(DEFAULT_PORT, help="Ingest server port."),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Directory for service logs (default <home>/logs)."),
    prometheus_bin: Optional[str] = typer.Option(None, "--prometheus-bin", help="Prometheus binary to use."),
    prometheus_host: str = typer.Option("127.0.0.1", help="Prometheus bind address (loopback by default)."),
    prometheus_port: int = typer.Option(9090, help="Prometheus port."),
    no_prometheus: bool = typer.Option(False, "--no-prometheus", help="Run only the ingest server."),
    scrape_interval: str = typer.Option("10s", help="Prometheus scrape interval."),
    retention: str = typer.Option("30d", help="Prometheus TSDB retention time."),
    store_retention_days: float = typer.Option(DEFAULT_RETENTION_DAYS, min=0.01, help="Run store: delete runs not seen for this many days."),
    store_max_gb: float = typer.Option(DEFAULT_STORE_MAX_BYTES / 2**30, min=0.01, help="Run store: delete the oldest runs while the file is larger."),
    auto_port: bool = typer.Option(False, "--auto-port", help="Pick free ports for every service whose port is busy."),
    token: Optional[str] = typer.Option(None, "--token", envvar=env.TOKEN,
                                        help="Bearer token for state-changing routes (default: generated when not on loopback)."),
    no_token: bool = typer.Option(False, "--no-token", help="Accept writes without a token even on a network address."),
    allowed_host: list[str] = typer.Option([], "--allowed-host", metavar="NAME",
                                           help="Another name clients use for this server (DNS name behind a proxy); without a "
                                                "token, requests for other Host names are refused (DNS-rebinding defence). Repeatable."),
    ready_timeout: float = typer.Option(60.0, help="Seconds to wait for each service to become ready."),
    remote_write_url: Optional[str] = typer.Option(None, help="Prometheus remote_write URL (Mimir, Thanos, VictoriaMetrics)."),
    no_tempo: bool = typer.Option(False, "--no-tempo", help="Do not run Tempo."),
    tempo_bin: Optional[str] = typer.Option(None, "--tempo-bin", help="Tempo binary to use."),
    tempo_host: str = typer.Option("127.0.0.1", help="Tempo HTTP API bind address."),
    tempo_port: int = typer.Option(3200, help="Tempo HTTP API port."),
    tempo_retention: str = typer.Option("720h", help="Tempo block retention."),
    otlp_host: str = typer.Option("127.0.0.1", help="Tempo OTLP receivers' bind address (0.0.0.0 to accept other hosts)."),
    otlp_grpc_port: int = typer.Option(4317, help="Tempo OTLP gRPC port."),
    otlp_http_port: int = typer.Option(4318, help="Tempo OTLP HTTP port."),
    otlp_endpoint: Optional[str] = typer.Option(None, help="Forward spans to this OTLP receiver instead of a managed Tempo."),
    otlp_protocol: str = typer.Option("http/protobuf", help="http/protobuf or grpc."),
    otlp_intake_grpc_port: int = typer.Option(0, "--otlp-intake-grpc-port", min=0, max=65535,
                                              help="Also take OTLP traces over gRPC on this port (verl's MLflow traces, vLLM, "
                                                   "any SDK; extra rl-insight[grpc]). 0: off; OTLP/HTTP at /v1/traces is always on."),
    no_grafana: bool = typer.Option(False, "--no-grafana", help="Do not run Grafana."),
    grafana_bin: Optional[str] = typer.Option(None, "--grafana-bin", help="Grafana binary to use (grafana or grafana-server)."),
    grafana_host: str = typer.Option("0.0.0.0", help="Grafana bind address (behind its login)."),
    grafana_port: int = typer.Option(3000, help="Grafana port."),
    home: Optional[Path] = HomeOpt,
) -> int:
    """Start the ingest server (and Prometheus when available) and supervise them."""
    if config is not None:
        upstream = apply_config_file(ctx, config)
        if not upstream.enabled:
            typer.echo("RL-Insight server management is disabled by config.")
            return 0
        p = ctx.params
        (detach, host, port, data_dir, extra_dashboard_dir, prometheus_bin, prometheus_port, no_prometheus, scrape_interval,
         retention, tempo_bin, tempo_port, tempo_retention, otlp_http_port, no_tempo, grafana_bin, grafana_port, no_grafana) = (
            p["detach"], p["host"], p["port"], p["data_dir"], p["extra_dashboard_dir"], p["prometheus_bin"], p["prometheus_port"],
            p["no_prometheus"], p["scrape_interval"], p["retention"], p["tempo_bin"], p["tempo_port"], p["tempo_retention"],
            p["otlp_http_port"], p["no_tempo"], p["grafana_bin"], p["grafana_port"], p["no_grafana"])
    if detach and attach_logs:
        raise typer.BadParameter("--attach-logs prints the logs of a foreground stack; it cannot be used with --detach",
                                 param_hint="--attach-logs")
    if export_tensorboard is not None:
        from ..export.tensorboard_writer import _import as need_tensorboard

        need_tensorboard()  # name the missing extra before anything starts
    if export_wandb:
        from ..export.wandb_writer import _import as need_wandb

        need_wandb()
    if extra_dashboard_dir is not None:
        from ..services.grafana import extra_dashboards

        extra_dashboards(Path(extra_dashboard_dir))  # refuse a bad directory before anything starts
    h = Home.resolve(home)
    h.ensure()
    state = StackState.read(h)
    if state and state.supervisor_alive():
        typer.echo(f"rl-insight server is already running (supervisor pid {state.supervisor.pid}).")
        rc = _print_status(h, state)
        _print_training_side(state, h.running_token())
        loopback = any(state.ingest_url.startswith(f"http://{n}") for n in ("127.", "localhost", "[::1]"))
        if loopback or not state.token_required:
            what = " and ".join(w for w, bad in (("listens on loopback only", loopback), ("has no token", not state.token_required))
                                if bad)
            typer.secho(f"warning: the running server {what} (e.g. one `rl-insight demo` started); training processes on "
                        "other hosts cannot use it. To serve a real job: `rl-insight server stop`, then start again.",
                        err=True, fg="yellow")
        return rc

    if no_token:
        tok = ""
        if host not in LOOPBACK:
            typer.secho(f"warning: --no-token: anyone who can reach {host}:{port} can write metrics and scrape targets",
                        err=True, fg="yellow")
    elif token:
        tok = token
    else:
        tok = "" if host in LOOPBACK else h.ensure_token()

    if otlp_protocol not in ("http/protobuf", "grpc"):
        raise typer.BadParameter("must be http/protobuf or grpc", param_hint="--otlp-protocol")
    if otlp_protocol == "grpc" or otlp_intake_grpc_port:
        from ..server.outbound.otlp import require_grpc

        require_grpc()
    if detach:
        env = {k: v for k, v in os.environ.items() if k != "RL_INSIGHT_TOKEN"}
        if tok:
            env["RL_INSIGHT_TOKEN"] = tok  # through the environment: argv is visible to every user in `ps`
        return _start_detached(h, _rerun_args(ctx, h), ready_timeout, env, tok, no_token)

    settings = StackSettings(home=h, host=host, port=port, token=tok, log_dir=log_dir, prometheus=not no_prometheus,
                             prometheus_bin=prometheus_bin, prometheus_host=prometheus_host, prometheus_port=prometheus_port,
                             scrape_interval=scrape_interval, retention=retention, auto_port=auto_port,
                             allowed_hosts=tuple(allowed_host),
                             data_dir=Path(data_dir) if data_dir else None,
                             extra_dashboard_dir=Path(extra_dashboard_dir) if extra_dashboard_dir else None,
                             export_tensorboard=str(Path(export_tensorboard).expanduser().resolve()) if export_tensorboard else None,
                             export_wandb=export_wandb, wandb_project=wandb_project, wandb_entity=wandb_entity,
                             ready_timeout_s=ready_timeout, store_retention_days=store_retention_days,
                             store_max_bytes=int(store_max_gb * 2**30), remote_write_url=remote_write_url,
                             tempo=not no_tempo, tempo_bin=tempo_bin, tempo_host=tempo_host, tempo_port=tempo_port,
                             tempo_retention=tempo_retention, otlp_host=otlp_host, otlp_grpc_port=otlp_grpc_port,
                             otlp_http_port=otlp_http_port, otlp_endpoint=otlp_endpoint, otlp_protocol=otlp_protocol,
                             otlp_intake_grpc_port=otlp_intake_grpc_port,
                             grafana=not no_grafana, grafana_bin=grafana_bin, grafana_host=grafana_host,
                             grafana_port=grafana_port)
    sup = Supervisor(settings, report=lambda msg: typer.echo(f"[rl-insight] {msg}", err=True))
    sup.plan()
    stop_now = lambda *_: sup.request_stop()  # noqa: E731
    signal.signal(signal.SIGTERM, stop_now)
    signal.signal(signal.SIGINT, stop_now)
    offsets = {svc.name: (svc.log.stat().st_size if svc.log.exists() else 0) for svc in sup.services}
    sup.start()
    _print_started(h, StackState.read(h), tok)
    typer.echo("Press Ctrl+C to stop.")
    if attach_logs:  # from where each log stood before this start: its start-up lines too
        _follow_logs([(svc.name, svc.log, offsets.get(svc.name, 0)) for svc in sup.services], stop=sup._stopping)
    return sup.watch()


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
        typer.echo(f"note: {path}: not needed by rl-insight (it renders these itself): {', '.join(cfg.ignored)}", err=True)
    return cfg


def _follow_logs(logs: list[tuple[str, Path, int]], stop: Any) -> None:
    """--attach-logs: print new lines of every service log, prefixed with [service], until `stop` is set."""
    import threading

    def follow() -> None:
        handles: dict[str, Any] = {}
        for name, path, offset in logs:
            try:
                f = open(path, "r", errors="replace")
                f.seek(min(offset, path.stat().st_size))
                handles[name] = f
            except OSError:
                pass
        while True:
            for name, f in handles.items():
                for line in f.readlines():
                    typer.echo(f"[{name}] {line.rstrip()}")
            if stop.wait(0.3):
                break
        for f in handles.values():
            f.close()

    threading.Thread(target=follow, name="rl-insight-attach-logs", daemon=True).start()


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
        if p.is_flag:
            if value:
                args.append(p.opts[0])
        elif isinstance(value, (list, tuple)):  # repeatable options
            for v in value:
                args += [p.opts[0], str(v)]
        else:
            args += [p.opts[0], str(value)]
    return args


def _start_detached(h: Home, args: list[str], ready_timeout: float, env: dict[str, str], tok: str, no_token: bool) -> int:
    """Re-run `server start` without --detach as a background supervisor, then wait until it is ready."""
    if no_token and "--no-token" not in args:
        args.append("--no-token")
    log = h.logs_dir / "supervisor.log"
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
    _echo_table(rows, ["SERVICE", "PID", "URL", "VERSION", "LOG"])
    for m in state.missing:
        typer.secho(f"{m.name} is not running: {m.reason}", fg="yellow")
        if m.hint:
            typer.echo(f"  to get it: {m.hint}")
    if state.grafana_password_new:
        typer.echo(f"\nGrafana login: admin / {(h.root / 'grafana-admin-password').read_text().strip()}  "
                   "(generated now; `rl-insight server credentials` shows it again)")
    _print_training_side(state, token)


def _print_training_side(state: StackState, token: str) -> None:
    typer.echo("\nTraining side (verl: also add rl_insight to trainer.logger):")
    typer.echo(f"  export RL_INSIGHT_SERVER_URL={state.public_url}")
    if token:
        typer.echo(f"  export RL_INSIGHT_TOKEN={token}")
    typer.echo(f"  OTLP traces (verl's trace.backend=mlflow, vLLM, any SDK): OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={state.public_url}/v1/traces"
               " (docs/otlp.md)")


# ---------------------------------------------------------------------------- stop / status
@server_app.command("stop")
def stop(timeout: float = typer.Option(15.0, help="Seconds to wait before killing."), home: Optional[Path] = HomeOpt,
         config: Optional[Path] = ConfigOpt) -> int:
    """Stop what `server start` started (and nothing else). `--config` is accepted as upstream's; stop needs nothing from it."""
    if config is not None:
        from . import upstream_config

        upstream_config.load(Path(config))  # a broken file is still reported
    h = Home.resolve(home)
    state = StackState.read(h)
    if not state:
        typer.echo("No running rl-insight server was found.")
        return 0
    sup = state.supervisor
    if sup.alive():
        result = process.terminate(sup.pid, sup.marker, timeout)
        typer.echo(f"supervisor (pid {sup.pid}): {result}")
    for svc in reversed(state.services):
        if svc.alive():
            typer.echo(f"{svc.name} (pid {svc.pid}): {process.terminate(svc.pid, svc.marker, timeout)}")
    try:
        h.state_file.unlink()
    except FileNotFoundError:
        pass
    typer.echo("rl-insight server stopped.")
    return 0


@server_app.command("status")
def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output."), home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Show each service (pid, port, ready, version); exit 1 when the stack is not running."""
    _config_url(config)  # upstream's --config: validated; this command needs nothing from it
    h = Home.resolve(home)
    state = StackState.read(h)
    if not state:
        if as_json:
            typer.echo(json.dumps({"running": False, "services": []}))
        else:
            typer.echo("rl-insight server is not running.")
        return 1
    return _print_status(h, state, as_json)


def _print_status(h: Home, state: StackState, as_json: bool = False) -> int:
    services = [service_status(s) for s in state.services]
    running = state.supervisor_alive() and all(s["alive"] and s["ready"] for s in services)
    if as_json:
        typer.echo(json.dumps({"running": running, "supervisor": asdict(state.supervisor), "services": services,
                               "missing": [asdict(m) for m in state.missing], "public_url": state.public_url}, indent=2))
    else:
        rows = [[s["name"], str(s["pid"]) if s["alive"] else "-", str(s["port"]), "yes" if s["ready"] else "no",
                 s["version"], s["url"]] for s in services]
        rows += [[m.name, "-", "-", "missing", "-", m.hint or ""] for m in state.missing]
        _echo_table(rows, ["SERVICE", "PID", "PORT", "READY", "VERSION", "URL"])
        if not state.supervisor_alive():
            typer.echo("The supervisor is not running (stale state); run `rl-insight server stop` then start again.")
    return 0 if running else 1


# ---------------------------------------------------------------------------- targets
def _client_for(h: Home, server_url: str | None, token: str | None) -> tuple[str, dict[str, str]] | None:
    """URL and auth headers of the running server, or None when none runs (then we write the file)."""
    state = StackState.read(h)
    url = server_url or (state.ingest_url if state and state.supervisor_alive() else None)
    if not url:
        return None
    tok = token or h.running_token()
    return url.rstrip("/"), ({"Authorization": f"Bearer {tok}"} if tok else {})


def _request(method: str, url: str, headers: dict[str, str], **kw: Any) -> dict[str, Any]:
    import httpx  # here, not at the top: every CLI command (analyze too) imports this module

    try:
        r = httpx.request(method, url, headers=headers, timeout=10.0, trust_env=False, **kw)
    except httpx.HTTPError as exc:
        raise ServiceError(f"cannot reach the rl-insight server at {url}: {exc}",
                           hint="check `rl-insight server status` or pass --server-url") from None
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {"detail": r.text}
    if r.status_code == 401:
        raise UnauthorizedError(f"the server refused the token: {body.get('detail')}", hint="pass --token or set RL_INSIGHT_TOKEN")
    if r.status_code == 404:
        raise NotFoundError(str(body.get("detail")), hint=body.get("hint"))
    if r.status_code == 409:
        raise ConflictError(str(body.get("detail")), hint=body.get("hint"))
    if r.status_code >= 400:
        raise InvalidInputError(f"the server refused the request (HTTP {r.status_code}): {body.get('detail')}")
    return body


def _local_registry(h: Home) -> TargetRegistry:
    return TargetRegistry(ServerConfig(data_dir=str(h.data_dir)).targets_file)


ServerUrlOpt = typer.Option(None, "--server-url", help="Server to talk to (default: the one this home runs).")
TokenOpt = typer.Option(None, "--token", envvar=env.TOKEN, help="Bearer token (default: the running server's, else <home>/token).")


@targets_app.command("add")
def targets_add(file: Path = typer.Argument(..., help="YAML: jobs: [{job_name, targets, labels}]"),
                server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Register targets from a YAML file (upstream's format)."""
    server_url = server_url or _config_url(config)
    try:
        doc = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise InvalidInputError(f"cannot read {file}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InvalidInputError(f"{file} is not valid YAML: {exc}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not jobs:
        raise InvalidInputError(f"{file} must have a non-empty top-level 'jobs:' list")
    parsed = []
    for i, job in enumerate(jobs):  # validate everything before writing anything
        if not isinstance(job, dict) or not job.get("job_name"):
            raise InvalidInputError(f"{file}: jobs[{i}] needs a non-empty job_name")
        try:
            parsed.append((job, parse_registration(job)))
        except InvalidInputError as exc:
            raise InvalidInputError(f"{file}: jobs[{i}] ({job.get('job_name')}): {exc.message}") from None
    h = Home.resolve(home)
    client = _client_for(h, server_url, token)
    registry = None if client else _local_registry(h)
    for job, (name, items) in parsed:
        if client:
            _request("POST", client[0] + "/api/v1/prometheus/targets", client[1], json=job)
        else:
            registry.upsert(name, items)  # type: ignore[union-attr]
        typer.echo(f"Added {len(items)} target(s) to job '{name}'.")
    return 0


@targets_app.command("list")
def targets_list(job: Optional[str] = typer.Option(None, help="Only this job."), as_json: bool = typer.Option(False, "--json"),
                 server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """List registered targets."""
    server_url = server_url or _config_url(config)
    h = Home.resolve(home)
    client = _client_for(h, server_url, token)
    if client:
        items = _request("GET", client[0] + "/api/v1/targets", client[1], params={"job": job} if job else None)["targets"]
    else:
        items = [t.to_api() for t in _local_registry(h).list(job)]
    if as_json:
        typer.echo(json.dumps(items, indent=2))
    else:
        _echo_table([[t["job"], t["target"], ",".join(f"{k}={v}" for k, v in sorted(t["labels"].items()))] for t in items],
                    ["JOB", "TARGET", "LABELS"])
    return 0


@targets_app.command("remove")
def targets_remove(target: Optional[str] = typer.Option(None, help="host:port to remove."),
                   job: Optional[str] = typer.Option(None, help="Remove this job's targets (or only --target in it)."),
                   project: Optional[str] = typer.Option(None), experiment_name: Optional[str] = typer.Option(None),
                   server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Remove one target, a job, or an experiment's targets."""
    server_url = server_url or _config_url(config)
    h = Home.resolve(home)
    client = _client_for(h, server_url, token)
    params = {k: v for k, v in {"target": target, "job": job, "project": project, "experiment_name": experiment_name}.items() if v}
    if client:
        removed = _request("DELETE", client[0] + "/api/v1/targets", client[1], params=params)["removed"]
    else:
        removed = _local_registry(h).remove(**params)
    typer.echo(f"Removed {removed} target(s).")
    return 0



# ---------------------------------------------------------------------------- credentials / logs
@server_app.command("credentials")
def credentials(home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Show the Grafana admin login and the ingest token of this home."""
    _config_url(config)  # upstream's --config: validated; this command needs nothing from it
    h = Home.resolve(home)
    state = StackState.read(h)
    grafana = state.service("grafana") if state else None
    pw_file = h.root / "grafana-admin-password"
    if pw_file.exists():
        typer.echo(f"Grafana:  {grafana.url if grafana else '(not running)'}  user admin  password {pw_file.read_text().strip()}")
    else:
        typer.echo("Grafana:  no password yet (it is generated the first time `server start` runs Grafana)")
    token = h.running_token()
    typer.echo(f"Ingest token (RL_INSIGHT_TOKEN): {token}" if token else "Ingest token: none (the server runs without one)")
    return 0


SERVICES = ("prometheus", "tempo", "grafana", "ingest", "supervisor")


@server_app.command("logs")
def logs(service: Optional[str] = typer.Argument(None, help=f"One of {', '.join(SERVICES)} (default: all)."),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
         lines: int = typer.Option(50, "-n", "--lines", help="Lines to show from the end of each log."),
         home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Print the services' logs (from the running stack's state, else the home's log directory)."""
    _config_url(config)  # upstream's --config: validated; this command needs nothing from it
    h = Home.resolve(home)
    if service is not None and service not in SERVICES:
        raise InvalidInputError(f"unknown service {service!r}; choose one of {', '.join(SERVICES)}")
    state = StackState.read(h)
    files = {s.name: Path(s.log) for s in (state.services if state else ())}
    defaults = {"prometheus": "prometheus.log", "tempo": "tempo.log", "grafana": "grafana.log",
                "ingest": "rl-insight-server.log", "supervisor": "supervisor.log"}
    for name, fname in defaults.items():
        files.setdefault(name, h.logs_dir / fname)
    wanted = [service] if service else [n for n in SERVICES if files[n].exists()]
    if not wanted or (service and not files[service].exists()):
        typer.echo(f"No logs in {h.logs_dir} yet.")
        return 1
    prefix = len(wanted) > 1
    positions = {}
    for name in wanted:
        text = files[name].read_text(errors="replace").splitlines()
        for line in text[-lines:]:
            typer.echo(f"[{name}] {line}" if prefix else line)
        positions[name] = files[name].stat().st_size
    while follow:
        time.sleep(0.5)
        for name in wanted:
            size = files[name].stat().st_size if files[name].exists() else 0
            if size < positions[name]:
                positions[name] = 0  # rotated
            if size > positions[name]:
                with open(files[name], "rb") as f:
                    f.seek(positions[name])
                    chunk = f.read().decode(errors="replace")
                positions[name] = size
                for line in chunk.splitlines():
                    typer.echo(f"[{name}] {line}" if prefix else line)
    return 0


# ---------------------------------------------------------------------------- install / bundle
def _progress_factory():  # noqa: ANN202
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    progress = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        transient=True)

    def make(label: str):  # noqa: ANN202
        task = progress.add_task(label, total=None)
        progress.start()

        def update(done: int, total: int | None) -> None:
            progress.update(task, completed=done, total=total)

        return update

    return progress, make


VersionOpt = lambda name: typer.Option(None, f"--{name}-version", help=f"{name} version (default: the catalog's).")  # noqa: E731


@server_app.command("install")
def install(
    ctx: typer.Context,
    config: Optional[Path] = ConfigOpt,
    local_archive: Optional[Path] = typer.Option(None, "--local-archive",
                                                 help="A directory of release archives, or a bundle file from `server bundle`."),
    mirror: Optional[str] = typer.Option(None, "--mirror", envvar=env.DOWNLOAD_MIRROR,
                                         help="URL template with {service} {version} {os} {arch} {asset}."),
    force: bool = typer.Option(False, "--force", help="Reinstall even if the version is installed."),
    install_dir: Optional[Path] = typer.Option(None, "--install-dir", help="Default <home>/services."),
    check: bool = typer.Option(False, "--check", help="Only show what is found: service, version, source, status."),
    allow_unverified: bool = typer.Option(False, "--allow-unverified", help="Accept archives without an available checksum."),
    platform: Optional[str] = typer.Option(None, help="linux-amd64, linux-arm64, darwin-amd64, darwin-arm64 (default: this host)."),
    service: list[str] = typer.Option([], "--service", help="Only these services (repeatable)."),
    prometheus_version: Optional[str] = VersionOpt("prometheus"),
    tempo_version: Optional[str] = VersionOpt("tempo"),
    grafana_version: Optional[str] = VersionOpt("grafana"),
    home: Optional[Path] = HomeOpt,
) -> int:
    """Install Prometheus, Tempo and Grafana, verified, into <home>/services/<service>/<version>/."""
    from ..services.binaries import find_binary
    from ..services.catalog import CATALOG, current_platform
    from ..services.installer import Installer

    if config is not None:
        apply_config_file(ctx, config)
        install_dir = ctx.params["install_dir"]
    h = Home.resolve(home)
    target = Path(install_dir) if install_dir else h.install_dir
    names = service or list(CATALOG)
    for n in names:
        if n not in CATALOG:
            raise InvalidInputError(f"unknown service {n!r}; choose from {', '.join(CATALOG)}")
    if check:
        rows, ok = [], True
        for n in names:
            try:
                b = find_binary(n, target)
                rows.append([n, b.version_str, f"{b.source} ({b.path})", "ok"])
            except RLInsightError as exc:
                ok = False
                status = "unsupported" if "unsupported" in exc.message else ("too old" if "older" in exc.message else "missing")
                rows.append([n, "-", "-", f"{status}: {exc.message.split(': ', 1)[-1][:90]}"])
        _echo_table(rows, ["SERVICE", "VERSION", "SOURCE", "STATUS"])
        return 0 if ok else 1
    progress, make = _progress_factory()
    inst = Installer(target, platform=platform or current_platform(),
                     versions={"prometheus": prometheus_version, "tempo": tempo_version, "grafana": grafana_version},  # type: ignore[dict-item]
                     local_archive=local_archive, mirror=mirror, force=force, allow_unverified=allow_unverified,
                     report=lambda m: typer.echo(f"[install] {m}", err=True), progress=make)
    try:
        results = [inst.install(n) for n in names]
    finally:
        progress.stop()
    _echo_table([[r.service, r.version, r.status, r.sha256[:16] + "…", r.path] for r in results],
                ["SERVICE", "VERSION", "STATUS", "SHA256", "BINARY"])
    return 0


@server_app.command("bundle")
def bundle(
    output: Path = typer.Option(..., "--output", "-o", help="The bundle file to write (a tar)."),
    platform: list[str] = typer.Option([], "--platform", help="Repeatable; default: this host's platform."),
    mirror: Optional[str] = typer.Option(None, "--mirror", envvar=env.DOWNLOAD_MIRROR),
    local_archive: Optional[Path] = typer.Option(None, "--local-archive", help="Take archives from this directory when present."),
    allow_unverified: bool = typer.Option(False, "--allow-unverified"),
    prometheus_version: Optional[str] = VersionOpt("prometheus"),
    tempo_version: Optional[str] = VersionOpt("tempo"),
    grafana_version: Optional[str] = VersionOpt("grafana"),
    config: Optional[Path] = ConfigOpt) -> int:
    """On a machine with internet: download and verify every archive into one file for air-gapped clusters."""
    _config_url(config)  # upstream's --config: validated; versions and URLs come from our catalog
    from ..services.catalog import current_platform
    from ..services.installer import make_bundle

    progress, make = _progress_factory()
    try:
        manifest = make_bundle(output, platform or [current_platform()],
                               versions={"prometheus": prometheus_version, "tempo": tempo_version,  # type: ignore[dict-item]
                                         "grafana": grafana_version},
                               mirror=mirror, local_archive=local_archive, allow_unverified=allow_unverified,
                               report=lambda m: typer.echo(f"[bundle] {m}", err=True), progress=make)
    finally:
        progress.stop()
    _echo_table([[a["service"], a["version"], a["platform"], a["sha256"][:16] + "…"] for a in manifest["archives"]],
                ["SERVICE", "VERSION", "PLATFORM", "SHA256"])
    typer.echo(f"Wrote {output} ({output.stat().st_size / 2**20:.1f} MiB) and {output.name}.sha256. On the cluster: "
               f"rl-insight server install --local-archive {output.name}")
    return 0


# ---------------------------------------------------------------------------- experiments (upstream main)
def _experiments_client(h: Home, server_url: str | None, token: str | None) -> tuple[str, dict[str, str]]:
    """Server URL: --server-url, then RL_INSIGHT_SERVER_URL, then this home's running server, then the default port."""
    url = server_url or env.get(env.SERVER_URL) or None
    client = _client_for(h, url, token)
    if client is None:
        tok = token or h.running_token()
        return f"http://127.0.0.1:{DEFAULT_PORT}", ({"Authorization": f"Bearer {tok}"} if tok else {})
    return client


def _print_experiment(row: dict[str, Any]) -> None:
    typer.echo(f"{row['project']}/{row['experiment_name']}: {row['state']}, {row['target_count']} target(s)")
    if row.get("prometheus_converged") is not None:
        typer.echo(f"  Prometheus {'reflects the change' if row['prometheus_converged'] else 'has not caught up yet'}"
                   + (f" ({row['prometheus_message']})" if row.get("prometheus_message") else ""))


@experiments_app.command("list")
def experiments_list(project: Optional[str] = typer.Option(None, "--project", help="Only this project."),
                     server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
                     home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Experiments that registered targets, with their state and target count."""
    server_url = server_url or _config_url(config)
    url, headers = _experiments_client(Home.resolve(home), server_url, token)
    items = _request("GET", url + "/api/v1/experiments", headers, params={"project": project} if project else None)["experiments"]
    if not items:
        typer.echo("No experiments have registered targets.")
        return 0
    _echo_table([[e["project"], e["experiment_name"], e["state"], str(e["target_count"])] for e in items],
                ["PROJECT", "EXPERIMENT", "STATE", "TARGETS"])
    return 0


ProjectOpt = typer.Option(..., "--project", help="The experiment's project.")
ExperimentOpt = typer.Option(..., "--experiment-name", help="The experiment's name.")


@experiments_app.command("show")
def experiments_show(project: str = ProjectOpt, experiment_name: str = ExperimentOpt, server_url: Optional[str] = ServerUrlOpt,
                     token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """One experiment's state and targets."""
    server_url = server_url or _config_url(config)
    url, headers = _experiments_client(Home.resolve(home), server_url, token)
    row = _request("GET", url + "/api/v1/experiments/targets", headers,
                   params={"project": project, "experiment_name": experiment_name})
    _print_experiment(row)
    _echo_table([[t["job"], t["target"], ",".join(f"{k}={v}" for k, v in sorted(t["labels"].items()))] for t in row["targets"]],
                ["JOB", "TARGET", "LABELS"])
    return 0


def _config_url(config: Path | None) -> str | None:
    """The ingest server of upstream's `--config` file (`server.port` on this host), when given."""
    if config is None:
        return None
    from . import upstream_config

    port = upstream_config.load(Path(config)).values.get("port")
    return f"http://127.0.0.1:{port}" if port else None


def _flip(action: str, project: str, experiment_name: str, server_url: str | None, token: str | None, home: Path | None) -> int:
    url, headers = _experiments_client(Home.resolve(home), server_url, token)
    row = _request("POST", f"{url}/api/v1/experiments/{action}", headers,
                   json={"project": project, "experiment_name": experiment_name})
    _print_experiment(row)
    return 0


@experiments_app.command("archive")
def experiments_archive(project: str = ProjectOpt, experiment_name: str = ExperimentOpt, server_url: Optional[str] = ServerUrlOpt,
                        token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Stop scraping an experiment's targets (its data stays); registering into it is refused until restored."""
    server_url = server_url or _config_url(config)
    return _flip("archive", project, experiment_name, server_url, token, home)


@experiments_app.command("restore")
def experiments_restore(project: str = ProjectOpt, experiment_name: str = ExperimentOpt, server_url: Optional[str] = ServerUrlOpt,
                        token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Put an archived experiment's targets back into discovery."""
    server_url = server_url or _config_url(config)
    return _flip("restore", project, experiment_name, server_url, token, home)
