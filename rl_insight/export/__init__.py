"""Sending what the monitor knows to TensorBoard and W&B (and files): writers shared by the live
server exporters (`server/exporters.py`), `rl-insight export` and `rl-insight analyze --format tensorboard`.

Each writer takes scalar points `(tag, step, wall_time, value)` and text for one run. The libraries
are optional extras, imported only when a writer is created: a missing one is an error that names
the extra (`rl-insight[tensorboard]`, `rl-insight[wandb]`).
"""

from __future__ import annotations

from typing import NamedTuple


class Point(NamedTuple):
    tag: str
    step: int
    wall_time: float
    value: float


def run_dir_name(project: str, experiment_name: str) -> str:
    """`<project>/<experiment>` with path separators and dots made safe (one log dir per run)."""
    def safe(s: str) -> str:
        s = (s or "_").replace("/", "_").replace("\\", "_").strip()
        return "_" if s in ("", ".", "..") else s
    return f"{safe(project)}/{safe(experiment_name)}"
