"""`rl-insight analyze PATH…`: profiler traces and verl logs -> timelines, tables and a summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, cast

import typer

from ..errors import InvalidInputError, MissingExtraError
from .options import int_ranges

FORMATS = ("html", "png", "perfetto", "csv", "parquet", "summary", "tensorboard")
ANALYSIS_MODULES = ("numpy", "pandas", "msgspec", "matplotlib")  # the `analysis` extra


def _import_renderers(png_too: bool) -> tuple[Any, Any, Any, Any]:
    """The analysis and rendering modules (pandas, and matplotlib for PNG): called once beside the file
    reading (load's `warm`), then again for the names, which is free by then."""
    from ..analysis.analyze import summarize
    from ..analysis.render import export, html, png

    if png_too:
        png.backend()
    return summarize, export, html, png


def _ints(text: Optional[str], what: str) -> set[int] | None:
    return set(int_ranges(text, f"--{what}")) if text else None


def analyze(
    paths: list[Path] = typer.Argument(..., help="Trace files or directories (searched recursively)."),
    source: str = typer.Option("auto", help="auto, torch, nsys, mstx or verl-log."),
    out: Path = typer.Option(Path("rl-insight-analysis"), "--out", help="Output directory."),
    format: str = typer.Option(
        "html,png,perfetto,csv,summary", "--format", help=f"Comma list of {', '.join(FORMATS)}."
    ),
    ranks: Optional[str] = typer.Option(None, help="Only these ranks, e.g. 0,1,4-7."),
    roles: Optional[str] = typer.Option(None, help="Only these roles (comma list)."),
    steps: Optional[str] = typer.Option(None, help="Only these steps, e.g. 3-5."),
    detail: str = typer.Option(
        "annotations", help="Event kinds to keep: annotations (verl stages), ops, kernels (comma list)."
    ),
    workers: Optional[int] = typer.Option(
        None, min=1, help="Processes reading files in parallel (default: all cores when there are several files)."
    ),
    compare: Optional[list[Path]] = typer.Option(
        None, "--compare", help="Traces of a second run (files or directories; repeat the option for several): the "
        "report says where its time went against the first, step by step (docs/explain.md)."),
    ray: Optional[str] = typer.Option(
        None,
        "--ray",
        help="Read the files as tasks on a Ray cluster: its address, or "
        "'auto' for the one this machine belongs to (files on a shared path).",
    ),
) -> int:
    """Analyse torch.profiler, Nsight Systems and Ascend traces and verl logs: one event table, RL analyses,
    HTML / PNG / Perfetto timelines."""
    import importlib.util

    missing = [m for m in ANALYSIS_MODULES if importlib.util.find_spec(m) is None]
    if missing:  # said before any file is read
        raise MissingExtraError(f"the analysis dependencies are not installed ({', '.join(missing)})",
                                hint='pip install "rl-insight[analysis]"')
    from ..analysis.load import Source, load
    formats, details = _checked(source, format, detail)

    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("reading", total=None)
        loaded = load(
            paths,
            source=cast(Source, source),  # checked against the sources above
            detail=details,
            ranks=_ints(ranks, "ranks"),
            roles={r.strip() for r in roles.split(",")} if roles else None,
            steps=_ints(steps, "steps"),
            workers=workers,
            ray_address=ray,
            warm=lambda: _import_renderers("png" in formats),
            progress=lambda i, n, p: progress.update(task, total=n, completed=i, description=f"reading {p.name}"),
        )
    summarize, export, html, png = _import_renderers("png" in formats)  # already imported beside the reading
    rep = loaded.report
    _say_problems(rep)
    df = loaded.events
    if df.empty and loaded.metrics.empty and loaded.memory.empty:
        raise _nothing_to_analyse(loaded, paths, {"roles": roles, "ranks": ranks, "steps": steps})
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    title = f"RL timeline: {', '.join(p.name for p in paths)}"
    result = summarize(df, loaded.metrics, loaded.memory) if {"html", "summary", "tensorboard"} & set(formats) else None
    if result is not None and not df.empty:
        from ..analysis import explain

        facts = explain.step_facts(df)
        result["critical_path"] = explain.critical_paths(facts)
        if compare:
            other = load(compare, source=cast(Source, source), detail=details, ranks=_ints(ranks, "ranks"),
                         roles={r.strip() for r in roles.split(",")} if roles else None, steps=_ints(steps, "steps"),
                         workers=workers, ray_address=ray)
            result["compare"] = _compared(explain, facts, other, paths, compare)
            typer.echo(result["compare"]["sentence"])
    if not df.empty:
        written += _timelines(df, formats, out, title, result, (export, html, png))
    written += _tables_and_summary(loaded, formats, out, result, export)
    if result is not None:
        _say_ledger(result["ledger"])
    typer.echo(
        f"Analysed {len(rep.parsed)} file(s): {len(df):,} events on {df['lane'].nunique() if not df.empty else 0} lanes"
        + (f", {len(loaded.metrics)} logged steps" if not loaded.metrics.empty else "")
        + "."
    )
    if rep.errors:
        typer.echo(f"{len(rep.errors)} file(s) could not be read (see above); the others were analysed.")
    typer.echo("Wrote:")
    for p in written:
        typer.echo(f"  {p}")
    return 0


def _checked(source: str, format: str, detail: str) -> tuple[list[str], tuple[str, ...]]:
    """The formats and details asked for, each one known (the source too)."""
    if source not in ("auto", "torch", "nsys", "mstx", "verl-log"):
        raise typer.BadParameter("must be auto, torch, nsys, mstx or verl-log", param_hint="--source")
    formats = [f.strip() for f in format.split(",") if f.strip()]
    for f in formats:
        if f not in FORMATS:
            raise typer.BadParameter(f"unknown format {f!r}; choose from {', '.join(FORMATS)}", param_hint="--format")
    details = tuple(d.strip() for d in detail.split(",") if d.strip())
    for d in details:
        if d not in ("annotations", "ops", "kernels"):
            raise typer.BadParameter(f"unknown detail {d!r}", param_hint="--detail")
    return formats, details


def _nothing_to_analyse(loaded: Any, paths: list[Path], selection: dict[str, Optional[str]]) -> InvalidInputError:
    """Why nothing came out: a selection that matches nothing the inputs hold, or inputs with nothing to read."""
    if loaded.found.events and any(selection.values()):
        return InvalidInputError(
            "no events match the selection " + " ".join(f"--{k} {v}" for k, v in selection.items() if v),
            hint=f"the inputs hold {loaded.found.describe()} (roles match in either spelling, actor-rollout-ref or "
                 "actor_rollout_ref)")
    rep = loaded.report
    said = " (see the warnings and errors above)" if rep.warnings or rep.errors else ""
    return InvalidInputError(f"nothing to analyse in {', '.join(map(str, paths))}{said}",
                             hint="point at torch .json(.gz) traces, nsys .sqlite/.jsonl exports, Ascend *_ascend_pt "
                                  "directories or verl logs")


def _compared(explain: Any, facts: Any, other: Any, paths: list[Path], compare: list[Path]) -> dict[str, Any]:
    """Where the second run's time went against the first's (`--compare`)."""
    if other.events.empty:
        raise InvalidInputError(f"nothing to compare in {', '.join(map(str, compare))}",
                                hint="--compare takes the second run's traces, like the first argument")
    names = (", ".join(p.name for p in paths), ", ".join(p.name for p in compare))
    return dict(explain.compare(facts, explain.step_facts(other.events), names))


def _timelines(df: Any, formats: list[str], out: Path, title: str, result: Any, renderers: tuple) -> list[Path]:
    """The event table's outputs: the HTML report (timeline and every table, rows linked to the timeline), the PNG,
    the Perfetto trace, the table itself."""
    export, html, png = renderers
    written: list[Path] = []
    if "html" in formats:
        written.append(html.render(df, out / "timeline.html", title, result=result))
    if "png" in formats:
        written.append(png.render(df, out / "timeline.png", title))
    if "perfetto" in formats:
        written.append(export.perfetto(df, out / "trace.perfetto.json", title))
    for f in ("csv", "parquet"):
        if f in formats:
            written.append(export.table(df, out / f"events.{f}"))
    return written


def _say_ledger(led: dict[str, Any]) -> None:
    """The goodput ledger (docs/ledger.md), as the run page says it, when there is one."""
    if not (led["steps"] or led["run"]["tokens"]["trained"] is not None):
        return
    if led["steps"]:
        typer.echo(f"Ledger: {len(led['steps'])} steps, {led['run']['total']:.1f} device-seconds "
                   f"({led['devices_note']}). {led['sentence']}")
    typer.echo(led["tokens_sentence"])


def _tables_and_summary(loaded: Any, formats: list[str], out: Path, result: Any, export: Any) -> list[Path]:
    """The verl log's metrics, the memory samples, the summary and the TensorBoard scalars, as asked."""
    written: list[Path] = []
    if not loaded.metrics.empty and ("csv" in formats or "summary" in formats):
        written.append(export.table(loaded.metrics.reset_index(), out / "verl_log_metrics.csv"))
    if not loaded.memory.empty and ("csv" in formats or "parquet" in formats):
        written.append(export.table(loaded.memory, out / ("memory.parquet" if "parquet" in formats else "memory.csv")))
    if result is not None and "summary" in formats:
        rep = loaded.report
        written.extend(export.summary(result, out, rep.parsed, rep.warnings + rep.errors))
    if result is not None and "tensorboard" in formats:
        written.append(_tensorboard(result, loaded.metrics, out / "tensorboard"))
    return written


def _say_problems(rep: Any) -> None:
    for w in rep.warnings:
        typer.secho(f"warning: {w}", fg="yellow", err=True)
    for e in rep.errors:
        typer.secho(f"error: {e}", fg="red", err=True)


def _tensorboard(result: dict, metrics: Any, root: Path) -> Path:
    """The per-step analysis (state breakdown, long tail, overlap) and the verl log's metrics as TensorBoard scalars."""
    import math
    import time

    from ..export import Point
    from ..export.points import insight_points
    from ..export.tensorboard_writer import TensorBoardRun

    w = TensorBoardRun(root / "offline")
    now = time.time()
    n = w.scalars(insight_points({"steps": result.get("steps") or [], "long_tail": result.get("long_tail") or [],
                                  "overlap": result.get("overlap") or {}}, now))
    if metrics is not None and not metrics.empty:
        points = []
        for step, row in metrics.iterrows():
            for key, value in row.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    points.append(Point(str(key), int(step), now, float(value)))
        n += w.scalars(points)
    w.close()
    return root
