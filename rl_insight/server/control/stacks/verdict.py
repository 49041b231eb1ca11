"""One verdict for a stuck run, from a completed stack snapshot: lanes (who holds which state, the RL phase, the step),
stacks (where each thread is) and flight-recorder entries (which collective each rank entered and finished) fused
into a class, the culprits, the collective, the phase, the evidence and what to check next.

Classes (described once, with their words and whether they are a hang: verdict_classes.py), in the order they
are decided (the first that the evidence supports wins):

* `dead_process` / `unresponsive` — a process that holds a state did not answer: it stopped beating (dead, or a thread
  holds the GIL in native code, which stops its sender thread too: the server cannot tell the two apart), or it still
  beats and could not answer in time. It is the likely hang, whatever the others say.
* `desync` — at one sequence number of a process group, a rank called a different collective (op or sizes).
* `late_rank` — the others wait in a collective a rank never entered (the flight recorder's wavefront, or without
  it: the lane holders wait in torch.distributed and the odd one out does not); where it is instead is named.
* `unfinished` — every rank entered the collective and one never finished it (its host, network, device).
* `in_collective` — every lane holder waits in a collective and nothing says who is missing (no flight recorder).
* `not_collective` — the stuck lanes are not in a collective: rollout, reward, a tool call, a TransferQueue wait.
* `slow_healthy` — the threads moved between two snapshots: slow, not stuck (checkpoint, validation, a long tail).
* `unknown` — nothing above: the evidence is listed.

Before all of these: `not_stuck` — the stall watch's latest look found every lane within its usual time and the steps
ending (`lanes_usual`), so whatever the stacks show is a job at work: mid-rollout, mid-update, between two steps. No
culprit is named; a real hang makes the lanes overrun, the stall watch takes a snapshot by itself, and that one is
judged on its evidence.

Invariants: a run whose lanes are all within their usual times gets `not_stuck` and no culprit; a culprit is a lane
label (or a process's label when it holds none); an innocent process that answered
is never a culprit ahead of a silent lane holder; pure over the snapshot record (no I/O), so a fault corpus can score
it on synthetic evidence.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ....semantics import insights
from ....semantics.collectives import wavefront
from ..processes import compact
from . import verdict_classes

# what makes a stalled run hung at once (verdict_classes.py); `in_collective` alone can be a long collective still at
# work: hung only once a second snapshot finds nobody moved
HANG_CLASSES = verdict_classes.HANG_CLASSES
_COLLECTIVE_FILES = ("torch/distributed/", "torch/_C/_distributed", "deepspeed/comm", "vllm/distributed")
# what a collective is called wherever it is written (torch.distributed's names; a framework's own wrappers)
COLLECTIVE_FUNCS = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "monitored_barrier", "all_to_all",
    "all_to_all_single", "reduce", "gather", "scatter", "send", "recv", "isend", "irecv", "batch_isend_irecv"})


def _is_collective(f: Mapping[str, Any]) -> bool:
    return any(p in f["file"].replace("\\", "/") for p in _COLLECTIVE_FILES) or \
        f["func"].rsplit(".", 1)[-1] in COLLECTIVE_FUNCS


def in_collective(frames: list[dict[str, Any]] | None) -> bool:
    """Whether a thread's stack waits in a collective: torch.distributed and the libraries that wrap it, or a function
    named as a collective is (a framework's own, or a simulation's) among its innermost frames."""
    return any(_is_collective(f) for f in (frames or [])[-8:])


def _phase(states: Sequence[Mapping[str, Any]]) -> str | None:
    """The RL phase of the states the culprits hold: rollout, training, weight sync, or the state's own name."""
    for s in states:
        p = insights.phase(str(s.get("state") or ""), str(s.get("lane") or ""))
        return {"generation": "rollout", "weight_sync": "weight sync"}.get(p, p if p != "other" else
                                                                           str(s.get("state")))
    return None


