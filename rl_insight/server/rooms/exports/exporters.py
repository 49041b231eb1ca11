"""Live exporters: the server sends each run's trainer scalars (at their step) and its insight metrics
(`rl_insight/…`) to TensorBoard and/or W&B while the job runs.

Off the ingest path: ingest hands points to a bounded queue and returns; one batch worker per exporter
(server/workers/batch_worker.py) writes them (one log dir / W&B run per run, created on first data). Past the bound,
points are
dropped and counted by reason, as are writes that fail; neither ever slows or fails ingest.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ....export import Point, run_dir_name
from ....export.points import config_text, insight_points, is_ledger_point, series_tag
from ...config import ServerConfig
from ...workers.batch_worker import BatchWorker

log = logging.getLogger("rl_insight.server.rooms.exports.exporters")
RunKey = tuple[str, str]


class LiveExporter:
    """One target (TensorBoard or W&B); `make_writer(project, experiment)` opens a run's writer."""

    def __init__(self, name: str, make_writer: Callable[[str, str], Any], max_points: int = 200_000,
                 flush_interval_s: float = 2.0) -> None:
        self.name = name
        self._make = make_writer
        self._writers: dict[RunKey, Any] = {}
        self._broken: set[RunKey] = set()
        self.written = 0
        self._worker: BatchWorker[tuple[RunKey, list[Point]]] = BatchWorker(
            f"export-{name}", self._write, max_weight=max_points, max_batch_weight=max_points,
            interval_s=flush_interval_s, weight=lambda item: len(item[1]))

    @property
    def dropped(self) -> dict[str, int]:
        return self._worker.dropped

    def put(self, run: RunKey, points: list[Point]) -> None:
        if points:
            self._worker.put((run, points))

    def flush(self, timeout: float = 10.0) -> bool:
        if not self._worker.flush(timeout):
            return False
        for w in list(self._writers.values()):
            try:
                w.flush()
            except Exception as exc:  # a failing exporter never affects ingest
                log.warning("%s exporter flush failed: %s", self.name, exc)
        return True

    def close(self) -> None:
        if not self.flush(10.0) or not self._worker.stop(10.0):  # (say so: a run it was still making is not finished)
            log.warning("%s exporter: still writing at shutdown after its wait; what it had not written is lost, "
                        "and a run it was still opening is not closed", self.name)
        for w in self._writers.values():
            try:
                w.close()
            except Exception as exc:
                log.warning("%s exporter close failed: %s", self.name, exc)

    def _writer(self, run: RunKey) -> Any:
        w = self._writers.get(run)
        if w is None and run not in self._broken:
            try:
                w = self._writers[run] = self._make(*run)
            except Exception as exc:  # a failing exporter never affects ingest
                self._broken.add(run)
                log.error("%s exporter cannot open run %s/%s: %s", self.name, run[0], run[1], exc)
        return w

    def _write(self, batch: list[tuple[RunKey, list[Point]]]) -> None:
        """The worker thread: each run's points to its writer; a run whose writer fails loses only its points."""
        for run, points in batch:
            try:
                w = self._writer(run)
                if w is None:
                    self._worker.drop("writer_unavailable", len(points))
                else:
                    self.written += w.scalars(points)
            except Exception as exc:
                self._worker.drop("write_error", len(points))
                log.warning("%s exporter failed to write %d points of %s/%s: %s", self.name, len(points), *run, exc)


MAX_LAST_POINTS = 200_000  # series whose last exported point is remembered (past it, the memory starts again)


