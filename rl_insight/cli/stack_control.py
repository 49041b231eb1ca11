"""The running stack, after `server start`: stop it, its status, the credentials it made, its logs (followed or
tailed). Nothing here starts a service; what it reads is the stack's state file (services/state.py)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import InvalidInputError
from ..services.home import Home
from ..services.state import StackState
from .options import ConfigOpt, HomeOpt, config_url, echo_table


def follow_logs(logs: list[tuple[str, Path, int]], stop: Any) -> None:
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


def print_training_side(state: StackState, token: str) -> None:
    typer.echo("\nTraining side (verl: also add rl_insight to trainer.logger):")
    typer.echo(f"  export RL_INSIGHT_SERVER_URL={state.public_url}")
    if token:
        typer.echo(f"  export RL_INSIGHT_TOKEN={token}")
    typer.echo(
        "  OTLP traces (verl's trace.backend=mlflow, vLLM, any SDK): "
        f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={state.public_url}/v1/traces"
        " (docs/otlp.md)"
    )


def stop(timeout: float = typer.Option(15.0, help="Seconds to wait before killing."), home: Optional[Path] = HomeOpt,
         config: Optional[Path] = ConfigOpt) -> int:
    """Stop what `server start` started (and nothing else). `--config` is accepted as upstream's; stop needs nothing
    from it."""
    if config is not None:
        from . import upstream_config

        upstream_config.load(Path(config))  # a broken file is still reported
    from ..services import process

    h = Home.resolve(home)
    state = StackState.read(h)
    if not state:
        typer.echo("No running rl-insight server was found.")
        return 0
    sup = state.supervisor
    if sup.alive() and sup.pid is not None:
        result = process.terminate(sup.pid, sup.marker, timeout)
        typer.echo(f"supervisor (pid {sup.pid}): {result}")
    for svc in reversed(state.services):
        if svc.alive() and svc.pid is not None:
            typer.echo(f"{svc.name} (pid {svc.pid}): {process.terminate(svc.pid, svc.marker, timeout)}")
    try:
        h.state_file.unlink()
    except FileNotFoundError:
        pass
    typer.echo("rl-insight server stopped.")
    return 0


def status(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    home: Optional[Path] = HomeOpt,
    config: Optional[Path] = ConfigOpt,
) -> int:
    """Show each service (pid, port, ready, version); exit 1 when the stack is not running."""
    config_url(config)  # upstream's --config: validated; this command needs nothing from it
    h = Home.resolve(home)
    state = StackState.read(h)
    if not state:
        if as_json:
            typer.echo(json.dumps({"running": False, "services": []}))
        else:
            typer.echo("rl-insight server is not running.")
        return 1
    return print_status(h, state, as_json)


def print_status(h: Home, state: StackState, as_json: bool = False) -> int:
    from ..services.supervisor import service_status

    services = [service_status(s) for s in state.services]
    running = state.supervisor_alive() and all(s["alive"] and s["ready"] for s in services)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "running": running,
                    "supervisor": asdict(state.supervisor),
                    "services": services,
                    "missing": [asdict(m) for m in state.missing],
                    "public_url": state.public_url,
                    "notifications": state.service("alertmanager") is not None,
                },
                indent=2,
            )
        )
    else:
        rows = [[s["name"], str(s["pid"]) if s["alive"] else "-", str(s["port"]), "yes" if s["ready"] else "no",
                 s["version"], s["url"]] for s in services]
        rows += [[m.name, "-", "-", "missing", "-", m.hint or ""] for m in state.missing]
        echo_table(rows, ["SERVICE", "PID", "PORT", "READY", "VERSION", "URL"])
        if state.service("alertmanager") is None:
            from ..server.rooms.alerting.notifications import OFF_HINT

            typer.echo("Notifications " + OFF_HINT)
        if not state.supervisor_alive():
            typer.echo("The supervisor is not running (stale state); run `rl-insight server stop` then start again.")
    return 0 if running else 1


def credentials(home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Show the Grafana admin login and the ingest token of this home."""
    config_url(config)  # upstream's --config: validated; this command needs nothing from it
    h = Home.resolve(home)
    state = StackState.read(h)
    grafana = state.service("grafana") if state else None
    pw_file = h.root / "grafana-admin-password"
    if pw_file.exists():
        typer.echo(f"Grafana:  {grafana.url if grafana else '(not running)'}  user admin  password "
                   f"{pw_file.read_text().strip()}")
    else:
        typer.echo("Grafana:  no password yet (it is generated the first time `server start` runs Grafana)")
    token = h.running_token()
    typer.echo(f"Ingest token (RL_INSIGHT_TOKEN): {token}" if token else "Ingest token: none (the server runs "
                                                                         "without one)")
    return 0


SERVICES = ("prometheus", "tempo", "grafana", "ingest", "supervisor")


def logs(service: Optional[str] = typer.Argument(None, help=f"One of {', '.join(SERVICES)} (default: all)."),
         follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
         lines: int = typer.Option(50, "-n", "--lines", help="Lines to show from the end of each log."),
         home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Print the services' logs (from the running stack's state, else the home's log directory)."""
    config_url(config)  # upstream's --config: validated; this command needs nothing from it
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
            for line in _new_lines(files[name], positions, name):
                typer.echo(f"[{name}] {line}" if prefix else line)
    return 0


def _new_lines(path: Path, positions: dict[str, int], name: str) -> list[str]:
    """The lines `path` gained since `positions[name]` (from its start again when it was rotated)."""
    size = path.stat().st_size if path.exists() else 0
    if size < positions[name]:
        positions[name] = 0  # rotated
    if size <= positions[name]:
        return []
    with open(path, "rb") as f:
        f.seek(positions[name])
        chunk = f.read().decode(errors="replace")
    positions[name] = size
    return chunk.splitlines()
