"""`rl-insight server experiments list | show | archive | restore` (upstream's experiment commands), on the
running server."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from .options import ConfigOpt, HomeOpt, ServerUrlOpt, TokenOpt, echo_table
from .reach import Server, require_server

experiments_app = typer.Typer(
    rich_markup_mode=None,  # help is plain text: `[service]` stays, no markup is eaten
    help="Experiments (a run's scrape targets): list, show, archive, restore.",
    no_args_is_help=True)


def print_experiment(row: dict[str, Any]) -> None:
    typer.echo(f"{row['project']}/{row['experiment_name']}: {row['state']}, {row['target_count']} target(s)")
    if row.get("prometheus_converged") is not None:
        typer.echo(f"  Prometheus {'reflects the change' if row['prometheus_converged'] else 'has not caught up yet'}"
                   + (f" ({row['prometheus_message']})" if row.get("prometheus_message") else ""))


@experiments_app.command("list")
def experiments_list(project: Optional[str] = typer.Option(None, "--project", help="Only this project."),
                     server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
                     home: Optional[Path] = HomeOpt, config: Optional[Path] = ConfigOpt) -> int:
    """Experiments that registered targets, with their state and target count."""
    server = require_server(home, server_url, token, config)
    items = server.request("GET", "/api/v1/experiments", params={"project": project} if project else None)[
        "experiments"
    ]
    if not items:
        typer.echo("No experiments have registered targets.")
        return 0
    # RUN is how the job is (live, idle, finished, lost); STATE is upstream's: whether its targets are still discovered
    # (active) or archived — a finished job's experiment stays "active" until archived, which alone misled readers
    echo_table([[e["project"], e["experiment_name"], e.get("run_status") or "–", e["state"], str(e["target_count"])]
                for e in items], ["PROJECT", "EXPERIMENT", "RUN", "STATE", "TARGETS"])
    return 0


ProjectOpt = typer.Option(..., "--project", help="The experiment's project.")
ExperimentOpt = typer.Option(..., "--experiment-name", help="The experiment's name.")


@experiments_app.command("show")
def experiments_show(
    project: str = ProjectOpt,
    experiment_name: str = ExperimentOpt,
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
    config: Optional[Path] = ConfigOpt,
) -> int:
    """One experiment's state and targets."""
    server = require_server(home, server_url, token, config)
    row = server.request("GET", "/api/v1/experiments/targets",
                         params={"project": project, "experiment_name": experiment_name})
    print_experiment(row)
    echo_table(
        [[t["job"], t["target"], ",".join(f"{k}={v}" for k, v in sorted(t["labels"].items()))] for t in row["targets"]],
        ["JOB", "TARGET", "LABELS"],
    )
    return 0


def _flip(action: str, project: str, experiment_name: str, server: Server) -> int:
    print_experiment(server.request("POST", f"/api/v1/experiments/{action}",
                                    json={"project": project, "experiment_name": experiment_name}))
    return 0


@experiments_app.command("archive")
def experiments_archive(
    project: str = ProjectOpt,
    experiment_name: str = ExperimentOpt,
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
    config: Optional[Path] = ConfigOpt,
) -> int:
    """Stop scraping an experiment's targets (its data stays); registering into it is refused until restored."""
    return _flip("archive", project, experiment_name, require_server(home, server_url, token, config))


@experiments_app.command("restore")
def experiments_restore(
    project: str = ProjectOpt,
    experiment_name: str = ExperimentOpt,
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
    config: Optional[Path] = ConfigOpt,
) -> int:
    """Put an archived experiment's targets back into discovery."""
    return _flip("restore", project, experiment_name, require_server(home, server_url, token, config))
