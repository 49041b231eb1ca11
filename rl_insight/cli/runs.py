"""`rl-insight runs list | diff | explain`: the runs a server holds; why is run B slower than run A, and why is this
step as long as it is — from the running server's stored per-step data (server/runstore/steps/explain.py).

    rl-insight runs list --project demo --status live    the runs, filtered, with a summary metric and config

    rl-insight runs diff demo/base demo/slow            the sentence, the stages, the lanes, the biggest fix
    rl-insight runs diff 3 3 --a-steps 1-50 --b-steps 51-100      two windows of one run
    rl-insight runs explain demo/slow --step 12         one step's critical path, slacks and what-if savings
    rl-insight runs explain demo/slow                   over the run: median savings per step, the biggest fix
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from .call_stacks import resolve_run
from .options import HomeOpt, ServerUrlOpt, TokenOpt, echo_table
from .reach import require_server

runs_app = typer.Typer(
    rich_markup_mode=None,  # help is plain text: `[service]` stays, no markup is eaten
    help="The runs a server holds, and why they took the time they did: where the time went "
    "between two runs, a step's critical path.", no_args_is_help=True)
StepsOpt = typer.Option(None, "--steps", help="Only these steps, e.g. 10-200.")


def _s(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x * 1e6:+.0f} µs" if abs(x) < 1e-3 else f"{x * 1000:+.0f} ms" if abs(x) < 1 else f"{x:+.2f} s"


@runs_app.command("diff")
def runs_diff(
    a: str = typer.Argument(..., help="Run A (the baseline): PROJECT/EXPERIMENT or its run id."),
    b: str = typer.Argument(..., help="Run B: PROJECT/EXPERIMENT or its run id (A again with --a-steps/--b-steps)."),
    steps: Optional[str] = StepsOpt,
    a_steps: Optional[str] = typer.Option(None, "--a-steps", help="A's window (with --b-steps: two windows)."),
    b_steps: Optional[str] = typer.Option(None, "--b-steps", help="B's window."),
    as_json: bool = typer.Option(False, "--json", help="Print the whole diff as JSON (every aligned step)."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Where B's time went against A's: steps aligned by number, the difference by stage, lane class and lane, one
    sentence, and the biggest single fix in B (an estimate)."""
    server = require_server(home, server_url, token, None)
    params: dict[str, Any] = {"a": resolve_run(server, a), "b": resolve_run(server, b)}
    params.update({k: v for k, v in (("steps", steps), ("a_steps", a_steps), ("b_steps", b_steps)) if v})
    d = server.request("GET", "/api/v1/runs/diff", params=params)
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return 0
    typer.echo(d["sentence"])
    if not d["aligned_steps"]:
        return 0
    typer.echo("")
    echo_table([[k, _s(v)] for k, v in list(d["by_stage"].items())[:8]], ["STAGE", "Δ A STEP (B − A)"])
    typer.echo("")
    echo_table([[k, _s(v)] for k, v in d["by_class"].items()], ["LANE CLASS", "Δ BUSY A STEP"])
    if d["lanes"]:
        typer.echo("")
        echo_table([[x["lane"], x["class"], _s(x.get("generation_delta_s", x.get("busy_delta_s"))),
                     f"{100 * x['slowest_share_b']:.0f} %" if "slowest_share_b" in x else "–"] for x in d["lanes"][:6]],
                   ["LANE", "CLASS", "Δ A STEP", "SLOWEST IN B"])
    ledger = d["ledger"]  # where the extra device-hours went (docs/ledger.md)
    typer.echo("\n" + ledger["sentence"])
    echo_table([[r, _s(v)] for r, v in list(ledger["by_reason"].items())[:6] if abs(v) > 1e-9],
               ["LEDGER REASON", "Δ DEVICE-S A STEP"])
    pending = d.get("pending_steps", {})
    if pending.get("a") or pending.get("b"):
        typer.echo(f"\n({pending.get('a', 0)} + {pending.get('b', 0)} steps are not summarized yet and were left out)")
    return 0


def _when(ts: float | None) -> str:
    import time

    return "–" if ts is None else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _duration(s: float) -> str:
    return f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.0f} min" if s >= 60 else f"{s:.0f} s"


def _cell(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:.4g}" if isinstance(v, float) else str(v)[:40]


