"""`rl-insight server start | stop | status | targets …`."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Optional

import httpx
import typer
import yaml

from ..errors import InvalidInputError, ServiceError, UnauthorizedError
from ..server.targets import TargetRegistry, parse_registration
from ..server.config import ServerConfig
from ..services import process
from ..services.home import Home
from ..services.supervisor import (StackSettings, Supervisor, read_state, service_status, supervisor_alive)

server_app = typer.Typer(help="Run the ingest server with Prometheus, and manage scrape targets.", no_args_is_help=True)
targets_app = typer.Typer(help="Register, list and remove Prometheus scrape targets.", no_args_is_help=True)
server_app.add_typer(targets_app, name="targets")

HomeOpt = typer.Option(None, "--home", envvar="RL_INSIGHT_HOME", help="State directory (default ~/.rl-insight).")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _echo_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, *rows]:
        typer.echo("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


# ---------------------------------------------------------------------------- start
@server_app.command("start")
def start(
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background and return once ready."),
    host: str = typer.Option("0.0.0.0", help="Ingest server bind address."),
    port: int = typer.Option(18080, help="Ingest server port."),
    log_dir: Optional[Path] = typer.Option(None, "--log-dir", help="Directory for service logs (default <home>/logs)."),
    prometheus_bin: Optional[str] = typer.Option(None, "--prometheus-bin", help="Prometheus binary to use."),
    prometheus_host: str = typer.Option("127.0.0.1", help="Prometheus bind address (loopback by default)."),
    prometheus_port: int = typer.Option(9090, help="Prometheus port."),
    no_prometheus: bool = typer.Option(False, "--no-prometheus", help="Run only the ingest server."),
    scrape_interval: str = typer.Option("10s", help="Prometheus scrape interval."),
    retention: str = typer.Option("30d", help="Prometheus TSDB retention time."),
    store_retention_days: float = typer.Option(30.0, min=0.01, help="Run store: delete runs not seen for this many days."),
    store_max_gb: float = typer.Option(20.0, min=0.01, help="Run store: delete the oldest runs while the file is larger."),
    auto_port: bool = typer.Option(False, "--auto-port", help="Pick free ports when the configured ones are busy."),
    token: Optional[str] = typer.Option(None, "--token", envvar="RL_INSIGHT_TOKEN",
                                        help="Bearer token for state-changing routes (default: generated when not on loopback)."),
    no_token: bool = typer.Option(False, "--no-token", help="Accept writes without a token even on a network address."),
    ready_timeout: float = typer.Option(60.0, help="Seconds to wait for each service to become ready."),
    home: Optional[Path] = HomeOpt,
) -> int:
    """Start the ingest server (and Prometheus when available) and supervise them."""
    h = Home.resolve(home)
    h.ensure()
    state = read_state(h)
    if state and supervisor_alive(state):
        typer.echo(f"rl-insight server is already running (supervisor pid {state['supervisor']['pid']}).")
        return _print_status(h, state)

    if no_token:
        tok = ""
        if host not in LOOPBACK:
            typer.secho(f"warning: --no-token: anyone who can reach {host}:{port} can write metrics and scrape targets",
                        err=True, fg="yellow")
    elif token:
        tok = token
    else:
        tok = "" if host in LOOPBACK else h.ensure_token()

    if detach:
        args = ["server", "start", "--home", str(h.root), "--host", host, "--port", str(port),
                "--prometheus-host", prometheus_host, "--prometheus-port", str(prometheus_port),
                "--scrape-interval", scrape_interval, "--retention", retention, "--ready-timeout", str(ready_timeout),
                "--store-retention-days", str(store_retention_days), "--store-max-gb", str(store_max_gb)]
        args += ["--log-dir", str(log_dir)] if log_dir else []
        args += ["--prometheus-bin", prometheus_bin] if prometheus_bin else []
        args += ["--no-prometheus"] if no_prometheus else []
        args += ["--auto-port"] if auto_port else []
        args += ["--no-token"] if no_token else []
        env = {k: v for k, v in os.environ.items() if k != "RL_INSIGHT_TOKEN"}
        if tok:
            env["RL_INSIGHT_TOKEN"] = tok  # through the environment: argv is visible to every user in `ps`
        return _start_detached(h, args, ready_timeout, env, tok)

    settings = StackSettings(home=h, host=host, port=port, token=tok, log_dir=log_dir, prometheus=not no_prometheus,
                             prometheus_bin=prometheus_bin, prometheus_host=prometheus_host, prometheus_port=prometheus_port,
                             scrape_interval=scrape_interval, retention=retention, auto_port=auto_port,
                             ready_timeout_s=ready_timeout, store_retention_days=store_retention_days,
                             store_max_bytes=int(store_max_gb * 2**30))
    sup = Supervisor(settings, report=lambda msg: typer.echo(f"[rl-insight] {msg}", err=True))
    sup.plan()
    stop_now = lambda *_: sup.request_stop()  # noqa: E731
    signal.signal(signal.SIGTERM, stop_now)
    signal.signal(signal.SIGINT, stop_now)
    sup.start()
    _print_started(h, read_state(h) or {}, tok)
    typer.echo("Press Ctrl+C to stop.")
    return sup.watch()


def _start_detached(h: Home, args: list[str], ready_timeout: float, env: dict[str, str], tok: str) -> int:
    """Re-run `server start` without --detach as a background supervisor, then wait until it is ready."""
    log = h.logs_dir / "supervisor.log"
    proc = process.spawn([sys.executable, "-m", "rl_insight", *args], log, env=env)
    deadline = time.monotonic() + ready_timeout * 2 + 10
    while time.monotonic() < deadline:
        state = read_state(h)
        if state and state.get("ready") and (state.get("supervisor") or {}).get("pid") == proc.pid:
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


def _print_started(h: Home, state: dict[str, Any], token: str) -> None:
    typer.echo(f"rl-insight server is ready (home {h.root}).")
    rows = [[s["name"], str(s["pid"]), s["url"], s["version"], s["log"]] for s in state.get("services", [])]
    _echo_table(rows, ["SERVICE", "PID", "URL", "VERSION", "LOG"])
    for m in state.get("missing", []):
        typer.secho(f"{m['name']} is not running: {m['reason']}", fg="yellow")
        if m.get("hint"):
            typer.echo(f"  to get it: {m['hint']}")
    typer.echo("\nTraining side (verl: also add rl_insight to trainer.logger):")
    typer.echo(f"  export RL_INSIGHT_SERVER_URL={state.get('public_url', '')}")
    if token:
        typer.echo(f"  export RL_INSIGHT_TOKEN={token}")


# ---------------------------------------------------------------------------- stop / status
@server_app.command("stop")
def stop(timeout: float = typer.Option(15.0, help="Seconds to wait before killing."), home: Optional[Path] = HomeOpt) -> int:
    """Stop what `server start` started (and nothing else)."""
    h = Home.resolve(home)
    state = read_state(h)
    if not state:
        typer.echo("No running rl-insight server was found.")
        return 0
    sup = state.get("supervisor") or {}
    if supervisor_alive(state):
        result = process.terminate(sup["pid"], sup["marker"], timeout)
        typer.echo(f"supervisor (pid {sup['pid']}): {result}")
    for svc in reversed(state.get("services", [])):
        if process.is_ours(svc.get("pid"), svc.get("marker") or "\0never"):
            typer.echo(f"{svc['name']} (pid {svc['pid']}): {process.terminate(svc['pid'], svc['marker'], timeout)}")
    try:
        h.state_file.unlink()
    except FileNotFoundError:
        pass
    typer.echo("rl-insight server stopped.")
    return 0


@server_app.command("status")
def status(as_json: bool = typer.Option(False, "--json", help="Machine-readable output."), home: Optional[Path] = HomeOpt) -> int:
    """Show each service (pid, port, ready, version); exit 1 when the stack is not running."""
    h = Home.resolve(home)
    state = read_state(h)
    if not state:
        if as_json:
            typer.echo(json.dumps({"running": False, "services": []}))
        else:
            typer.echo("rl-insight server is not running.")
        return 1
    return _print_status(h, state, as_json)


def _print_status(h: Home, state: dict[str, Any], as_json: bool = False) -> int:
    services = [service_status(s) for s in state.get("services", [])]
    running = supervisor_alive(state) and all(s["alive"] and s["ready"] for s in services)
    if as_json:
        typer.echo(json.dumps({"running": running, "supervisor": state.get("supervisor"), "services": services,
                               "missing": state.get("missing", []), "public_url": state.get("public_url")}, indent=2))
    else:
        rows = [[s["name"], str(s["pid"]) if s["alive"] else "-", str(s["port"]), "yes" if s["ready"] else "no",
                 s["version"], s["url"]] for s in services]
        rows += [[m["name"], "-", "-", "missing", "-", m.get("hint") or ""] for m in state.get("missing", [])]
        _echo_table(rows, ["SERVICE", "PID", "PORT", "READY", "VERSION", "URL"])
        if not supervisor_alive(state):
            typer.echo("The supervisor is not running (stale state); run `rl-insight server stop` then start again.")
    return 0 if running else 1


# ---------------------------------------------------------------------------- targets
def _client_for(h: Home, server_url: str | None, token: str | None) -> tuple[str, dict[str, str]] | None:
    """URL and auth headers of the running server, or None when none runs (then we write the file)."""
    state = read_state(h)
    url = server_url or (state.get("ingest_url") if state and supervisor_alive(state) else None)
    if not url:
        return None
    tok = token or h.read_token()
    return url.rstrip("/"), ({"Authorization": f"Bearer {tok}"} if tok else {})


def _request(method: str, url: str, headers: dict[str, str], **kw: Any) -> dict[str, Any]:
    try:
        r = httpx.request(method, url, headers=headers, timeout=10.0, trust_env=False, **kw)
    except httpx.HTTPError as exc:
        raise ServiceError(f"cannot reach the rl-insight server at {url}: {exc}",
                           hint="check `rl-insight server status` or pass --server-url") from None
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {"detail": r.text}
    if r.status_code == 401:
        raise UnauthorizedError(f"the server refused the token: {body.get('detail')}", hint="pass --token or set RL_INSIGHT_TOKEN")
    if r.status_code >= 400:
        raise InvalidInputError(f"the server refused the request (HTTP {r.status_code}): {body.get('detail')}")
    return body


def _local_registry(h: Home) -> TargetRegistry:
    return TargetRegistry(ServerConfig(data_dir=str(h.data_dir)).targets_file)


ServerUrlOpt = typer.Option(None, "--server-url", help="Server to talk to (default: the one this home runs).")
TokenOpt = typer.Option(None, "--token", envvar="RL_INSIGHT_TOKEN", help="Bearer token (default: <home>/token).")


@targets_app.command("add")
def targets_add(file: Path = typer.Argument(..., help="YAML: jobs: [{job_name, targets, labels}]"),
                server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Register targets from a YAML file (upstream's format)."""
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
                 server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """List registered targets."""
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
                   server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Remove one target, a job, or an experiment's targets."""
    h = Home.resolve(home)
    client = _client_for(h, server_url, token)
    params = {k: v for k, v in {"target": target, "job": job, "project": project, "experiment_name": experiment_name}.items() if v}
    if client:
        removed = _request("DELETE", client[0] + "/api/v1/targets", client[1], params=params)["removed"]
    else:
        removed = _local_registry(h).remove(**params)
    typer.echo(f"Removed {removed} target(s).")
    return 0

