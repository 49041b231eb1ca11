"""`rl-insight server targets add | list | remove`: Prometheus scrape targets, through the running server when
there is one (it validates and writes them), else straight into this home's file that the server reads at start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..errors import InvalidInputError
from ..protocol import ROUTE_TARGETS
from ..server.config import ServerConfig
from ..services.home import Home
from .options import ConfigOpt, HomeOpt, ServerUrlOpt, TokenOpt, echo_table
from .reach import find_server

if TYPE_CHECKING:
    from ..server.prometheus.targets import TargetRegistry

targets_app = typer.Typer(
    rich_markup_mode=None,  # help is plain text: `[service]` stays, no markup is eaten
    help="Register, list and remove Prometheus scrape targets.", no_args_is_help=True)


def local_registry(home: Path | None) -> TargetRegistry:
    from ..server.prometheus.targets import TargetRegistry

    return TargetRegistry(ServerConfig(data_dir=str(Home.resolve(home).data_dir)).targets_file)


@targets_app.command("add")
def targets_add(
    file: Path = typer.Argument(..., help="YAML: jobs: [{job_name, targets, labels}]"),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
    config: Optional[Path] = ConfigOpt,
) -> int:
    """Register targets from a YAML file (upstream's format)."""
    import yaml

    from ..server.prometheus.targets import parse_registration

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
    server = find_server(home, server_url, token, config)
    registry = None if server else local_registry(home)
    for job, (name, items) in parsed:
        if server is not None:
            server.request("POST", ROUTE_TARGETS, json=job)
        elif registry is not None:
            registry.upsert(name, items)
        typer.echo(f"Added {len(items)} target(s) to job '{name}'.")
    return 0


@targets_app.command("list")
def targets_list(
    job: Optional[str] = typer.Option(None, help="Only this job."),
    as_json: bool = typer.Option(False, "--json"),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
    config: Optional[Path] = ConfigOpt,
) -> int:
    """List registered targets."""
    server = find_server(home, server_url, token, config)
    if server is not None:
        items = server.request("GET", "/api/v1/targets", params={"job": job} if job else None)["targets"]
    else:
        items = [t.to_api() for t in local_registry(home).list(job)]
    if as_json:
        typer.echo(json.dumps(items, indent=2))
    else:
        echo_table(
            [[t["job"], t["target"], ",".join(f"{k}={v}" for k, v in sorted(t["labels"].items()))] for t in items],
            ["JOB", "TARGET", "LABELS"],
        )
    return 0


@targets_app.command("remove")
def targets_remove(
    target: Optional[str] = typer.Option(None, help="host:port to remove."),
    job: Optional[str] = typer.Option(None, help="Remove this job's targets (or only --target in it)."),
    project: Optional[str] = typer.Option(None),
    experiment_name: Optional[str] = typer.Option(None),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
    config: Optional[Path] = ConfigOpt,
) -> int:
    """Remove one target, a job, or an experiment's targets."""
    server = find_server(home, server_url, token, config)
    params = {
        k: v
        for k, v in {"target": target, "job": job, "project": project, "experiment_name": experiment_name}.items()
        if v
    }
    if server is not None:
        removed = server.request("DELETE", "/api/v1/targets", params=params)["removed"]
    else:
        removed = local_registry(home).remove(**params)
    typer.echo(f"Removed {removed} target(s).")
    return 0