@runs_app.command("list")
def runs_list(
    project: Optional[str] = typer.Option(None, "--project", help="Only this project's runs."),
    status: Optional[str] = typer.Option(None, "--status", help="Only runs that are live, stalled, hung, idle, "
                                                                "finished or lost."),
    tag: Optional[str] = typer.Option(None, "--tag", help="Only runs with this tag."),
    search: Optional[str] = typer.Option(None, "--search", "-q", help="Part of PROJECT/EXPERIMENT or of a tag."),
    metric: Optional[str] = typer.Option(None, "--metric", help="A column with this metric's latest value, as "
                                                                "logged (e.g. critic/score/mean)."),
    config: Optional[str] = typer.Option(None, "--config-keys", help="Config columns: comma-separated keys (e.g. "
                                                                     "actor_rollout_ref.actor.optim.lr)."),
    sort: str = typer.Option("last_seen", "--sort", help="last_seen, first_seen, duration, name, last_step or "
                                                         "metric."),
    ascending: bool = typer.Option(False, "--asc", help="Oldest / smallest first."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1),
    as_json: bool = typer.Option(False, "--json", help="The server's answer as JSON."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """The runs the server holds (every run of its store: trainer clients, OpenTelemetry programs): id, status, tags,
    start, duration, last step, and the columns asked for. RUN arguments of other commands take the id or
    PROJECT/EXPERIMENT shown here."""
    server = require_server(home, server_url, token, None)
    params = {k: v for k, v in {"project": project, "status": status, "tag": tag, "q": search, "metric": metric,
                                "config": config, "sort": sort, "order": "asc" if ascending else "desc",
                                "limit": limit}.items() if v is not None}
    answer = server.request("GET", "/api/v1/runs", params=params)
    runs = answer["runs"]
    if as_json:
        typer.echo(json.dumps(runs, indent=2))
        return 0
    if not runs:
        filters = ", ".join(f"{k}={v}" for k, v in params.items() if k not in ("sort", "order", "limit"))
        typer.echo(f"no runs on {server.url}" + (f" with {filters}" if filters else "")
                   + ("" if filters else "; send some with RL_INSIGHT_SERVER_URL, or `rl-insight demo`"))
        return 0
    keys = [k.strip() for k in (config or "").split(",") if k.strip()]
    if metric and all(r.get("metric") is None for r in runs):  # a typo, or a metric no run logs: say so
        typer.echo(f"no run listed logs {metric!r}: its column is empty (a run page's charts, or GET "
                   "/api/v1/runs/ID/metrics, list the metrics a run logs)", err=True)
    header = ["ID", "RUN", "STATUS", "TAGS", "STARTED", "DURATION", "LAST STEP"]
    header += ([metric.upper()] if metric else []) + [k.upper() for k in keys]
    rows = [[str(r["id"]), f"{r['project']}/{r['experiment_name']}", r["status"], ",".join(r["tags"]) or "–",
             _when(r["first_seen"]), _duration(r["duration_s"]), _cell(r["last_step"])]
            + ([_cell(r.get("metric"))] if metric else []) + [_cell(r.get("config_values", {}).get(k)) for k in keys]
            for r in runs]
    echo_table(rows, header)
    return 0


@runs_app.command("explain")
def runs_explain(
    run: str = typer.Argument(..., help="The run: PROJECT/EXPERIMENT or its run id."),
    step: Optional[int] = typer.Option(None, "--step", min=0, help="One step's critical path (else the whole run)."),
    steps: Optional[str] = StepsOpt,
    cut_percent: int = typer.Option(10, "--cut", help="What if the slowest k % of generations were not waited for "
                                                      "(5, 10 or 20 over a run; any value for one step)."),
    stage: Optional[str] = typer.Option(None, "--stage", help="What if this stage were --faster % faster."),
    faster: float = typer.Option(50.0, "--faster", min=0, max=100),
    as_json: bool = typer.Option(False, "--json"),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Why a step is as long as it is: its critical path with each state's slack and the idle gaps on it, and what
    would save time (estimates); over the run, the median saving per step of each."""
    server = require_server(home, server_url, token, None)
    run_id = resolve_run(server, run)
    extra: dict[str, Any] = {"cut_percent": cut_percent}
    if stage:
        extra.update(stage=stage, faster_percent=faster)
    if step is not None:
        p = server.request("GET", f"/api/v1/runs/{run_id}/critical-path", params={"step": step, **extra})
        if as_json:
            typer.echo(json.dumps(p, indent=2))
            return 0
        typer.echo(f"step {p['step']}: {p['duration_s']:.2f} s; critical path (oldest first), "
                   f"{p['bubbles_s']:.2f} s idle on it:")
        rows = [[e["lane"], e["name"], f"{e['seconds']:.3f} s", f"{e['slack_s']:.3f} s"] for e in p["elements"]]
        echo_table(rows, ["LANE", "STATE", "TIME", "SLACK"])
        w = p["what_if"]
        typer.echo("\nwhat if (estimates, one change at a time):")
        typer.echo(f"  the long-tail replica finished with the others: {w['tail_s']:.2f} s saved"
                   + (f" ({w['tail_lane']})" if w.get("tail_lane") else ""))
        typer.echo(f"  the slowest {w['cut_percent']:g} % of generations not waited for: {w['cut_s']:.2f} s")
        typer.echo(f"  the idle gaps on the path removed: {w['bubbles_s']:.2f} s")
        if "stage_s" in w:
            typer.echo(f"  {w['stage']} {w['faster_percent']:g} % faster: {w['stage_s']:.2f} s")
        if p.get("critical_trajectory"):
            t = p["critical_trajectory"]
            typer.echo(f"\ncritical trajectory: {t['key']} ({t['turns']} turns, {t['duration_s']:.2f} s)")
        return 0
    e = server.request("GET", f"/api/v1/runs/{run_id}/explain", params={**({"steps": steps} if steps else {}), **extra})
    if as_json:
        typer.echo(json.dumps(e, indent=2))
        return 0
    typer.echo(f"{e['steps']} steps, median {e['median_step_s'] or 0:.2f} s a step.")
    if e.get("biggest_text"):
        typer.echo(f"biggest single fix (estimate): {e['biggest_text']}, "
                   f"{e['what_if'][e['biggest']]['median_s']:.2f} s a step (median), "
                   f"{e['what_if'][e['biggest']]['total_s']:.1f} s over these steps")
    from ..semantics.run_diff import describe  # (what each what-if key means, as the UI and the sentence say it)

    echo_table([[describe(k), f"{v['median_s']:.3f} s", f"{v['total_s']:.1f} s"] for k, v in e["what_if"].items()],
               ["WHAT IF (estimates)", "MEDIAN SAVED A STEP", "TOTAL"])
    typer.echo("")
    echo_table([[k, f"{v:.3f} s"] for k, v in e["path_lanes"].items()], ["LANE ON THE PATH", "A STEP"])
    return 0


@runs_app.command("ledger")
def runs_ledger(
    run: str = typer.Argument(..., help="The run: PROJECT/EXPERIMENT or its run id."),
    steps: Optional[str] = StepsOpt,
    as_json: bool = typer.Option(False, "--json", help="steps (each: step, wall_s, devices, total, reasons, tokens, "
                                                       "cost), run, goodput, token_goodput, sentence, tokens_sentence, "
                                                       "cost."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Where the device-seconds went: each step's wall time × devices split into training, generating, weight sync,
    waiting for the long-tail replica, … (docs/ledger.md), and the share that trained the model."""
    server = require_server(home, server_url, token, None)
    run_id = resolve_run(server, run)
    d = server.request("GET", f"/api/v1/runs/{run_id}/ledger", params={"steps": steps} if steps else {})
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return 0
    if not d["steps"]:
        typer.echo("no complete step yet: the ledger counts whole steps")
        return 1
    total = d["run"]["total"] or 1.0
    typer.echo(f"{len(d['steps'])} steps, {d['run']['wall_s']:.1f} s of wall time, {total:.1f} device-seconds "
               f"({d['devices_note']}).")
    typer.echo(d["sentence"])
    typer.echo(d["tokens_sentence"])
    if d["cost"]:
        c = d["cost"]
        per_tokens = (f", {c['per_1k_trained_tokens']:.4g} per 1,000 trained-on tokens"
                      if c["per_1k_trained_tokens"] is not None else "")
        typer.echo(f"cost at {c['per_device_hour']:g} a device-hour: {c['total']:.4g} ({c['per_step']:.4g} a step"
                   f"{per_tokens}); the time that did not train: {c['not_training']:.4g}")
    echo_table([[r, f"{s:.1f}", f"{100 * s / total:.1f} %"] for r, s in d["run"]["reasons"].items()],
               ["REASON", "DEVICE-SECONDS", "SHARE"])
    if d["pending"]:
        typer.echo(f"({len(d['pending'])} more steps are still being summarized; ask again in a few seconds)")
    return 0
