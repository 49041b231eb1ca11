"""A run's live processes as control requests pick them and as messages name them, for every kind: which ones a
selector picks (the protocol's one rule, protocol/control.Selector, over what the server knows of each process:
server/live/clients.py), why a selector picked none, and label lists in a line.

A live process here is ClientTracker's dict: host, pid, rank (None when it reports none) and the lanes it opened.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from ...protocol.control import Selector

MAX_LABELS_SHOWN = 12  # compact range strings list at most this many prefixes
_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def roles_of(proc: Mapping[str, Any]) -> set[str]:
    """A live process's roles as the server sees them: the prefixes of its lanes (a process also takes a role from
    its environment, which the server does not see)."""
    return {lane.split("/", 1)[0] for lane in proc.get("lanes", []) if "/" in lane}


def picked(selector: Selector, proc: Mapping[str, Any]) -> bool:
    return selector.picks(proc["lanes"], roles_of(proc), proc["rank"])


def refusal(project: str, experiment_name: str, live: Sequence[Mapping[str, Any]], selector: Selector) -> str:
    """Why a selector picked none of a run's live processes, and what it has (every kind says the same)."""
    ranks = selector.ranks
    lanes_hint = "; the ranks here are lanes: choose them with --lanes (" + \
        ", ".join(f"rank_{r}" for r in list(ranks)[:3]) + ")" if ranks and not any(p["rank"] is not None
                                                                                     for p in live) else ""
    return (f"no live process of run {project}/{experiment_name} matches {selector.describe()}; it has "
            f"{describe_processes(live)}{lanes_hint}")


def describe_processes(procs: Sequence[Mapping[str, Any]]) -> str:
    """A run's live processes in a line, for messages that say why a selector picked none."""
    ranks = [p["rank"] for p in procs if p.get("rank") is not None]
    lanes = [lane for p in procs for lane in p.get("lanes", [])]
    parts = [f"{len(procs)} live process{'es' if len(procs) != 1 else ''}"]
    parts.append(f"ranks {compact(f'{r}' for r in ranks)}" if ranks else "none reports a rank")
    if lanes:
        roles = sorted({lane.split('/', 1)[0] for lane in lanes if "/" in lane})
        parts.append(f"lanes {compact(lanes)}" + (f" (roles {', '.join(roles)})" if roles else ""))
    else:
        parts.append("no lanes")
    return ", ".join(parts)


def compact(labels: Iterable[str]) -> str:
    """`rank_0 … rank_511, rank_513 … rank_1023` → `rank_0-511, rank_513-1023` (numbers of one prefix as ranges)."""
    numbered: dict[str, list[int]] = {}
    plain: list[str] = []
    for label in labels:
        m = _TRAILING_NUMBER.match(label)
        if m and len(m.group(2)) < 10 and not (len(m.group(2)) > 1 and m.group(2).startswith("0")):
            numbered.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(label)
    out: list[str] = []
    for prefix in sorted(numbered):
        nums = sorted(set(numbered[prefix]))
        runs: list[tuple[int, int]] = []
        for n in nums:
            if runs and n == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], n)
            else:
                runs.append((n, n))
        out.extend(f"{prefix}{a}" if a == b else f"{prefix}{a}-{b}" for a, b in runs)
    out.extend(sorted(set(plain)))
    if len(out) > MAX_LABELS_SHOWN:
        return ", ".join(out[:MAX_LABELS_SHOWN]) + f" and {len(out) - MAX_LABELS_SHOWN} more"
    return ", ".join(out)