class Exporters:
    """The enabled live exporters, fed by ingest and by the insight refresh.

    Invariant: a sample equal to the last one exported of its series (tag, step, time and value) is a copy — what a
    process resends after a server restart or in its last batch (client/batching.py) — and is not exported again."""

    def __init__(self, exporters: Iterable[LiveExporter]) -> None:
        self.all = list(exporters)
        self._last: dict[tuple[RunKey, str], Point] = {}  # the last point exported of each run's series
        self._last_lock = threading.Lock()  # (ingest threads hand batches at once)
        # newest step whose insights were exported, per run and kind (a step's ledger comes once it is summarized,
        # a round or two after its other insights)
        self._insight_step: dict[tuple[RunKey, bool], int] = {}

    def samples(self, rows: Iterable[Any]) -> None:
        """Run-store sample rows of one batch → points with a step, per run."""
        if not self.all:
            return
        by_run: dict[RunKey, list[Point]] = {}
        stepped = [((r.project, r.experiment_name),
                    Point(series_tag(r.name, r.labels), int(r.step), r.ts, float(r.value)))
                   for r in rows if r.step is not None]
        with self._last_lock:
            for run, point in stepped:
                if self._last.get((run, point.tag)) == point:
                    continue
                if len(self._last) >= MAX_LAST_POINTS:
                    self._last.clear()
                self._last[(run, point.tag)] = point
                by_run.setdefault(run, []).append(point)
        for run, points in by_run.items():
            for e in self.all:
                e.put(run, points)

    def insights(self, latest: dict[RunKey, dict[str, Any]]) -> None:
        """Insight metrics of the steps completed since the last refresh (each step exported once)."""
        now = time.time()
        for run, summary in latest.items():
            points: list[Point] = []
            for ledger, kind in _by_kind(insight_points(summary, now)).items():
                done = self._insight_step.get((run, ledger), -1)
                new = [p for p in kind if p.step > done]
                if new:
                    self._insight_step[(run, ledger)] = max(p.step for p in new)
                    points += new
            for e in self.all:
                e.put(run, points)

    def runs(self) -> set[RunKey]:
        return {run for e in self.all for run in list(e._writers)}

    def final_insights(self, reader: Any, step_metric: str, version_metric: str) -> None:
        """At shutdown: the insights of every exported run's steps not exported yet (the last steps of a run
        that finished between two refreshes), computed over the run's whole history."""
        from ...runstore import queries as q
        from .run_points import run_insight_points

        conn = reader.conn()
        by_key = {(r["project"], r["experiment_name"]): r for r in q.list_runs(conn)}
        for run in self.runs():
            info = by_key.get(run)
            if info is None:
                continue
            kinds = _by_kind(run_insight_points(conn, info, step_metric, version_metric))
            points = [p for ledger, kind in kinds.items() for p in kind
                      if p.step > self._insight_step.get((run, ledger), -1)]
            for e in self.all:
                e.put(run, points)

    def close(self) -> None:
        for e in self.all:
            e.close()


def _by_kind(points: Iterable[Point]) -> dict[bool, list[Point]]:
    """Insight points split into the ledger's (True) and the others (False)."""
    out: dict[bool, list[Point]] = {False: [], True: []}
    for p in points:
        out[is_ledger_point(p)].append(p)
    return out


def tensorboard_exporter(root: Path) -> LiveExporter:
    from ....export.tensorboard_writer import TensorBoardRun, _import

    _import()  # a missing extra is an error at start, not a silent no-op

    def make(project: str, experiment: str) -> Any:
        w = TensorBoardRun(root / run_dir_name(project, experiment))
        w.text("rl_insight/run", config_text({"project": project, "experiment_name": experiment}))
        return w

    return LiveExporter("tensorboard", make)


def wandb_exporter(wandb_project: str | None, entity: str | None, directory: Path) -> LiveExporter:
    from ....export.wandb_writer import WandbRun, _import

    _import()

    def make(project: str, experiment: str) -> Any:
        return WandbRun(project, experiment, wandb_project=wandb_project, entity=entity, directory=directory)

    return LiveExporter("wandb", make)


def build_exporters(config: ServerConfig) -> Exporters:
    """The exporters the server's options ask for (--export-tensorboard, --export-wandb)."""
    found = []
    if config.export_tensorboard:
        found.append(tensorboard_exporter(Path(config.export_tensorboard).expanduser()))
    if config.export_wandb:
        directory = (
            Path(config.wandb_dir).expanduser() if config.wandb_dir else Path(config.data_dir).expanduser() / "wandb"
        )
        found.append(wandb_exporter(config.wandb_project, config.wandb_entity, directory))
    return Exporters(found)
