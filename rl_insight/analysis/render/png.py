"""Static PNG timeline for reports (matplotlib, headless Agg backend)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...semantics.lane_order import lane_sort_key
from ...semantics.palette import color_of
from .merge import merge_below


def backend() -> None:
    """matplotlib on its headless Agg backend (imported lazily: only PNG output pays for it)."""
    import matplotlib

    matplotlib.use("Agg")  # no display; never touches global logging
    import matplotlib.pyplot  # noqa: F401 - imported now, on the calling thread, for its set-up


def render(df: pd.DataFrame, out: Path, title: str = "RL timeline", width_in: float = 16.0) -> Path:
    backend()
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if df.empty:
        raise ValueError("no events to draw")
    top = df[df["depth"] == 0]
    t0 = int(top["start_ns"].min())
    span = max(1, int(top["end_ns"].max()) - t0)
    merged = merge_below(top, span // 2000)
    lanes = sorted({str(x) for x in merged["lane"].unique()}, key=lane_sort_key)
    names = sorted(merged["name"].unique())
    colors = {n: color_of(n) for n in names}  # semantics/palette.py: the same colours as the live UI and the HTML
    fig, ax = plt.subplots(figsize=(width_in, max(3.0, 0.45 * len(lanes) + 1.5)), dpi=120)
    for i, lane in enumerate(lanes):
        rows = merged[merged["lane"].astype(str) == lane]
        for name, g in rows.groupby("name"):
            bars = list(zip(((g["start_ns"] - t0) / 1e6).tolist(), ((g["end_ns"] - g["start_ns"]) / 1e6).tolist()))
            ax.broken_barh(bars, (i - 0.35, 0.7), facecolors=colors[name], edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(lanes)), labels=lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time since the first event (ms)")
    ax.set_title(title)
    ax.grid(axis="x", color="#e5e7eb")
    ax.legend(
        handles=[Patch(color=colors[n], label=n) for n in names], loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8
    )
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out
