"""Perfetto JSON, CSV/Parquet of the event table, and the analyzers' summary as JSON and markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from ...semantics.perfetto import Slice, build

TRACKS = {
    "annotation": "stages",
    "communication": "communication",
    "op": "ops",
    "kernel": "kernels",
    "overlap": "overlap",
}


def perfetto(df: pd.DataFrame, out: Path, title: str = "rl-insight analysis") -> Path:
    slices = [Slice(str(lane), TRACKS.get(str(cat), str(cat)), name, str(cat), int(s), int(e),
                    json.loads(a) if isinstance(a, str) and a.startswith("{") else None)
              for lane, cat, name, s, e, a in zip(df["lane"], df["category"], df["name"], df["start_ns"], df["end_ns"],
                                                  df["attributes"])]
    out.write_text(json.dumps(build(slices, title), separators=(",", ":")))
    return out


def table(df: pd.DataFrame, out: Path) -> Path:
    if out.suffix == ".parquet":
        try:
            df.to_parquet(out, index=False)
        except ImportError as exc:
            raise RuntimeError("Parquet needs pyarrow: pip install 'rl-insight[analysis]'") from exc
    else:
        df.to_csv(out, index=False)
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _md_table(rows: list[dict[str, Any]], columns: list[str], limit: int = 50) -> list[str]:
    if not rows:
        return ["(none)", ""]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |" for r in rows[:limit]]
    if len(rows) > limit:
        out.append(f"\n… {len(rows) - limit} more rows in summary.json")
    return out + [""]


def summary(result: dict[str, Any], out_dir: Path, inputs: list[str], problems: list[str]) -> tuple[Path, Path]:
    js = out_dir / "summary.json"
    js.write_text(json.dumps({**result, "inputs": inputs, "problems": problems}, indent=1, default=str))
    lines = ["# rl-insight analysis", "", f"{result['events']:,} events on {len(result['lanes'])} lanes"
             + (f" over {result['window']['seconds']:.3f} s" if result["window"] else "") + ".", ""]
    if result["events"]:  # a verl-log-only input has no events: no timeline sections, no "0.0 %" from nothing
        o = result["overlap"]
        if o["generation_s"] or o["training_s"]:
            lines += [
                f"Rollout–training overlap ratio: **{o['overlap_ratio']:.1%}** (generation {o['generation_s']:.3f} s, "
                f"training {o['training_s']:.3f} s, both {o['overlap_s']:.3f} s).",
                "",
            ]
        else:
            lines += ["Rollout–training overlap: no generation or training stages in these traces.", ""]
        lines += ["## Stages per role and rank (seconds)", ""] + _md_table(
            result["stage_stats"], ["role", "rank", "name", "count", "total_s", "mean_s", "p50_s", "p95_s", "max_s"])
        lines += ["## Cross-rank skew (slowest rank per stage)", ""] + _md_table(
            result["skew"],
            ["role", "name", "step", "ranks", "slowest_rank", "slowest_s", "median_s", "ratio", "straggler"],
        )
        lines += ["## Idle (bubble) time per lane", ""] + _md_table(
            [{"lane": k, **v} for k, v in result["utilization"].items()],
            ["lane", "busy_s", "utilization", "bubble_ratio"],
        )
        led = result.get("ledger") or {}
        if led.get("steps"):  # the goodput ledger (docs/ledger.md): device-seconds by reason, each step
            lines += ["## Where the device-seconds went (the goodput ledger)", "",
                      f"{led['sentence']} ({led['devices_note']})", "", led["tokens_sentence"], ""] + _md_table(
                [{"step": s["step"], "wall_s": s["wall_s"], "devices": s["devices"], **s["reasons"]}
                 for s in led["steps"]],
                ["step", "wall_s", "devices", *sorted({k for s in led["steps"] for k in s["reasons"]})])
        lines += ["## Per-step breakdown", ""] + _md_table(
            [{"step": s["step"], "duration_s": s["duration_s"], **s["states"]} for s in result["steps"]],
            ["step", "duration_s", *sorted({k for s in result["steps"] for k in s["states"]})])
        lines += ["## Rollout long tail", ""] + _md_table(
            result["long_tail"], ["step", "slowest_lane", "slowest_s", "median_s", "ratio"]
        )
        lines += ["## Staleness as time (rollout end to the training that consumes it)", ""] + _md_table(
            result.get("staleness_time", []), ["step", "wait_s"])
        comm = [{**r, "compute_s": r["compute_s"] if r["compute_recorded"] else "n/a (--detail ops or kernels)"}
                for r in result["communication"]]
        lines += ["## Communication vs computation", ""] + _md_table(
            comm, ["lane", "stage", "instances", "stage_s", "comm_s", "compute_s", "comm_not_overlapped_s"])
        ops = result.get("operators") or {}
        if ops.get("operators"):
            lines += ["## Top operators by self time (CPU)", ""] + _md_table(
                ops["operators"], ["name", "calls", "self_s", "total_s", "self_pct", "comm", "peak_allocated_bytes"])
        if ops.get("kernels"):
            lines += ["## Top kernels by device time", ""] + _md_table(
                ops["kernels"], ["name", "calls", "total_s", "mean_us", "max_us", "share_pct", "comm"])
    mem = result.get("memory") or {}
    if mem.get("lanes"):
        gib = lambda v: None if v is None else round(v / 2**30, 3)  # noqa: E731 - one-line constructors, a table read where it is used
        lines += ["## Memory (GiB)", ""] + _md_table(
            [
                {**r, "peak_allocated": gib(r["peak_allocated_bytes"]), "peak_reserved": gib(r["peak_reserved_bytes"])}
                for r in mem["lanes"]
            ],
            ["lane", "device", "samples", "peak_allocated", "peak_reserved"],
        )
        lines += ["### Peak allocated per stage (GiB)", ""] + _md_table(
            [{**r, "peak_allocated": gib(r["peak_allocated_bytes"])} for r in mem["stages"]],
            ["lane", "device", "stage", "peak_allocated"],
        )
    if result.get("log"):
        lines += ["## verl log", "", f"steps {result['log']['first_step']}–{result['log']['last_step']}", ""]
        lines += _md_table(
            [{"phase": k, "mean_s": v} for k, v in result["log"]["timing_mean_s"].items()], ["phase", "mean_s"]
        )
    if problems:
        lines += ["## Problems with inputs", ""] + [f"- {p}" for p in problems] + [""]
    md = out_dir / "summary.md"
    md.write_text("\n".join(lines))
    return js, md
