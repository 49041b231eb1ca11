"""One verdict for a stuck run, from a completed stack snapshot: lanes (who holds which state, the RL phase, the step),
stacks (where each thread is) and flight-recorder entries (which collective each rank entered and finished) fused
into a class, the culprits, the collective, the phase, the evidence and what to check next.

Classes (described once, with their words and whether they are a hang: verdict_classes.py), in the order they
are decided — each by one rule of `RULES`, run in turn; the first that the evidence supports wins, but for
`slow_healthy`, which overrides what a long collective or a slow phase also shows:

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

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ....semantics import insights
from ....semantics.collectives import wavefront
from ...control.processes import compact
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


@dataclass
class _Case:
    """What a verdict is decided from, read once from the snapshot; `out` is the verdict being made."""

    snap: Mapping[str, Any]
    now_ns: int
    units: list[dict[str, Any]]
    answered: list[dict[str, Any]]
    holders: list[dict[str, Any]]  # answered and holding lanes
    silent: list[dict[str, Any]]  # suspect: it holds a state, or it stopped beating without a goodbye
    out: dict[str, Any]

    def blame(self, us: Sequence[Mapping[str, Any]]) -> None:
        """These units are the culprits: their labels, hosts and the phase of the states they hold."""
        self.out["culprits"] = sorted({label for u in us for label in u.get("labels") or []})
        self.out["hosts"] = sorted({str(u.get("process", "")).split(":")[0] for u in us})
        self.out["phase"] = _phase([s for u in us for s in u.get("states") or []])


def decide(snap: Mapping[str, Any], now_ns: int) -> dict[str, Any]:
    """The verdict of a completed, summarised snapshot (groups.summarise filled `units` and `groups`): `not_stuck`
    when the stall watch saw every lane within its usual time, else each rule of `RULES` in turn, each deciding a class
    only while none is decided (the order is the module docstring's)."""
    units: list[dict[str, Any]] = list(snap.get("units") or [])
    answered = [u for u in units if u.get("answered")]
    out: dict[str, Any] = {"class": "unknown", "culprits": [], "hosts": [], "collective": None, "phase": None,
                           "step": _step(answered), "evidence": [], "next": [], "snapshot": snap.get("id")}
    if snap.get("lanes_usual") is True:
        return _not_stuck(out, units, answered)
    case = _Case(snap, now_ns, units, answered, [u for u in answered if u.get("holds_lanes")],
                 [u for u in units if not u.get("answered") and (u.get("states") or not u.get("beating", True))], out)
    for rule in RULES:
        rule(case)
    if not out["hosts"] and out["culprits"]:
        out["hosts"] = sorted({str(p.get("process", "")).split(":")[0] for p in units})
    out["sentence"] = sentence(out)
    return out


def _silent_holder(c: _Case) -> None:
    """`dead_process` / `unresponsive`: a lane holder that could not answer is the likely hang, whatever the others
    say."""
    if not c.silent:
        return
    out = c.out
    gone = [u for u in c.silent if not u.get("beating")]
    us = gone or c.silent
    c.blame(us)
    names = compact(out["culprits"])
    if gone:
        out["class"] = "dead_process"
        out["evidence"].append(f"{names} did not answer and stopped beating{_held(us, c.now_ns)}: the process is "
                               "gone, or a thread holds the GIL in native code")
        out["next"] += [f"is the process of {names} alive on {', '.join(out['hosts'])}? (the OOM killer: dmesg; "
                        "Ray: the dashboard's dead actors); its last log lines",
                        "alive: py-spy dump --native --pid <pid> shows the native frame that holds the GIL",
                        "the other ranks will wait for it until the collective times out"]
    else:
        out["class"] = "unresponsive"
        out["evidence"].append(f"{names} still beats but did not answer within the wait{_held(us, c.now_ns)}: its "
                               "sender thread could not capture and post in time (a host loaded far past its "
                               "cores, a thread holding the GIL most of the time)")
        out["next"] += [f"py-spy dump --native --pid <pid> on {', '.join(out['hosts'])} shows the native frames",
                        "take the snapshot again with native frames (rl-insight stacks --native)"]


def _flight_recorder(c: _Case) -> None:
    """`desync` / `late_rank` / `unfinished` from the flight recorders' wavefront (its evidence is listed whatever
    was decided before)."""
    out = c.out
    recorders = {str((u.get("labels") or ["?"])[0]): r["flight_recorder"] for u in c.holders
                 if (r := (c.snap.get("reports") or {}).get(u.get("process"))) and r.get("flight_recorder")}
    fronts = wavefront(recorders)
    telling = next((f for f in fronts if f["kind"] in ("desync", "late", "unfinished")), None)
    if telling is not None:
        out["evidence"].append(f"flight recorder: {telling['detail']}")
    unexamined = [f["pg"] for f in fronts if f["kind"] == "unexamined"]
    if unexamined:
        out["evidence"].append(f"flight recorder: {len(unexamined)} process group(s) not compared within the "
                               "verdict's time budget")
    if out["class"] != "unknown" or telling is None:
        return
    by_label = {label: u for u in c.holders for label in u.get("labels") or []}
    us = [by_label[x] for x in telling["culprits"] if x in by_label]
    c.blame(us)
    out["culprits"] = telling["culprits"]
    out["collective"] = {"op": telling["op"], "seq": telling["seq"], "pg": telling["name"], "sizes": telling["sizes"]}
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


def _stacks_alone(c: _Case) -> None:
    """From the stacks alone: the lane holders in a collective and the odd ones out elsewhere (`late_rank`), in
    different collectives (`desync`), all in one (`in_collective`), or none in any (`not_collective`)."""
    if c.out["class"] != "unknown" or not c.holders:
        return
    waiting = [u for u in c.holders if in_collective(u.get("frames"))]
    elsewhere = [u for u in c.holders if not in_collective(u.get("frames"))]
    if waiting and elsewhere and len(waiting) > len(elsewhere):
        _late_by_stacks(c, waiting, elsewhere)
    elif waiting and not elsewhere and len({_collective_func(u) for u in waiting}) > 1:
        _desync_by_stacks(c, waiting)
    elif waiting and not elsewhere:
        out = c.out
        out["class"] = "in_collective"
        out["collective"] = {"op": _collective_func(waiting[0]), "seq": None, "pg": None, "sizes": None}
        out["phase"] = _phase([s for u in waiting for s in u.get("states") or []])
        out["evidence"].append(f"every lane holder ({compact(u['labels'][0] for u in waiting)}) waits in "
                               f"{out['collective']['op']}; the stacks cannot say who is missing")
        out["next"] += ["turn on the flight recorder (TORCH_FR_BUFFER_SIZE=2000) and take a snapshot again: it "
                        "names the rank that never entered or never finished",
                        "processes outside this run (another job on the node, a dead peer) can hold it too"]
    elif elsewhere:
        out = c.out
        c.blame(elsewhere)
        out["class"] = "not_collective"
        out["evidence"].append(f"the lane holders are not in a collective: {compact(out['culprits'])} in "
                               f"{_where(elsewhere[0])}{_held(elsewhere, c.now_ns)}")
        out["next"] += [f"the {out['phase'] or 'stuck'} phase waits on something outside torch.distributed: the "
                        "rollout engine (vLLM/SGLang health), the reward service, a tool call, the TransferQueue"]


def _late_by_stacks(c: _Case, waiting: list[dict[str, Any]], elsewhere: list[dict[str, Any]]) -> None:
    out = c.out
    c.blame(elsewhere)
    out["class"] = "late_rank"
    func = waiting[0]["frames"][-1]["func"] if waiting[0].get("frames") else "?"
    out["collective"] = {"op": _collective_func(waiting[0]) or func, "seq": None, "pg": None, "sizes": None}
    out["evidence"].append(f"{len(waiting)} of {len(c.holders)} lane holders wait in "
                           f"{out['collective']['op']}; {compact(out['culprits'])} in {_where(elsewhere[0])}")
    out["next"] += [f"{compact(out['culprits'])} never reached the collective: read it from "
                    f"{_where(elsewhere[0])}", "turn on the flight recorder (TORCH_FR_BUFFER_SIZE) to see "
                    "which collective by sequence number"]


def _desync_by_stacks(c: _Case, waiting: list[dict[str, Any]]) -> None:
    """Every lane holder in a collective, but not the same one: the fewer are at another."""
    out = c.out
    by_op: dict[str, list[dict[str, Any]]] = {}
    for u in waiting:
        by_op.setdefault(_collective_func(u), []).append(u)
    usual = max(by_op, key=lambda op: (len(by_op[op]), op))
    odd = [u for op, us in by_op.items() if op != usual for u in us]
    c.blame(odd)
    out["class"] = "desync"
    out["collective"] = {"op": usual, "seq": None, "pg": None, "sizes": None}
    out["evidence"].append(f"{len(by_op[usual])} of {len(waiting)} lane holders wait in {usual}; "
                           f"{compact(out['culprits'])} in {_collective_func(odd[0])}")
    out["next"] += ["a code path that differs by rank: a condition on the rank, an uneven batch, a skipped or "
                    f"extra collective; {compact(out['culprits'])} is in {_where(odd[0])}",
                    "the flight recorder (TORCH_FR_BUFFER_SIZE) adds the sequence number and the sizes"]


def _moved(c: _Case) -> None:
    """`slow_healthy`: the threads moved between two snapshots — slow, not stuck (it overrides the classes that a
    long collective or a slow phase would also show, never a silent holder)."""
    out, moved = c.out, c.snap.get("moved") or {}
    if moved.get("moved_count") and out["class"] in ("unknown", "not_collective", "in_collective") and not c.silent:
        out["class"] = "slow_healthy"
        out["evidence"].append(f"{moved.get('moved')} moved in the {moved.get('seconds', 0):.0f} s since the "
                               "previous snapshot")
        out["next"] = ["slow, not stuck: a long checkpoint or validation, or the long-tail replica; the step's "
                       "critical path (rl-insight explain) shows where the time goes"]


RULES: tuple[Callable[[_Case], None], ...] = (_silent_holder, _flight_recorder, _stacks_alone, _moved)


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
