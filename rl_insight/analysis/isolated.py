"""The offline analysis of files someone else wrote (a profile request's uploads), in a child process
bounded in time and memory, so that no input can freeze or exhaust the process that asked for it.

`run_isolated` (the parent: the ingest server) starts `python -m rl_insight.analysis.isolated`, with an
address-space limit (RLIMIT_AS), a CPU-time limit (RLIMIT_CPU), lowered priority and a wall-clock
deadline, and reads back one JSON line. Whatever happens in the child (an exception, a parser that never
ends, an allocation past the limit, a kill), the parent gets an analysis record with a `state` and a
`message` that names the problem; it never raises. Messages name the input files by their names only,
never by the parent's paths.

`analyse` (the child) is the same pipeline as `rl-insight analyze`: load (annotations, operators and
kernels: a profile covers one or a few steps), summarize, render the report, Perfetto and summary files.
A trace is inflated at most to `inflate_limit` bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..child import python_command, python_env

REPORT_FILES = ("timeline.html", "summary.json", "trace.perfetto.json", "summary.md", "memory.csv")
_RESULT_PREFIX = "RL_INSIGHT_ANALYSIS "


def _strip_paths(text: str, root: Path) -> str:
    """`/srv/…/profiles/<id>/rank_0.json.gz: …` → `rank_0.json.gz: …` (the parent's layout stays private)."""
    for prefix in (str(root.resolve()) + os.sep, str(root) + os.sep):
        text = text.replace(prefix, "")
    return text


def analyse(root: Path, names: list[str], title: str, inflate_limit: int | None) -> dict[str, Any]:
    """Analyse `names` (files in `root`) into `root/report/`; the analysis record (state done or failed)."""
    try:
        from .analyze import summarize
        from .load import load
        from .parsers import torch_trace
        from .render import export, html
    except ImportError as exc:
        return {"state": "unavailable", "message": f"the analysis extra is not installed ({exc.name}): "
                                                   'pip install "rl-insight[analysis]"'}
    torch_trace.inflate_limit = inflate_limit
    loaded = load([root / n for n in names], workers=1, detail=("annotations", "ops", "kernels"))
    df, mem = loaded.events, loaded.memory
    problems = [_strip_paths(p, root) for p in loaded.report.warnings + loaded.report.errors]
    if df.empty and mem.empty:
        return {"state": "failed", "message": "; ".join(problems) or "no events in the uploaded traces"}
    out = root / "report"
    out.mkdir(exist_ok=True)
    result = summarize(df, loaded.metrics, mem)
    if not df.empty:
        html.render(df, out / "timeline.html", title, result=result)
        export.perfetto(df, out / "trace.perfetto.json", title)
    if not mem.empty:  # a memory snapshot alone is an answer too: allocated bytes over time
        export.table(mem, out / "memory.csv")
    export.summary(result, out, [Path(p).name for p in loaded.report.parsed], problems)
    stages = [{"name": str(s["name"]), "rank": _int_or_none(s.get("rank")), "count": int(s["count"]),
               "total_s": float(s["total_s"])} for s in _top_stages(result)]
    return {
        "state": "done",
        "events": int(len(df)),
        "lanes": sorted(
            {str(x) for x in df["lane"].unique()} if not df.empty else {str(x) for x in mem["lane"].unique()}
        ),
        "problems": problems[:20],
        "stages": stages,
        "analysed_at": time.time(),
        "overlap": result.get("overlap"),
        "memory": bool(result.get("memory", {}).get("lanes")) or not mem.empty,
        "operators": result.get("operators", {}),  # top operators and kernels, comm vs compute (operators.py)
        "files": sorted(f for f in REPORT_FILES if (out / f).is_file()),
    }


def _top_stages(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = result.get("stage_stats") or []
    return sorted(rows, key=lambda s: -float(s.get("total_s", 0)))[:20] if isinstance(rows, list) else []


def _int_or_none(x: Any) -> int | None:
    try:
        return int(x)
    except (TypeError, ValueError, OverflowError):  # None, NaN, pandas' NA
        return None


def _finite(x: Any) -> Any:
    """The record with every NaN / infinity as None: it is served as JSON, which has neither."""
    if isinstance(x, float):
        return x if x - x == 0.0 else None
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _limit_self(max_memory_bytes: int, max_cpu_s: int) -> None:
    """The child bounds itself before it imports or reads anything (no preexec_fn: the parent has threads)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (max_memory_bytes, max_memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (max_cpu_s, max_cpu_s + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.nice(10)  # ingest and the UI come first


# ---------------------------------------------------------------------------------------------- the parent
def run_isolated(root: Path, names: list[str], title: str, *, inflate_limit: int, max_memory_bytes: int,
                 timeout_s: float) -> dict[str, Any]:
    """The analysis record of `names` in `root`, computed in a bounded child process; never raises."""
    job = json.dumps({"root": str(root), "names": names, "title": title, "inflate_limit": inflate_limit,
                      "max_memory_bytes": max_memory_bytes, "max_cpu_s": int(timeout_s) + 1})
    # one thread per numeric library: their per-core arenas would spend the address-space limit on nothing
    env = python_env(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    started = time.monotonic()
    try:
        proc = subprocess.run(python_command("rl_insight.analysis.isolated"), input=job, capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"state": "failed", "message": f"the analysis took longer than {timeout_s:.0f} s and was stopped; "
                                              "the traces are kept (download them and run `rl-insight analyze`)"}
    except OSError as exc:
        return {"state": "failed", "message": f"cannot start the analysis process: {exc.strerror or exc}"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(_RESULT_PREFIX):
            try:
                rec = json.loads(line[len(_RESULT_PREFIX):])
            except ValueError:
                break
            if isinstance(rec, dict) and isinstance(rec.get("state"), str):
                return rec
            break
    took = time.monotonic() - started
    tail = _strip_paths(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "", root)[:300]
    if proc.returncode < 0 or "MemoryError" in proc.stderr:
        import signal

        sig = -proc.returncode
        why = ("it ran out of its memory limit" if "MemoryError" in proc.stderr or sig == signal.SIGKILL
               else "it used up its CPU time limit" if sig == signal.SIGXCPU
               else f"it was stopped by signal {sig}")
        return {
            "state": "failed",
            "message": f"the analysis stopped after {took:.1f} s: {why} "
            f"({max_memory_bytes // 2**20} MiB, {timeout_s:.0f} s); the traces are kept",
        }
    return {"state": "failed", "message": f"the analysis failed (exit status {proc.returncode}): {tail or 'no output'}"}


def main() -> int:
    """Child entry point: a job as JSON on stdin, the analysis record as one prefixed JSON line on stdout."""
    job = json.loads(sys.stdin.read())
    root = Path(job["root"])
    _limit_self(int(job["max_memory_bytes"]), int(job["max_cpu_s"]))
    try:
        rec = analyse(root, list(job["names"]), str(job["title"]), job.get("inflate_limit"))
    except MemoryError:
        rec = {"state": "failed", "message": "the analysis ran out of its memory limit; the traces are kept"}
    except Exception as exc:  # any failure is the record's message, never a hung "running"
        rec = {"state": "failed", "message": _strip_paths(f"{type(exc).__name__}: {exc}", root)[:1000]}
    sys.stdout.write(_RESULT_PREFIX + json.dumps(_finite(rec), default=str, allow_nan=False) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
