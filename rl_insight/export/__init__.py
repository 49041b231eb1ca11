"""Sending what the monitor knows to TensorBoard and W&B (and files): writers shared by the live server exporters
(`server/rooms/exports/exporters.py`), `rl-insight export` and `rl-insight analyze --format tensorboard`.

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


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-+=@ ")
MAX_NAME = 96


def safe_name(name: str, allowed: frozenset[str] = _SAFE, max_len: int = MAX_NAME) -> str:
    """`name` as one path component (or a W&B project name): kept as it is when it is already safe; otherwise
    its unsafe characters become `_`, it is cut to `max_len` and a short hash of the original is appended, so
    two names that differ only in what was replaced (`team/x`, `team_x`, `team\\x`) never share one."""
    s = name.strip()
    if s and s not in (".", "..") and len(s) <= max_len and all(c in allowed for c in s) and s == name:
        return s
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    cleaned = "".join(c if c in allowed else "_" for c in s)[: max_len - 9].strip(" .") or "_"
    return f"{cleaned}-{digest}"


def run_dir_name(project: str, experiment_name: str) -> str:
    """`<project>/<experiment>`, each a safe path component, one log dir per run (see safe_name)."""
    return f"{safe_name(project)}/{safe_name(experiment_name)}"
