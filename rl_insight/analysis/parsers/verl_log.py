"""verl console logs: `step:N - key:value - …` lines (with or without Ray's `(TaskRunner pid=…)` prefix)
-> a per-step metrics table (one row per step, one column per key)."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..table import Report

if TYPE_CHECKING:
    import pandas as pd

_LINE = re.compile(r"(?:^|\)\s*|\s)step:(\d+)\s+-\s+(.*)$")


def parse(path: Path, report: Report) -> pd.DataFrame:
    import pandas as pd

    rows: dict[int, dict[str, float]] = {}
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _LINE.search(line.rstrip("\n"))
            if not m:
                continue
            step = int(m.group(1))
            row = rows.setdefault(step, {"step": float(step)})
            for field in m.group(2).split(" - "):
                key, sep, value = field.rpartition(":")
                if not sep or not key.strip():
                    bad += 1
                    continue
                try:
                    v = float(value.strip())
                except ValueError:
                    continue  # verl prints numbers only; anything else is not a metric
                if math.isfinite(v):
                    row[key.strip()] = v
    if not rows:
        report.error(path, "no `step:N - key:value` lines: is this a verl console log?")
        return pd.DataFrame()
    if bad:
        report.warn(path, f"{bad} malformed fields skipped")
    report.parsed.append(str(path))
    df = pd.DataFrame(sorted(rows.values(), key=lambda r: r["step"]))
    df["step"] = df["step"].astype(int)
    return df.set_index("step")
