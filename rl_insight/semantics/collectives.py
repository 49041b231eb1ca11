"""The collective wavefront of a hung job, from each rank's flight-recorder evidence (PyTorch's ring of collectives,
client/control/stacks/flight_recorder.py): for every process group, the collective each member last entered and last
finished, and what that says — one rank at a different collective (desync), ranks that never entered the collective
the others wait in (late), one that entered and never finished, or nothing wrong in the collectives at all.

Pure: evidence in, findings out. Sequence numbers count a group's collectives on each rank (`collective_seq_id`);
members of a group are the ranks that report it (gloo does not list a group's ranks). Only the entries a rank still
holds are compared (the newest few dozen): a desync older than those is not seen, and the finding says what it saw.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Callable, Mapping


def _op(e: Mapping[str, Any]) -> tuple[str, str]:
    """What must match across ranks at one sequence number: the operation and the input sizes."""
    return str(e.get("op") or "?"), str(e.get("in_sizes") or [])


def _short(op: str) -> str:
    return op.split(":", 1)[-1]  # "gloo:all_reduce" -> "all_reduce"


def group_front(pg: str, members: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One process group's finding. `members`: member label -> that rank's flight-recorder evidence (state ok)."""
    enq: dict[str, int] = {}
    done: dict[str, int] = {}
    at: dict[str, dict[int, Mapping[str, Any]]] = {}
    for label, fr in members.items():
        g = (fr.get("groups") or {}).get(pg) or {}
        enq[label] = int(g["enqueued"]) if g.get("enqueued") is not None else -1
        done[label] = int(g["completed"]) if g.get("completed") is not None else -1
        at[label] = {e["seq"]: e for e in fr.get("entries") or [] if str(e.get("pg")) == pg and not e.get("p2p")
                     and e.get("seq") is not None}
    name = next((str(((fr.get("groups") or {}).get(pg) or {}).get("name") or "") for fr in members.values()), "")
    out: dict[str, Any] = {"pg": pg, "name": name or pg, "members": len(members), "kind": "clear", "culprits": [],
                           "seq": None, "op": None, "sizes": None}
    if not members:
        return out
    front = max(enq.values())
    # the first sequence number not finished by every rank where the ranks that entered it disagree on the
    # operation or the sizes (one that every rank finished is not where it hangs). Only the numbers an entry holds
    # are compared: the work is bounded by the evidence sent, never by the numbers a rank claims (a group that claims
    # 2^62 collectives once made this walk every one of them, issue 64)
    first = max(0, min(done.values()) + 1)
    held = sorted({seq for entries in at.values() for seq in entries if first <= seq <= front})
    for seq in held:
        calls = {label: _op(at[label][seq]) for label in members if seq in at[label]}
        kinds = Counter(calls.values())
        if len(kinds) > 1:
            usual, _ = max(kinds.items(), key=lambda kv: (kv[1], kv[0]))
            culprits = sorted(label for label, c in calls.items() if c != usual)
            odd = calls[culprits[0]]
            out.update(kind="desync", seq=seq, op=_short(usual[0]), sizes=usual[1], culprits=culprits,
                       detail=f"at {out['name']} #{seq} {len(calls) - len(culprits)} of {len(calls)} called "
                              f"{_short(usual[0])} {usual[1]}; {', '.join(culprits)} called {_short(odd[0])} {odd[1]}")
            return out
    waiting_at = {label: at[label].get(front) for label in members if enq[label] == front}
    op = next((_short(str(e.get("op"))) for e in waiting_at.values() if e), None)
    sizes = next((str(e.get("in_sizes")) for e in waiting_at.values() if e), None)
    behind = sorted(label for label in members if enq[label] < front)
    if behind:
        out.update(kind="late", seq=front, op=op, sizes=sizes, culprits=behind,
                   detail=f"{len(members) - len(behind)} of {len(members)} entered {out['name']} #{front} ({op}); "
                          f"{', '.join(behind)} never did (last entered "
                          f"#{max(enq[b] for b in behind)})")
        return out
    unfinished = sorted(label for label in members if done[label] < front)
    if unfinished and len(unfinished) < len(members):
        out.update(kind="unfinished", seq=front, op=op, sizes=sizes, culprits=unfinished,
                   detail=f"every rank entered {out['name']} #{front} ({op}); {', '.join(unfinished)} never "
                          f"finished it")
    elif unfinished:
        out.update(kind="stuck", seq=front, op=op, sizes=sizes,
                   detail=f"every rank entered {out['name']} #{front} ({op}) and none finished it")
    return out


def wavefront(recorders: Mapping[str, Mapping[str, Any]], budget_s: float = 2.0,
              clock: Callable[[], float] = time.monotonic) -> list[dict[str, Any]]:
    """Every process group's finding, the telling ones first (desync, late, unfinished, stuck, clear, then
    `unexamined`: the groups left when `budget_s` ran out, so that one snapshot's evidence never holds the thread that
    completes every run's snapshots). `recorders`: member label -> flight-recorder evidence; those whose state is not
    "ok" are left out."""
    ok = {label: fr for label, fr in recorders.items() if fr.get("state") == "ok"}
    groups = sorted({pg for fr in ok.values() for pg in (fr.get("groups") or {})})
    order = {"desync": 0, "late": 1, "unfinished": 2, "stuck": 3, "clear": 4, "unexamined": 5}
    deadline = clock() + budget_s
    found = []
    for pg in groups:
        if clock() > deadline:
            found.append({"pg": pg, "name": pg, "members": 0, "kind": "unexamined", "culprits": [], "seq": None,
                          "op": None, "sizes": None, "detail": f"{pg} not compared within the {budget_s:g} s budget"})
            continue
        found.append(group_front(pg, {label: fr for label, fr in ok.items() if pg in (fr.get("groups") or {})}))
    return sorted(found, key=lambda f: (order[f["kind"]], f["pg"]))
