"""Role, rank, step and lane from verl's file and directory names (every layout verl has used).

verl HEAD names each torch trace with `build_trace_basename` (verl/utils/profiler/torch_profile.py):

    [<save_file_prefix>_][<role>_][step<N>_]rank<r>[-of-<W>][_<tp0-pp0-dp0-cp0>]_pid<pid>_<YYYYmmddHHMMSSfff>
    [_mb<a>[-<b>] | _part<i>].json.gz

where each part is sanitized (`[^0-9A-Za-z.=+-]+` -> `-`, so the worker `actor_rollout_ref` is written
`actor-rollout-ref`). Older verl versions (and older docs) wrote the parts with underscores. The
grammar below is anchored on the right (pid and timestamp), so prefixes in either spelling parse;
roles are shown as verl names its workers (`actor_rollout_ref`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# verl HEAD, anchored on pid and timestamp (see the module docstring)
_VERL = re.compile(r"^(?:(?P<head>.*?)_)?(?:step(?P<step>\d+)_)?rank(?P<rank>\d+)(?:-of-(?P<world>\d+))?"
                   r"(?:_(?P<par>(?:tp|pp|dp|cp)\d+(?:-(?:tp|pp|dp|cp)\d+)*))?_pid(?P<pid>\d+)_(?P<ts>\d{14,20})"
                   r"(?:_mb(?P<mb0>\d+)(?:-(?P<mb1>\d+))?|_part(?P<part>\d+))?$")
# verl's worker roles (save_file_prefix), longest first: how a legacy underscore head splits into worker + scope
WORKER_ROLES = (
    "actor_rollout_ref",
    "actor_rollout",
    "reward_model",
    "rollout_ref",
    "critic",
    "actor",
    "rollout",
    "ref",
    "reward",
    "rm",
)
# older names: [<role>_][<scope>_][step<S>_]rank<r>[-of-<w>][_tp..-pp..]_pid<pid>_<ts>[...].json.gz
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
    scope: str | None = None  # verl's profiling scope (`role=` of build_trace_basename): e2e, train, a stage
    world: int | None = None
    parallel: str | None = None  # "tp0-pp0-dp1-cp0"
    part: str | None = None  # "mb2-3" or "part1": one of several files of the same process and step

    def with_rank(self, rank: int | None) -> "Identity":
        """The same identity with the rank found inside the file (which beats the one from the name)."""
        return Identity(self.role, rank if rank is not None else self.rank, self.step, self.replica, self.scope,
                        self.world, self.parallel, self.part)

    def lane(self) -> str:
        if self.replica is not None:
            return f"{self.role}/replica_{self.replica}"
        return f"{self.role}/rank{self.rank}" if self.rank is not None else self.role


def normalize_role(text: str) -> str:
    """verl's spelling of a worker or scope name: `actor-rollout-ref` and `actor_rollout_ref` are the same role."""
    return text.replace("-", "_")


def _split_head(head: str) -> tuple[str | None, str | None]:
    """(worker role, scope) from the part of a verl name before `step…_rank…`."""
    if not head:
        return None, None
    parts = head.split("_")
    if len(parts) == 1:  # one part: a worker role, or only a scope (no save_file_prefix)
        word = normalize_role(parts[0])
        return (word, None) if word in WORKER_ROLES or not word else (None, word)
    if all("_" not in p for p in parts) and len(parts) == 2 and "-" in head:  # HEAD: sanitized parts
        return normalize_role(parts[0]), normalize_role(parts[1])
    norm = normalize_role(head)
    for worker in WORKER_ROLES:  # legacy underscores: the longest known worker name, then the scope
        if norm == worker:
            return worker, None
        if norm.startswith(worker + "_"):
            return worker, norm[len(worker) + 1:]
    return normalize_role(parts[0]), normalize_role("_".join(parts[1:]))


def identify(path: Path, root: Path | None = None) -> Identity:
    """Best identity for a trace file from its name and the directories above it."""
    name = path.name
    stem = (
        name.split(".")[0]
        if not name.endswith((".json.gz", ".json", ".pt.trace.json.gz", ".pt.trace.json"))
        else name[
            : -len(next(x for x in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json") if name.endswith(x)))
        ]
    )
    m = _VERL.match(stem)
    if m:
        worker, scope = _split_head(m.group("head") or "")
        replica = None
        for text in [stem, *path.parent.parts[-3:]]:
            r = _REPLICA.search(text)
            if r:
                replica = int(r.group("replica"))
        part = (f"mb{m.group('mb0')}" + (f"-{m.group('mb1')}" if m.group("mb1") else "")) if m.group("mb0") else \
            (f"part{m.group('part')}" if m.group("part") else None)
        if replica is not None:  # agent_loop_rollout_replica_<n>: one lane per rollout replica
            worker, scope = "rollout", None
        role = worker or scope or _dir_role(path, root) or "unknown"
        return Identity(role=role, rank=int(m.group("rank")), step=int(m.group("step")) if m.group("step") else None,
                        replica=replica, scope=scope if worker else None,
                        world=int(m.group("world")) if m.group("world") else None, parallel=m.group("par"), part=part)
    return _identify_legacy(path, root)


def _dir_role(path: Path, root: Path | None) -> str | None:
    if root is not None and root in path.parents:
        parts = list(path.parent.relative_to(root).parts) or [root.name]  # files right under the root: its name
    else:
        parts = list(path.parent.parts[-1:])
    for p in reversed(parts):
        if (
            not _STEP_DIR.match(p)
            and p not in ("", ".")
            and not p.endswith("_ascend_pt")
            and p != "ASCEND_PROFILER_OUTPUT"
        ):
            return normalize_role(p)
    return None


def _identify_legacy(path: Path, root: Path | None = None) -> Identity:
    """Names from before build_trace_basename, directory layouts, nsys and Ascend outputs."""
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
