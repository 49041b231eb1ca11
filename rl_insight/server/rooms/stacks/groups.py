"""A stack snapshot summarised: who is where, grouped, with the odd ones out named in one sentence.

Pure functions over stored reports (server/rooms/stacks/book.py keeps them). The unit is what holds a lane: each
thread of a process that holds open `trace_state` lanes (a torch.distributed rank's main thread holds `rank_3`; the
demo's trainer runs one thread per rank; an asyncio engine's loop thread holds its replicas); a process holding none is
one unit, its main thread. Processes that did not answer are units too, with their last-seen and open states.

Call paths are compared by file and function, not line (the same function waiting at two lines is one place),
unless `exact`; library paths are compared from their package down (`torch/distributed/...`), so one job's hosts
with different virtualenv paths still group. The largest group is "the many"; every other group is an odd one out.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from ...control.processes import compact
from .records import Moved, StackSnapshot

NATIVE_SHOWN = 16  # innermost native frames kept on a group
_LIB = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
_STDLIB = re.compile(r"[/\\]lib[/\\]python3\.\d+[/\\]")


def short_path(path: str) -> str:
    """A frame's file as grouping sees it: a library from its package down, the stdlib as `<stdlib>/…`, user code
    by its last two components (the same script from two checkouts groups)."""
    parts = _LIB.split(path)
    if len(parts) > 1:
        return parts[-1].replace("\\", "/")
    parts = _STDLIB.split(path)
    if len(parts) > 1:
        return "<stdlib>/" + parts[-1].replace("\\", "/")
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def is_stdlib(path: str) -> bool:
    return short_path(path).startswith("<stdlib>/") or path.startswith("<frozen ")


def signature(frames: list[dict[str, Any]], exact: bool = False) -> tuple:
    return tuple((short_path(f["file"]), f["func"], f["line"] if exact else 0) for f in frames)


def package(path: str) -> str:
    """`torch/distributed/distributed_c10d.py` → `torch.distributed`; user code → its file name."""
    short = short_path(path)
    if short.startswith("<stdlib>/"):
        return short[len("<stdlib>/"):].split("/")[0].removesuffix(".py")
    if _LIB.search(path):
        comps = short.split("/")
        return ".".join(c for c in comps[:2] if not c.endswith(".py")) or comps[0].removesuffix(".py")
    return short.split("/")[-1]


def where(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The frame a reader wants: the innermost one outside the standard library (the stdlib's locks and waits
    below it are how it waits), with the stdlib frame it waits in."""
    if not frames:
        return {"func": "?", "file": "?", "line": 0, "text": "no Python frames"}
    leaf = frames[-1]
    mine = next((f for f in reversed(frames) if not is_stdlib(f["file"])), leaf)
    waits = leaf if mine is not leaf else None
    lib = bool(_LIB.search(mine["file"]))
    at = f"({package(mine['file'])})" if lib else f"at {short_path(mine['file'])}:{mine['line']}"
    text = f"`{mine['func']}` {at}"
    code = (mine.get("code") or "").split("  #", 1)[0].strip()  # the statement, not its comment
    if not lib and code:
        text += f" `{code}`"
    if waits is not None:
        text += f", waiting in {package(waits['file'])} `{waits['func']}`"
    return {"func": mine["func"], "file": mine["file"], "line": mine["line"], "code": mine.get("code"), "text": text}


