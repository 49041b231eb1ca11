"""Role, rank, step and lane from verl's file and directory names (every layout verl has used)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# current verl: [<role>_][<scope>_][step<S>_]rank<r>[-of-<w>][_tp..-pp..]_pid<pid>_<ts>[...].json.gz
_FLAT = re.compile(r"^(?:(?P<labels>.*?)_)?(?:step(?P<step>\d+)_)?rank(?P<rank>\d+)(?:-of-(?P<world>\d+))?(?:_|$)")
_LEGACY = re.compile(r"(?:^|_)prof_rank-(?P<rank>\d+)_")
_REPLICA = re.compile(r"(?:agent_loop_)?rollout[_-]?replica[_-]?(?P<replica>\d+)", re.I)
_GLOBALRANK = re.compile(r"globalrank(?P<rank>\d+)", re.I)
_STEP_DIR = re.compile(r"^(?:step[_-]?)?(?P<step>\d+)$")
_ASCEND_RANK = re.compile(r"(?:profiler_info_|ascend_pytorch_profiler_)(?P<rank>\d+)\.")


@dataclass(frozen=True)
class Identity:
    role: str
    rank: int | None
    step: int | None
    replica: int | None = None

    def with_rank(self, rank: int | None) -> "Identity":
        """The same identity with the rank found inside the file (which beats the one from the name)."""
        return Identity(self.role, rank if rank is not None else self.rank, self.step, self.replica)

    def lane(self) -> str:
        if self.replica is not None:
            return f"{self.role}/replica_{self.replica}"
        return f"{self.role}/rank{self.rank}" if self.rank is not None else self.role


def identify(path: Path, root: Path | None = None) -> Identity:
    """Best identity for a trace file from its name and the directories above it."""
    name = path.name
    stem = name.split(".")[0]
    if root is not None and root in path.parents:
        parts = list(path.parent.relative_to(root).parts) or [root.name]  # files right under the root: its name
    else:
        parts = list(path.parent.parts[-3:])
    replica = None
    for text in [*parts, stem]:
        m = _REPLICA.search(text)
        if m:
            replica = int(m.group("replica"))
    step = None
    for p in parts:
        m = _STEP_DIR.match(p)
        if m:
            step = int(m.group("step"))
    rank = None
    role = None
    m = _LEGACY.search(name)
    if m:
        rank = int(m.group("rank"))
        role = parts[-1] if parts else stem.split("_prof_rank")[0]
    else:
        m = _FLAT.search(stem)
        if m:
            rank = int(m.group("rank"))
            if m.group("step"):
                step = int(m.group("step"))
            labels = (m.group("labels") or "").split("_")
            role = labels[0] if labels and labels[0] else (parts[-1] if parts else "unknown")
    m = _GLOBALRANK.search(name)
    if m:
        rank = int(m.group("rank"))
    m = _ASCEND_RANK.search(name)
    if m:
        rank = int(m.group("rank"))
    if replica is not None:
        role = "rollout"
    if role is None:
        # role = the nearest directory that is not a step folder or a profiler output folder
        for p in reversed(parts):
            if not _STEP_DIR.match(p) and not p.endswith("_ascend_pt") and p != "ASCEND_PROFILER_OUTPUT":
                role = p
                break
    return Identity(role=(role or "unknown").replace("-", "_"), rank=rank, step=step, replica=replica)
