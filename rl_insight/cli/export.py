"""`rl-insight export RUN --to tensorboard|wandb|parquet|csv`: a run already in the store, history included."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import typer

from .. import env
from ..errors import InvalidInputError, NotFoundError

TARGETS = ("tensorboard", "wandb", "parquet", "csv")


def _find_run(conn: Any, spec: str) -> Mapping[str, Any]:
    from ..server.runstore import queries as q

    if spec.isdigit():
        return q.get_run(conn, int(spec))
    project, sep, experiment = spec.partition("/")
    if not sep:
        raise InvalidInputError(f"RUN must be a run id or project/experiment_name, got {spec!r}",
                                hint="`rl-insight export --list` shows the runs")
    for run in q.list_runs(conn):
        if run["project"] == project and run["experiment_name"] == experiment:
            return run
    raise NotFoundError(f"no run {spec!r} in the store", hint="`rl-insight export --list` shows the runs")


def export(
    run: Optional[str] = typer.Argument(None, help="Run id, or project/experiment_name."),
    to: str = typer.Option("tensorboard", "--to", help=f"One of {', '.join(TARGETS)}."),
    output: Optional[Path] = typer.Option(
        None,
        "--output",
        "-o",
        help="TensorBoard log root, W&B dir, or the .parquet/.csv file (default: ./rl-insight-export).",
    ),
    wandb_project: Optional[str] = typer.Option(
        None, "--wandb-project", help="W&B project (default: the run's project)."
    ),
    wandb_entity: Optional[str] = typer.Option(None, "--wandb-entity", help="W&B entity."),
    store: Optional[str] = typer.Option(None, "--store", envvar=env.STORE_URL, metavar="FILE|URL",
                                        help="Run store: a file, sqlite:///FILE or postgresql://user@host:port/db "
                                             "(default <home>/data/runstore.sqlite)."),
    list_runs: bool = typer.Option(False, "--list", help="List the runs in the store and exit."),
    home: Optional[Path] = typer.Option(None, "--home", envvar=env.HOME),
) -> int:
    """Export a run from the run store: trainer scalars at their step and rl-insight's insight metrics."""
    from ..server.runstore import queries as q
    from ..server.runstore.backend import open_backend
    from ..server.runstore.backend.location import existing_store
    from ..services.home import Home

    if to not in TARGETS:
        raise typer.BadParameter(f"must be one of {', '.join(TARGETS)}", param_hint="--to")
    data_dir = Home.resolve(home).data_dir
    try:
        where = existing_store(store, data_dir)
    except FileNotFoundError as missing:
        raise NotFoundError(f"no run store at {missing}", hint="pass --store FILE or URL, or --home of the server "
                                                               "that collected the run") from None
    conn = open_backend(where).connect(readonly=True)
    if list_runs or run is None:
        for r in q.list_runs(conn):
            typer.echo(f"{r['id']:>5}  {r['project']}/{r['experiment_name']}  last step {r['last_step']}  "
                       f"{r['status']}")
        return 0
    info = _find_run(conn, run)
    out = output or Path("rl-insight-export")
    if to in ("tensorboard", "wandb"):
        n = _export_scalars(conn, info, to, out, wandb_project, wandb_entity)
        typer.echo(f"exported {n} scalar points of {info['project']}/{info['experiment_name']} to {to}: {out}")
    elif to == "csv":
        target = out if out.suffix == ".csv" else out / f"run-{info['id']}.csv"
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", newline="") as f:
            for chunk in q.csv_export(conn, info["id"], extra=_insight_rows(conn, info)):
                f.write(chunk)
        typer.echo(f"wrote {target}")
    else:
        try:
            import pandas as pd
        except ImportError:
            raise InvalidInputError("parquet export needs pandas and pyarrow", hint='pip install '
                                                                                    '"rl-insight[analysis]"') from None
        import io

        target = out if out.suffix == ".parquet" else out / f"run-{info['id']}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        frame = pd.read_csv(io.StringIO("".join(q.csv_export(conn, info["id"], extra=_insight_rows(conn, info)))))
        frame.to_parquet(target, index=False)
        typer.echo(f"wrote {target} ({len(frame)} rows)")
    return 0


def _insight_rows(conn: Any, run: Mapping[str, Any]) -> list[tuple[str, str, int, float, float]]:
    from ..server.config import ServerConfig
    from ..server.rooms.exports.run_points import insight_rows

    cfg = ServerConfig()
    return insight_rows(conn, run, cfg.step_metric, cfg.version_metric)


def _export_scalars(conn: Any, run: Mapping[str, Any], to: str, out: Path, wandb_project: str | None,
                    wandb_entity: str | None) -> int:
    from ..export import run_dir_name
    from ..export.points import config_text
    from ..server.config import ServerConfig
    from ..server.rooms.exports.run_points import run_insight_points, store_points

    cfg = ServerConfig()
    insights = run_insight_points(conn, run, cfg.step_metric, cfg.version_metric)
    if to == "tensorboard":
        from ..export.tensorboard_writer import TensorBoardRun

        w: Any = TensorBoardRun(out / run_dir_name(run["project"], run["experiment_name"]))
        w.text("rl_insight/run", config_text(run))
    else:
        from ..export.wandb_writer import WandbRun

        w = WandbRun(
            run["project"], run["experiment_name"], wandb_project=wandb_project, entity=wandb_entity, directory=out
        )
    try:
        # one step at a time, trainer scalars and insights together (W&B logs each step once, in order)
        by_step: dict[int, list] = {}
        for p in insights:
            by_step.setdefault(p.step, []).append(p)
        n = 0
        pending_step = None
        batch: list = []
        for p in store_points(conn, run["id"]):
            if pending_step is not None and p.step != pending_step:
                n += w.scalars(batch + by_step.pop(pending_step, []))
                batch = []
            pending_step = p.step
            batch.append(p)
        if pending_step is not None:
            n += w.scalars(batch + by_step.pop(pending_step, []))
        for step in sorted(by_step):
            n += w.scalars(by_step[step])
    finally:
        w.close()
    return n
