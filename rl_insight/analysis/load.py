"""Find input files, detect their format by content, and parse them into one event table."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Literal

from .parsers import ascend, nsys, torch_memory, torch_trace, verl_log
from .parsers.names import normalize_role
from .parsers.sqlite import open_readonly
from .table import Columns, Report, with_depth

if TYPE_CHECKING:  # pandas is imported by load() itself: parse_file (a worker's or Ray task's job) never needs it
    import pandas as pd


def _empty_frame() -> "pd.DataFrame":
    import pandas as pd

    return pd.DataFrame()

Source = Literal["auto", "torch", "nsys", "mstx", "verl-log"]
Kind = Literal["torch", "torch-memory", "nsys-sqlite", "nsys-jsonl", "mstx-db", "mstx-trace-view", "verl-log"]
SOURCE_KINDS: dict[str, set[str]] = {"torch": {"torch", "torch-memory"}, "nsys": {"nsys-sqlite", "nsys-jsonl"},
                                     "mstx": {"mstx-db", "mstx-trace-view"}, "verl-log": {"verl-log"}}
_SKIP_NAMES = ("async_llm",)  # vLLM AsyncLLM front-end traces: no RL stages


def detect(path: Path) -> Kind | None:
    """The format by content (the first bytes), with the name only as a tie-breaker."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if head[:2] == b"\x1f\x8b":
        return "torch"
    if torch_memory.looks_like_pickle(head) and path.suffix in (".pickle", ".pkl", ".pk"):
        return "torch-memory"
    if head.startswith(b"SQLite format 3\x00"):
        import sqlite3

        try:
            conn, tables = open_readonly(path)
            conn.close()
        except sqlite3.DatabaseError:
            return None
        if "NVTX_EVENTS" in tables or "StringIds" in tables:
            return "nsys-sqlite"
        if "MSTX_EVENTS" in tables or "STRING_IDS" in tables:
            return "mstx-db"
        return None
    text = head.lstrip()
    if text.startswith(b"{") and b'"table"' in head[:2048]:
        return "nsys-jsonl"
    if text.startswith(b"{") and (b"traceEvents" in head or b"schemaVersion" in head or b"distributedInfo" in head):
        return "torch"
    if text.startswith(b"[") and (b'"ph"' in head or b'"ts"' in head):
        return (
            "mstx-trace-view" if path.name == "trace_view.json" or b'"ts": "' in head or b'"ts":"' in head else "torch"
        )
    if b"step:" in head or path.suffix == ".log":
        if b"step:" in head or _log_has_steps(path):
            return "verl-log"
    return None


