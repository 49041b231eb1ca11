"""The one event table every parser produces (documented in docs/analysis.md).

| column | meaning |
|---|---|
| source | torch, nsys, mstx (Ascend), verl-log |
| role | verl role/worker group (actor_rollout_ref, rollout, …) |
| rank | global rank when known (nullable) |
| lane | timeline row: `<role>/rank<r>` or `rollout/replica_<n>` |
| name | the range / op / kernel name (verl's stage names for annotations) |
| category | annotation (user ranges: verl stages), op (CPU operator), kernel (device), communication, overlap (Ascend Overlap Analysis) |
| start_ns, end_ns | epoch nanoseconds (each source's clock base applied) |
| depth | nesting level within the lane and category family (0 = outermost) |
| step | training step when the file or range says so (nullable) |
| attributes | JSON text of the source's arguments (annotations only, to keep the table small) |
| file | the input file |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

COLUMNS = ["source", "role", "rank", "lane", "name", "category", "start_ns", "end_ns", "depth", "step", "attributes", "file"]
CATEGORIES = ("annotation", "op", "kernel", "communication", "overlap")


@dataclass
class Columns:
    """Column-wise accumulation (cheaper than a dict per event for millions of rows)."""

    source: list[str] = field(default_factory=list)
    role: list[str] = field(default_factory=list)
    rank: list[Any] = field(default_factory=list)
    lane: list[str] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    category: list[str] = field(default_factory=list)
    start_ns: list[int] = field(default_factory=list)
    end_ns: list[int] = field(default_factory=list)
    step: list[Any] = field(default_factory=list)
    attributes: list[Any] = field(default_factory=list)
    file: list[str] = field(default_factory=list)

    def add(self, source: str, role: str, rank: int | None, lane: str, name: str, category: str, start_ns: int,
            end_ns: int, step: int | None, attributes: str | None, file: str) -> None:
        self.source.append(source)
        self.role.append(role)
        self.rank.append(rank)
        self.lane.append(lane)
        self.name.append(name)
        self.category.append(category)
        self.start_ns.append(start_ns)
        self.end_ns.append(end_ns)
        self.step.append(step)
        self.attributes.append(attributes)
        self.file.append(file)

    def __len__(self) -> int:
        return len(self.name)

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame({
            "source": pd.Categorical(self.source), "role": pd.Categorical(self.role),
            "rank": pd.array(self.rank, dtype="Int64"), "lane": pd.Categorical(self.lane), "name": self.name,
            "category": pd.Categorical(self.category, categories=list(CATEGORIES)),
            "start_ns": np.asarray(self.start_ns, dtype="int64"), "end_ns": np.asarray(self.end_ns, dtype="int64"),
            "depth": np.zeros(len(self.name), dtype="int16"), "step": pd.array(self.step, dtype="Int64"),
            "attributes": self.attributes, "file": pd.Categorical(self.file),
        })
        return df


def empty() -> pd.DataFrame:
    return Columns().frame()


def with_depth(df: pd.DataFrame) -> pd.DataFrame:
    """Nesting level of each event within its lane, per family (annotations+communication, ops, kernels)."""
    if df.empty:
        return df
    df = df.sort_values(["lane", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable").reset_index(drop=True)
    family = df["category"].astype(str).map({"annotation": 0, "communication": 0, "op": 1, "kernel": 2, "overlap": 3}).to_numpy()
    lanes = df["lane"].cat.codes.to_numpy()
    starts, ends = df["start_ns"].to_numpy(), df["end_ns"].to_numpy()
    depth = np.zeros(len(df), dtype="int16")
    stacks: dict[tuple[int, int], list[int]] = {}
    for i in range(len(df)):
        key = (lanes[i], family[i])
        st = stacks.get(key)
        if st is None:
            st = stacks[key] = []
        s = starts[i]
        while st and st[-1] <= s:
            st.pop()
        depth[i] = len(st)
        st.append(ends[i])
    df["depth"] = depth
    return df


def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    if not frames:
        return empty()
    out = pd.concat(frames, ignore_index=True)
    for col in ("source", "role", "lane", "file"):
        out[col] = out[col].astype("category")
    out["category"] = pd.Categorical(out["category"].astype(str), categories=list(CATEGORIES))
    return out


@dataclass
class Report:
    """What happened to each input: parsed, skipped, damaged (with the reason)."""

    parsed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def warn(self, path: Any, message: str) -> None:
        self.warnings.append(f"{path}: {message}")

    def error(self, path: Any, message: str) -> None:
        self.errors.append(f"{path}: {message}")
