"""Locate data shipped with the package (`dashboards/`, `provisioning/`).

In a wheel they are force-included under `rl_insight/_data/`; in an editable checkout they are
the top-level directories of the repository.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parents[1]  # the rl_insight package (this module is rl_insight/services/resources.py)


def data_path(relative: str) -> Path:
    for base in (_PKG / "_data", _PKG.parent):
        candidate = base / relative
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"packaged data file {relative!r} not found under {_PKG / '_data'} or {_PKG.parent}; "
                            "reinstall rl-insight")