def _log_has_steps(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return b"step:" in f.read(2 * 2**20)
    except OSError:
        return False


def collect(paths: Iterable[Path], report: Report) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if not p.exists():
            report.error(p, "does not exist")
            continue
        files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
        for f in files:
            if any(s in f.name for s in _SKIP_NAMES):
                continue
            if (
                f.name.startswith(".")
                or f.suffix in (".md", ".txt", ".csv", ".py", ".html", ".png")
                and f.suffix != ".log"
            ):
                continue
            out.append(f)
    return out


def _run(
    tasks: list[tuple[Path, Kind, Path | None, tuple[str, ...]]],
    workers: int | None,
    ray_address: str | None,
    warm: Callable[[], object] | None = None,
) -> Iterable[tuple[Columns, pd.DataFrame | None, Report]]:
    """Results in the order of `tasks`, however they were computed. `warm` (imports the caller needs next)
    runs in a thread beside the reading: inflating releases the GIL, so pandas' import costs no wall time;
    in the process pool's case only after the workers are forked (a fork must not copy a half-held import)."""
    warming = None
    if ray_address is not None:
        from .distributed import run_on_ray

        warming = _start(warm)
        yield from run_on_ray(tasks, ray_address, parse_file)
        _join(warming)
        return
    n = default_workers(len(tasks)) if workers is None else max(1, workers)
    if n == 1 or len(tasks) < 2:
        warming = _start(warm)
        for t in tasks:
            yield parse_file(*t)
        _join(warming)
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # forked workers inherit the imported analysis stack; each reads one file at a time, so memory is
    # bounded by the largest file per worker
    with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork")) as pool:
        results = pool.map(_parse_task, tasks)  # submits every task: the workers exist from here on
        warming = _start(warm)
        yield from results
    _join(warming)


def _start(warm: Callable[[], object] | None) -> threading.Thread | None:
    if warm is None:
        return None
    t = threading.Thread(target=_quietly, args=(warm,), name="rl-insight-warm-imports", daemon=True)
    t.start()
    return t


def _quietly(warm: Callable[[], object]) -> None:
    try:
        warm()
    except Exception:  # a missing extra is reported by the caller's own import, with its hint
        pass


def _join(t: threading.Thread | None) -> None:
    if t is not None:
        t.join()


@dataclass
class Found:
    """What the inputs hold before --roles/--ranks/--steps select: named when a selection matches nothing."""

    roles: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    events: int = 0

    @classmethod
    def of(cls, events: pd.DataFrame) -> "Found":
        if events.empty:
            return cls()
        return cls(sorted({str(r) for r in events["role"].dropna().unique()}),
                   sorted({int(r) for r in events["rank"].dropna().unique()}),
                   sorted({int(s) for s in events["step"].dropna().unique()}), len(events))

    def describe(self) -> str:
        def short(xs: list) -> str:
            return ", ".join(map(str, xs[:20])) + (f" … ({len(xs)})" if len(xs) > 20 else "") if xs else "none"
        return f"roles {short(self.roles)}; ranks {short(self.ranks)}; steps {short(self.steps)}"


@dataclass
class Loaded:
    events: pd.DataFrame
    metrics: pd.DataFrame  # per-step verl log metrics (empty when no log was given)
    report: Report
    kinds: dict[str, str] = field(default_factory=dict)
    found: Found = field(default_factory=Found)
    memory: pd.DataFrame = field(default_factory=_empty_frame)  # Columns.memory_frame(): bytes over time per lane


def parse_file(
    f: Path, kind: Kind, root: Path | None, detail: tuple[str, ...]
) -> tuple[Columns, pd.DataFrame | None, Report]:
    """One file into its own columns (and a verl log into its metrics): what a worker process or a Ray
    task runs. A damaged file is an error in the returned report, never an exception."""
    report = Report()
    cols = Columns()
    metrics = None
    try:
        if kind == "torch":
            torch_trace.parse(f, report, root=root, detail=detail, out=cols)
        elif kind == "torch-memory":
            torch_memory.parse(f, report, root=root, out=cols)
        elif kind == "nsys-sqlite":
            nsys.parse_sqlite(f, report, root=root, out=cols)
        elif kind == "nsys-jsonl":
            nsys.parse_jsonl(f, report, root=root, out=cols)
        elif kind == "mstx-db":
            ascend.parse_db(f, report, root=root, out=cols)
        elif kind == "mstx-trace-view":
            ascend.parse_trace_view(f, report, root=root, out=cols)
        else:
            m = verl_log.parse(f, report)
            metrics = m if not m.empty else None
    except Exception as exc:  # one damaged file never stops the others
        report.error(f, f"{type(exc).__name__}: {exc}")
    return cols, metrics, report


def _parse_task(args: tuple[Path, Kind, Path | None, tuple[str, ...]]) -> tuple[Columns, pd.DataFrame | None, Report]:
    return parse_file(*args)


def default_workers(files: int) -> int:
    """All cores for several files; one file is read in this process (a pool would only add start-up)."""
    import os

    return max(1, min(files, os.cpu_count() or 1))


def load(paths: Iterable[Path], *, source: Source = "auto", detail: tuple[str, ...] = ("annotations",),
         ranks: set[int] | None = None, roles: set[str] | None = None, steps: set[int] | None = None,
         progress: Callable[[int, int, Path], None] | None = None, workers: int | None = None,
         ray_address: str | None = None, warm: Callable[[], object] | None = None) -> Loaded:
    """Every input into one event table. Files are parsed in `workers` processes (default: all cores when
    there are several files), or as Ray tasks on the cluster at `ray_address` ("auto" for the local one);
    each file's columns come back whole, so the result does not depend on how the files were spread.
    `warm`: imports the caller needs afterwards, run beside the reading (see _run)."""
    report = Report()
    paths = list(paths)
    files = collect(paths, report)
    cols = Columns()
    metrics: list[pd.DataFrame] = []
    kinds: dict[str, str] = {}
    explicit_files = {p for p in paths if p.is_file()}
    tasks: list[tuple[Path, Kind, Path | None, tuple[str, ...]]] = []
    for f in files:
        kind = detect(f)
        if kind is None:
            if f in explicit_files:
                report.error(f, "unknown format: not a torch trace, nsys export, Ascend profile or verl log")
            elif f.suffix in (".json", ".gz", ".sqlite", ".db", ".jsonl", ".log"):  # looks like an input: say why not
                report.warn(f, "skipped: not a torch trace, nsys export, Ascend profile or verl log (by content)")
            continue
        if source != "auto" and kind not in SOURCE_KINDS[source]:
            continue
        kinds[str(f)] = kind
        root = next((p for p in paths if p.is_dir() and p in f.parents), None)
        tasks.append((f, kind, root, detail))
    for i, (f_cols, f_metrics, f_report) in enumerate(_run(tasks, workers, ray_address, warm), 1):
        if progress:
            progress(i, len(tasks), tasks[i - 1][0])
        cols.segments.update(f_cols.segments)  # keys carry the file: no two files share a segment
        cols.memory += f_cols.memory
        if f_metrics is not None:
            metrics.append(f_metrics)
        report.parsed += f_report.parsed
        report.warnings += f_report.warnings
        report.errors += f_report.errors
    import pandas as pd  # after the reading: a warming thread may be importing it meanwhile

    events = cols.frame()
    found = Found.of(events)
    if ranks:
        events = events[events["rank"].isin(ranks)]
    if roles:  # either spelling selects: actor-rollout-ref (as verl writes file names) or actor_rollout_ref
        wanted = {normalize_role(r) for r in roles}
        events = events[events["role"].astype(str).map(normalize_role).isin(wanted)]
    if steps:
        events = events[events["step"].isin(steps)]
    events = with_depth(events.reset_index(drop=True))
    for col in ("role", "lane", "source", "file"):
        events[col] = events[col].cat.remove_unused_categories()
    metric_table = pd.concat(metrics).groupby(level=0).last() if metrics else pd.DataFrame()
    if steps and not metric_table.empty:
        metric_table = metric_table[metric_table.index.isin(steps)]
    memory = cols.memory_frame()
    if not memory.empty:
        if ranks:
            memory = memory[memory["rank"].isin(ranks)]
        if roles:
            memory = memory[memory["role"].astype(str).map(normalize_role).isin(wanted)]
        if steps:
            memory = memory[memory["step"].isin(steps)]
    return Loaded(events, metric_table, report, kinds, found, memory.reset_index(drop=True))
