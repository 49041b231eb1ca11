"""The one event table every parser produces (documented in docs/analysis.md).

| column | meaning |
|---|---|
| source | torch, nsys, mstx (Ascend), verl-log |
| role | verl role/worker group (actor_rollout_ref, rollout, …) |
| rank | global rank when known (nullable) |
| lane | timeline row: `<role>/rank<r>` or `rollout/replica_<n>` |
| name | the range / op / kernel name (verl's stage names for annotations) |
| category | annotation (user ranges: verl stages), op (CPU operator), kernel (device), communication, overlap |
|          | (overlap: Ascend Overlap Analysis) |
| start_ns, end_ns | epoch nanoseconds (each source's clock base applied) |
| depth | nesting level within the lane and category family (0 = outermost) |
| step | training step when the file or range says so (nullable) |
| attributes | JSON text of the source's arguments (annotations only, to keep the table small) |
| file | the input file |
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
# numpy and pandas are imported where frames are built, not here: the parsers (and Ray's or the pool's
# workers that run them) only fill Columns and never pay pandas' import; the CLI imports both in a thread
# while the first file inflates (load's `warm`)

COLUMNS = [
    "source",
    "role",
    "rank",
    "lane",
    "name",
    "category",
    "start_ns",
    "end_ns",
    "depth",
    "step",
    "attributes",
    "file",
]
CATEGORIES = ("annotation", "op", "kernel", "communication", "overlap")


@dataclass
class Segment:
    """Events that share source, role, rank, lane, step and file (one trace file's lane)."""

    source: str
    role: str
    rank: int | None
    lane: str
    step: int | None
    file: str
    name: list[str] = field(default_factory=list)
    category: list[str] = field(default_factory=list)
    # epoch ns; a parser may hold its own unit (torch: µs floats) until its one vectorized conversion
    start_ns: list[float] = field(default_factory=list)
    end_ns: list[float] = field(default_factory=list)
    attributes: list[Any] = field(default_factory=list)


class Columns:
    """Column-wise accumulation: per-event lists, per-segment constants (cheap for millions of rows)."""

    def __init__(self) -> None:
        self.segments: dict[tuple, Segment] = {}
        self.memory: list[tuple] = []  # (role, rank, lane, step, file, ts_ns, allocated, reserved, device)

    def segment(self, source: str, role: str, rank: int | None, lane: str, step: int | None, file: str) -> Segment:
        key = (source, role, rank, lane, step, file)
        seg = self.segments.get(key)
        if seg is None:
            seg = self.segments[key] = Segment(source, role, rank, lane, step, file)
        return seg

    def add(self, source: str, role: str, rank: int | None, lane: str, name: str, category: str, start_ns: int,
            end_ns: int, step: int | None, attributes: str | None, file: str) -> None:
        seg = self.segment(source, role, rank, lane, step, file)
        seg.name.append(name)
        seg.category.append(category)
        seg.start_ns.append(start_ns)
        seg.end_ns.append(end_ns)
        seg.attributes.append(attributes)

    def add_memory(self, role: str, rank: int | None, lane: str, step: int | None, file: str, ts_ns: int,
                   allocated: float, reserved: float | None, device: str) -> None:
        """One memory sample: bytes allocated (and reserved) on a device of a lane at a time."""
        self.memory.append((role, rank, lane, step, file, ts_ns, allocated, reserved, device))

    def memory_frame(self) -> pd.DataFrame:
        import pandas as pd

        cols = ["role", "rank", "lane", "step", "file", "ts_ns", "allocated_bytes", "reserved_bytes", "device"]
        df = pd.DataFrame(self.memory, columns=cols)
        if not df.empty:
            df["rank"] = df["rank"].astype("Int64")
            df["step"] = df["step"].astype("Int64")
            df = df.sort_values(["lane", "device", "ts_ns"], kind="stable").reset_index(drop=True)
        return df

    def __len__(self) -> int:
        return sum(len(s.name) for s in self.segments.values())

    def frame(self) -> pd.DataFrame:
        import numpy as np
        import pandas as pd

        segs = [s for s in self.segments.values() if s.name]
        sizes = np.array([len(s.name) for s in segs], dtype="int64")

        def rep(values: list[Any], dtype: Any = None) -> Any:
            return (
                np.repeat(np.array(values, dtype=dtype if dtype else object), sizes)
                if segs
                else np.array([], dtype=object)
            )

        def cat(values: list[Any]) -> pd.Categorical:
            return pd.Categorical(rep(values)) if segs else pd.Categorical([])

        names = [n for s in segs for n in s.name] if len(segs) > 1 else (segs[0].name if segs else [])
        return pd.DataFrame(
            {
                "source": cat([s.source for s in segs]),
                "role": cat([s.role for s in segs]),
                "rank": pd.array(rep([s.rank for s in segs]) if segs else [], dtype="Int64"),
                "lane": cat([s.lane for s in segs]),
                "name": pd.Categorical(names),
                "category": pd.Categorical(
                    [c for s in segs for c in s.category] if len(segs) > 1 else (segs[0].category if segs else []),
                    categories=list(CATEGORIES),
                ),
                "start_ns": np.concatenate([np.asarray(s.start_ns, dtype="int64") for s in segs])
                if segs
                else np.array([], "int64"),
                "end_ns": np.concatenate([np.asarray(s.end_ns, dtype="int64") for s in segs])
                if segs
                else np.array([], "int64"),
                "depth": np.zeros(int(sizes.sum()), dtype="int16"),
                "step": pd.array(rep([s.step for s in segs]) if segs else [], dtype="Int64"),
                "attributes": [a for s in segs for a in s.attributes]
                if len(segs) > 1
                else (segs[0].attributes if segs else []),
                "file": cat([s.file for s in segs]),
            }
        )


def empty() -> pd.DataFrame:
    return Columns().frame()


def with_depth(df: pd.DataFrame) -> pd.DataFrame:
    """Nesting level of each event within its lane, per family (annotations+communication, ops, kernels):
    the number of the family's events on the lane still open when it starts. Vectorized per group:
    rows sorted by start (longer first on ties); depth = position − events already ended at the start."""
    import numpy as np

    if df.empty:
        return df
    df = df.sort_values(["lane", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable").reset_index(
        drop=True
    )
    family = (
        df["category"]
        .astype(str)
        .map({"annotation": 0, "communication": 0, "op": 1, "kernel": 2, "overlap": 3})
        .to_numpy()
    )
    group = df["lane"].cat.codes.to_numpy().astype("int64") * 4 + family
    starts, ends = df["start_ns"].to_numpy(), df["end_ns"].to_numpy()
    depth = np.zeros(len(df), dtype="int64")
    order = np.argsort(group, kind="stable")  # keeps the start order inside each group
    bounds = np.flatnonzero(np.diff(group[order])) + 1
    for idx in np.split(order, bounds):
        s = starts[idx]
        ended = np.searchsorted(np.sort(ends[idx]), s, side="right")
        depth[idx] = np.arange(len(idx)) - ended
    df["depth"] = np.clip(depth, 0, None).astype("int16")
    return df


def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    import pandas as pd

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