def units(reports: dict[str, dict[str, Any]], missing: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What is grouped: each lane-holding thread of each answering process (else its main thread), and each
    process that did not answer."""
    out: list[dict[str, Any]] = []
    for key, rep in sorted(reports.items()):
        proc = rep["process"]
        default = _process_label(proc)
        holders = [t for t in rep["threads"] if t["lanes"] and not t["sender"]]
        if not holders:
            main = next((t for t in rep["threads"] if t["main"]), None) or \
                next((t for t in rep["threads"] if not t["sender"]), rep["threads"][0])
            holders = [main]
        for t in holders:
            lanes = [h["lane"] for h in t["lanes"]]
            out.append({"key": f"{key}/{t['id']}", "process": key, "thread": t["id"], "thread_name": t["name"],
                        "label": compact(lanes) if lanes else default, "labels": lanes or [default],
                        "holds_lanes": bool(lanes),
                        "states": t["lanes"], "frames": t["frames"], "native": t.get("native"),
                        "answered": True, "cpu_s": rep.get("cpu_s"), "rss_bytes": rep.get("rss_bytes"),
                        "step": rep.get("step")})
    for proc in missing:
        # named by the lanes it holds, else those it used (a rank that died before its state reached the server)
        lanes = [o["lane"] for o in proc.get("open", [])] or list(proc.get("lanes") or [])
        default = _process_label(proc)
        out.append({"key": f"{proc['host']}:{proc['pid']}/-", "process": f"{proc['host']}:{proc['pid']}",
                    "thread": None, "label": compact(lanes) if lanes else default, "labels": lanes or [default],
                    "holds_lanes": bool(proc.get("open")),
                    "states": proc.get("open", []), "frames": None, "answered": False,
                    "last_seen_ns": proc.get("last_seen_ns"), "beating": proc.get("beating", True)})
    return out


def _process_label(proc: Mapping[str, Any]) -> str:
    """A process that holds no lane now: its rank, else the lanes it has used (`replica_0-3`), else host:pid."""
    if proc.get("rank") is not None:
        return f"rank {proc['rank']}"
    lanes = proc.get("lanes") or []
    return f"{compact(lanes)} ({proc['host']}:{proc['pid']})" if lanes else f"{proc['host']}:{proc['pid']}"


def group(us: list[dict[str, Any]], exact: bool = False) -> list[dict[str, Any]]:
    """Units with the same call path together: the lane holders (what the timeline shows) first, the largest group
    first, then processes in no state, then those that did not answer. The odd ones out are found among the lane
    holders (all answering units when none holds a lane): an idle driver is not an outlier of a hung collective."""
    by_sig: dict[tuple, list[dict[str, Any]]] = {}
    for u in us:
        # the silent: together by the state they hold (a silent rank in train_batch is not one with a silent driver)
        sig = (u["holds_lanes"], signature(u["frames"], exact)) if u["answered"] else \
            ("<no answer>", u["states"][0]["state"] if u["states"] else "")
        by_sig.setdefault(sig, []).append(u)
    groups = []
    for sig, members in by_sig.items():
        answered = members[0]["answered"]
        labels = [label for m in members for label in m["labels"]]
        groups.append({"size": len(members), "answered": answered, "holds_lanes": members[0]["holds_lanes"],
                       "labels": compact(labels),
                       "where": where(members[0]["frames"]) if answered else None,
                       "frames": members[0]["frames"] if answered else None,
                       # py-spy's view of the same thread, when asked: the C frames below the Python ones
                       "native": (members[0].get("native") or [])[-NATIVE_SHOWN:] if answered else None,
                       "members": [{k: m.get(k) for k in ("key", "label", "thread_name", "states", "last_seen_ns",
                                                          "step", "cpu_s", "rss_bytes")} for m in members]})
    groups.sort(key=lambda g: (not g["answered"], not g["holds_lanes"], -g["size"], g["labels"]))
    pool = candidates(groups)
    others = {id(g) for g in pool[1:]}
    for g in groups:
        g["odd_one_out"] = id(g) in others and pool[0]["size"] > g["size"]
    return groups


def candidates(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The groups compared with each other: the answering lane holders, or every answering group when none holds
    a lane (a job that does not use trace_state)."""
    answered = [g for g in groups if g["answered"]]
    holders = [g for g in answered if g["holds_lanes"]]
    return holders or answered


def _s(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _silent(g: dict[str, Any], now_ns: int, waited_s: float | None, lead: bool) -> str:
    """Processes that did not answer: since when they were heard from, and the state they hold (and since when)."""
    members = g["members"]
    seen = [m["last_seen_ns"] for m in members if m.get("last_seen_ns")]
    within = f" within {waited_s:.0f} s" if waited_s else ""
    ago = f", last seen {max(0.0, (now_ns - max(seen)) / 1e9):.0f} s ago" if seen else ""
    states = [m["states"][0] for m in members if m.get("states")]
    open_ = f", in {states[0]['state']} for {max(0.0, (now_ns - states[0]['since_ns']) / 1e9):.0f} s" \
        if states and states[0].get("since_ns") else ""
    verdict = "the likely hang" if lead else _s(g["size"], "a suspect too", "suspects too")
    return f"{g['labels']} did not answer{within}{ago}{open_} — {verdict}"


def sentence(groups: list[dict[str, Any]], now_ns: int, waited_s: float | None = None, calm: bool = False) -> str:
    """The outliers named in one sentence. Processes that hold a state and did not answer come first (the likely
    hang: a snapshot never leads with an innocent process that answered while the stuck ones could not), then the
    many and the odd ones out among those that answered, those in no state, and the other silent ones. `calm`: a run
    within its usual times (the verdict's `not_stuck`): where each group is, no suspect or odd one out named."""
    answered = candidates(groups)
    compared = {id(g) for g in answered}
    idle = [g for g in groups if g["answered"] and id(g) not in compared]
    silent = [g for g in groups if not g["answered"]]
    holding = [g for g in silent if any(m.get("states") for m in g["members"])]
    if calm:
        holding = []
    parts: list[str] = [_silent(g, now_ns, waited_s, lead=True) for g in holding]
    if holding and answered:
        parts.append("of those that answered")
    if not answered:
        parts.append("no process answered")
    elif len(answered) == 1:
        g = answered[0]
        who = f"all {g['size']} ({g['labels']}) are" if g["size"] > 1 else f"{g['labels']} is"
        parts.append(f"{who} in {g['where']['text']}")
    else:
        many = answered[0]
        total = sum(g["size"] for g in answered)
        if many["size"] > answered[1]["size"]:
            parts.append(f"{many['size']} of {total} ({many['labels']}) are in {many['where']['text']}")
            for g in answered[1:4]:
                parts.append(f"{g['labels']} {_s(g['size'], 'is', 'are')} in {g['where']['text']}" + (
                    "" if calm else f" — {_s(g['size'], 'the odd one out', 'odd ones out')}"))
            if len(answered) > 4:
                parts.append(f"{len(answered) - 4} more groups")
        else:
            parts.append(f"no majority: {len(answered)} groups, the largest {many['size']} "
                         f"({many['labels']} in {many['where']['text']})")
    if idle:
        n = sum(g["size"] for g in idle)
        parts.append(f"{n} more process{'es' if n != 1 else ''} in no state ({compact(g['labels'] for g in idle)})")
    if calm:
        quiet = sum(g["size"] for g in silent)
        parts += [f"{quiet} did not answer in time"] if quiet else []
    else:
        parts += [_silent(g, now_ns, waited_s, lead=False) for g in silent if g not in holding]
    text = "; ".join(parts) + "."
    return text.replace("of those that answered; ", "of those that answered, ")


def moved(previous: StackSnapshot, current: list[dict[str, Any]]) -> Moved | None:
    """Who moved since the previous snapshot of the run: the same thread with the same stack, lines included, did
    not (truly stuck, or back at the very same place); None when the two share no thread."""
    before = {u["key"]: u for u in previous.get("units", []) if u.get("answered")}
    still: list[dict[str, Any]] = []
    went: list[dict[str, Any]] = []
    for u in current:
        old = before.get(u["key"])
        if old is None or not u["answered"]:
            continue
        (still if signature(old["frames"], True) == signature(u["frames"], True) else went).append(u)
    if not still and not went:
        return None
    return {"previous": previous["id"], "did_not_move": compact(x for u in still for x in u["labels"]),
            "moved": compact(x for u in went for x in u["labels"]), "still_count": len(still),
            "moved_count": len(went)}


def summarise(snap: StackSnapshot, previous: StackSnapshot | None, now_ns: int, exact: bool = False) -> None:
    """Fill a completed snapshot's `units`, `groups`, `summary` (and `moved` against the previous one). A run whose
    lanes are all within their usual times (`lanes_usual`) is told calmly: no odd one out, no suspect."""
    us = units(snap["reports"], snap.get("missing", []))
    snap["units"] = us
    snap["groups"] = group(us, exact)
    calm = snap.get("lanes_usual") is True
    if calm:
        for g in snap["groups"]:
            g["odd_one_out"] = False
    waited = snap["completed_at"] - snap["created_at"] if snap.get("completed_at") else None
    text = sentence(snap["groups"], now_ns, waited, calm)
    if calm:
        text = "Not stuck (every lane within its usual time): " + text
    if previous is not None:
        m = moved(previous, us)
        if m is not None:
            gap = max(0.0, (snap["created_at"] - previous["created_at"]))
            m["seconds"] = round(gap, 1)
            snap["moved"] = m
            if m["still_count"] and not m["moved_count"]:
                text += f" {gap:.0f} s after the previous snapshot nobody moved: stuck."
            elif m["still_count"]:
                text += f" {gap:.0f} s after the previous snapshot, {m['did_not_move']} did not move."
            else:
                text += f" Everyone moved in the {gap:.0f} s since the previous snapshot."
    snap["summary"] = text