def _held(units: Sequence[Mapping[str, Any]], now_ns: int) -> str:
    """", holding <state> for N s" — or what is known of it (a lane whose state's name never arrived, how long it has
    been open; nothing at all): never an empty slot in the sentence."""
    states = [s for u in units for s in u.get("states") or []]
    if not states:
        return ""
    s = states[0]
    since = s.get("since_ns")
    secs = f" for {max(0.0, (now_ns - int(since)) / 1e9):.0f} s" if since else ""
    state = str(s.get("state") or "").strip()
    return f", holding {state}{secs}" if state else f", holding its lane {s.get('lane') or ''}{secs} (state unknown)"


def decide(snap: Mapping[str, Any], now_ns: int) -> dict[str, Any]:
    """The verdict of a completed, summarised snapshot (groups.summarise filled `units` and `groups`)."""
    units: list[dict[str, Any]] = list(snap.get("units") or [])
    answered = [u for u in units if u.get("answered")]
    holders = [u for u in answered if u.get("holds_lanes")]
    # silent and suspect: it holds a state, or it stopped beating without a goodbye (a process that finishes says so)
    silent = [u for u in units if not u.get("answered") and (u.get("states") or not u.get("beating", True))]
    hosts = {str(p.get("process", "")).split(":")[0] for p in units}
    out: dict[str, Any] = {"class": "unknown", "culprits": [], "hosts": [], "collective": None, "phase": None,
                           "step": _step(answered), "evidence": [], "next": [], "snapshot": snap.get("id")}

    if snap.get("lanes_usual") is True:
        return _not_stuck(out, units, answered)

    def culprits(us: Sequence[Mapping[str, Any]]) -> None:
        out["culprits"] = sorted({label for u in us for label in u.get("labels") or []})
        out["hosts"] = sorted({str(u.get("process", "")).split(":")[0] for u in us})
        out["phase"] = _phase([s for u in us for s in u.get("states") or []])

    # 1. a lane holder that could not answer: the likely hang, whatever the others say
    if silent:
        gone = [u for u in silent if not u.get("beating")]
        us = gone or silent
        culprits(us)
        names = compact(out["culprits"])
        if gone:
            out["class"] = "dead_process"
            out["evidence"].append(f"{names} did not answer and stopped beating{_held(us, now_ns)}: the process is "
                                   "gone, or a thread holds the GIL in native code")
            out["next"] += [f"is the process of {names} alive on {', '.join(out['hosts'])}? (the OOM killer: dmesg; "
                            "Ray: the dashboard's dead actors); its last log lines",
                            "alive: py-spy dump --native --pid <pid> shows the native frame that holds the GIL",
                            "the other ranks will wait for it until the collective times out"]
        else:
            out["class"] = "unresponsive"
            out["evidence"].append(f"{names} still beats but did not answer within the wait{_held(us, now_ns)}: its "
                                   "sender thread could not capture and post in time (a host loaded far past its "
                                   "cores, a thread holding the GIL most of the time)")
            out["next"] += [f"py-spy dump --native --pid <pid> on {', '.join(out['hosts'])} shows the native frames",
                            "take the snapshot again with native frames (rl-insight stacks --native)"]
    # 2. the flight recorder's wavefront: desync, late, unfinished
    recorders = {str((u.get("labels") or ["?"])[0]): r["flight_recorder"] for u in holders
                 if (r := (snap.get("reports") or {}).get(u.get("process"))) and r.get("flight_recorder")}
    fronts = wavefront(recorders)
    telling = next((f for f in fronts if f["kind"] in ("desync", "late", "unfinished")), None)
    if telling is not None:
        out["evidence"].append(f"flight recorder: {telling['detail']}")
    unexamined = [f["pg"] for f in fronts if f["kind"] == "unexamined"]
    if unexamined:
        out["evidence"].append(f"flight recorder: {len(unexamined)} process group(s) not compared within the "
                               "verdict's time budget")
    if out["class"] == "unknown" and telling is not None:
        by_label = {label: u for u in holders for label in u.get("labels") or []}
        us = [by_label[c] for c in telling["culprits"] if c in by_label]
        culprits(us)
        out["culprits"] = telling["culprits"]
        out["collective"] = {"op": telling["op"], "seq": telling["seq"], "pg": telling["name"],
                             "sizes": telling["sizes"]}
        kind = {"desync": "desync", "late": "late_rank", "unfinished": "unfinished"}[telling["kind"]]
        out["class"] = kind
        where = "; ".join(f"{u['labels'][0]} is in {_where(u)}" for u in us[:3])
        if kind == "desync":
            out["next"] += ["a code path that differs by rank: a condition on the rank, an uneven batch, a skipped or "
                            "extra collective; compare the call sites of both operations", where]
        elif kind == "late_rank":
            out["next"] += [f"{where}: it never reached {telling['op']} #{telling['seq']}; read it from there",
                            "its host's log first; rl-insight stacks --native for what it waits on"]
        else:
            out["next"] += [f"{compact(out['culprits'])} entered {telling['op']} #{telling['seq']} and never "
                            "finished: its host's network or device (NCCL_DEBUG=INFO; dmesg for Xid errors)"]
    # 3. stacks alone: the lane holders in a collective, the odd ones out elsewhere
    if out["class"] == "unknown" and holders:
        waiting = [u for u in holders if in_collective(u.get("frames"))]
        elsewhere = [u for u in holders if not in_collective(u.get("frames"))]
        if waiting and elsewhere and len(waiting) > len(elsewhere):
            culprits(elsewhere)
            out["class"] = "late_rank"
            func = waiting[0]["frames"][-1]["func"] if waiting[0].get("frames") else "?"
            out["collective"] = {"op": _collective_func(waiting[0]) or func, "seq": None, "pg": None, "sizes": None}
            out["evidence"].append(f"{len(waiting)} of {len(holders)} lane holders wait in "
                                   f"{out['collective']['op']}; {compact(out['culprits'])} in {_where(elsewhere[0])}")
            out["next"] += [f"{compact(out['culprits'])} never reached the collective: read it from "
                            f"{_where(elsewhere[0])}", "turn on the flight recorder (TORCH_FR_BUFFER_SIZE) to see "
                            "which collective by sequence number"]
        elif waiting and not elsewhere and len({_collective_func(u) for u in waiting}) > 1:
            # every lane holder in a collective, but not the same one: the fewer are at another (a desync)
            by_op: dict[str, list[dict[str, Any]]] = {}
            for u in waiting:
                by_op.setdefault(_collective_func(u), []).append(u)
            usual = max(by_op, key=lambda op: (len(by_op[op]), op))
            odd = [u for op, us in by_op.items() if op != usual for u in us]
            culprits(odd)
            out["class"] = "desync"
            out["collective"] = {"op": usual, "seq": None, "pg": None, "sizes": None}
            out["evidence"].append(f"{len(by_op[usual])} of {len(waiting)} lane holders wait in {usual}; "
                                   f"{compact(out['culprits'])} in {_collective_func(odd[0])}")
            out["next"] += ["a code path that differs by rank: a condition on the rank, an uneven batch, a skipped or "
                            f"extra collective; {compact(out['culprits'])} is in {_where(odd[0])}",
                            "the flight recorder (TORCH_FR_BUFFER_SIZE) adds the sequence number and the sizes"]
        elif waiting and not elsewhere:
            out["class"] = "in_collective"
            out["collective"] = {"op": _collective_func(waiting[0]), "seq": None, "pg": None, "sizes": None}
            out["phase"] = _phase([s for u in waiting for s in u.get("states") or []])
            out["evidence"].append(f"every lane holder ({compact(u['labels'][0] for u in waiting)}) waits in "
                                   f"{out['collective']['op']}; the stacks cannot say who is missing")
            out["next"] += ["turn on the flight recorder (TORCH_FR_BUFFER_SIZE=2000) and take a snapshot again: it "
                            "names the rank that never entered or never finished",
                            "processes outside this run (another job on the node, a dead peer) can hold it too"]
        elif elsewhere:
            culprits(elsewhere)
            out["class"] = "not_collective"
            out["evidence"].append(f"the lane holders are not in a collective: {compact(out['culprits'])} in "
                                   f"{_where(elsewhere[0])}{_held(elsewhere, now_ns)}")
            out["next"] += [f"the {out['phase'] or 'stuck'} phase waits on something outside torch.distributed: the "
                            "rollout engine (vLLM/SGLang health), the reward service, a tool call, the TransferQueue"]
    # 4. it moved: slow, not stuck
    moved = snap.get("moved") or {}
    if moved.get("moved_count") and out["class"] in ("unknown", "not_collective", "in_collective") and not silent:
        out["class"] = "slow_healthy"
        out["evidence"].append(f"{moved.get('moved')} moved in the {moved.get('seconds', 0):.0f} s since the "
                               "previous snapshot")
        out["next"] = ["slow, not stuck: a long checkpoint or validation, or the long-tail replica; the step's "
                       "critical path (rl-insight explain) shows where the time goes"]
    if not out["hosts"] and out["culprits"]:
        out["hosts"] = sorted(hosts)
    out["sentence"] = sentence(out)
    return out


