"""W&B runs: one per rl-insight run, resumed by a stable id (so a server restart continues the same
W&B run); `WANDB_MODE=offline` writes files for `wandb sync` where the cluster has no internet.

W&B wants a run's steps in increasing order, while samples of one step arrive from many processes
and the insight metrics of a step are computed once the next step has begun: points are buffered per
step and a step is logged once two later steps have been seen (or at flush). Points for a step that
was already logged are counted in `late` and not sent.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Iterable

from ..errors import ConfigError
from . import Point, safe_name

LAG_STEPS = 2  # steps kept open for late points (other processes, the insight metrics of the step)


def stable_run_id(project: str, experiment_name: str) -> str:
    return "rli-" + hashlib.sha256(f"{project}\0{experiment_name}".encode("utf-8", "replace")).hexdigest()[:16]


def _import() -> Any:
    try:
        import wandb
    except ImportError:
        raise ConfigError(
            "W&B export needs the wandb package, which is not installed", hint='pip install "rl-insight[wandb]"'
        ) from None
    return wandb


class WandbRun:
    def __init__(
        self,
        project: str,
        experiment_name: str,
        *,
        wandb_project: str | None = None,
        entity: str | None = None,
        directory: Path | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        wandb = _import()
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        self.id = stable_run_id(project, experiment_name)
        # W&B project names refuse `/ \\ # ? % :` and more than 128 characters: a safe spelling (with a hash when
        # changed), the original kept in the run's config; the display name is cut to what W&B shows
        self.project = safe_name(wandb_project or project, max_len=128)
        try:
            self._run = wandb.init(project=self.project, entity=entity, name=experiment_name[:128], id=self.id,
                                   resume="allow", reinit="create_new", dir=str(directory) if directory else None,
                                   config={"project": project, "experiment_name": experiment_name, **(config or {})},
                                   settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
        except Exception as exc:  # W&B's own errors (bad entity, offline dir, refused name) as one clear one
            raise ConfigError(
                f"W&B refused the run {project}/{experiment_name} (as project {self.project!r}): "
                f"{type(exc).__name__}: {str(exc)[:300]}",
                hint="check WANDB_MODE, WANDB_API_KEY and the entity, or use WANDB_MODE=offline",
            ) from None
        self._pending: dict[int, dict[str, float]] = {}
        self._last_logged = self._run.step - 1 if getattr(self._run, "step", 0) else -1
        self.late = 0

    def scalars(self, points: Iterable[Point]) -> int:
        n = 0
        for p in points:
            if p.step <= self._last_logged:
                self.late += 1  # W&B refuses steps below the run's current one (a resumed run keeps its history)
                continue
            self._pending.setdefault(int(p.step), {})[p.tag] = float(p.value)
            n += 1
        if len(self._pending) > LAG_STEPS:
            for step in sorted(self._pending)[:-LAG_STEPS]:
                self._log(step)
        return n

    def table(self, key: str, columns: list[str], rows: list[list[Any]]) -> None:
        wandb = _import()
        self._run.log({key: wandb.Table(columns=columns, data=rows)}, commit=False)

    def _log(self, step: int) -> None:
        values = self._pending.pop(step)
        self._run.log(values, step=step)
        self._last_logged = step

    def flush(self) -> None:
        for step in sorted(self._pending):
            self._log(step)

    def close(self) -> None:
        self.flush()
        self._run.finish()