def _not_stuck(out: dict[str, Any], units: Sequence[Mapping[str, Any]],
               answered: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out["class"] = "not_stuck"
    out["evidence"].append("the stall watch's latest look: every lane within its usual time, steps ending")
    asked = {str(u.get("process")) for u in units}
    heard = {str(u.get("process")) for u in answered}
    quiet = len(asked - heard)
    out["evidence"].append(f"{len(heard)} of {len(asked)} processes answered" + (
        f" ({quiet} did not in time: a busy host answers late, and a process that stays silent while it holds a "
        "state makes its lane overrun)" if quiet else ""))
    out["next"] = ["nothing: the job is at work. If a step stops ending, the stall watch takes a snapshot by itself "
                   "and its verdict names the culprit (rl-insight diagnose --latest)"]
    out["sentence"] = sentence(out)
    return out


def _collective_func(u: Mapping[str, Any]) -> str:
    """The collective a thread waits in: the innermost torch.distributed function of its stack."""
    frames = list(u.get("frames") or [])
    named = [f for f in reversed(frames) if f["func"].rsplit(".", 1)[-1] in COLLECTIVE_FUNCS]
    if named:
        return str(named[0]["func"].rsplit(".", 1)[-1])
    for f in reversed(frames):
        if _is_collective(f) and not f["func"].startswith("_") and f["func"] not in ("wrapper", "wait"):
            return str(f["func"])
    return "a collective"


def _where(u: Mapping[str, Any]) -> str:
    """Where a thread is, in words: its innermost frame outside the standard library."""
    frames = u.get("frames") or []
    mine = next((f for f in reversed(frames) if "/lib/python3" not in f["file"] and not f["file"].startswith("<")),
                frames[-1] if frames else None)
    if mine is None:
        return "no Python frames"
    return f"`{mine['func']}` at {'/'.join(mine['file'].split('/')[-2:])}:{mine['line']}"


def _step(units: Sequence[Mapping[str, Any]]) -> int | None:
    """The step that is running (and, when stuck, hangs): one after the last the processes logged — a step's metrics
    are logged as it ends (verl's `global_steps`), so the states held now belong to the next."""
    steps = [u["step"] for u in units if isinstance(u.get("step"), int)]
    return max(steps) + 1 if steps else None


def sentence(v: Mapping[str, Any]) -> str:
    """The verdict in one sentence: class, culprits, collective, phase and step."""
    if v["class"] == "not_stuck":
        running = f" (step {v['step']} is running)" if v.get("step") is not None else ""
        return f"{verdict_classes.BY_NAME['not_stuck'].words}{running}."
    parts = [verdict_classes.BY_NAME[v["class"]].words]
    if v["culprits"]:
        parts.append(f"{compact(v['culprits'])}" + (f" on {', '.join(v['hosts'][:3])}" if v["hosts"] else ""))
    c = v.get("collective")
    if c and c.get("op"):
        parts.append(f"{c['op']}" + (f" #{c['seq']}" if c.get("seq") is not None else "")
                     + (f" of {c['pg']}" if c.get("pg") else ""))
    if v.get("phase"):
        parts.append(f"phase {v['phase']}")
    if v.get("step") is not None:
        parts.append(f"in step {v['step']}")  # the step running: one after the last the processes logged
    return " — ".join(parts[:1]) + (": " + "; ".join(parts[1:]) if len(parts) > 1 else "") + "."
