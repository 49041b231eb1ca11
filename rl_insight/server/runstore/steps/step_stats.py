"""Insights kept per step, so any window is answered without rescanning its spans.

A step's window ([mark of step s-1, mark of step s), docs/insights.md) is immutable once it is a
little in the past. Its pieces are computed once, with the same pure functions as everything else
(`rl_insight/semantics/insights.py`), and stored as rows of `step_stats` in the run store:

| lane       | name        | value (seconds unless noted)                                     |
|------------|-------------|------------------------------------------------------------------|
| L          | ""          | lane L busy (union of its states)                                 |
| L          | X           | lane L in state X                                                 |
| ""         | X           | state X on any lane (the step breakdown)                          |
| "@phase"   | generation, training, overlap, either | the overlap insight's parts             |
| "@gen"     | L           | rollout lane L's generation time (the long tail)                 |
| "@maxdur"  | X           | longest finished X that ended in the step (stalled thresholds)   |
| "@stale"   | sum, count, max | staleness values of the step's generation states (count: n)  |
| "@wait"    | wait_s      | rollout wait: last generation end before the step's first training start |
| "@cp"      | X           | state X's time on the step's critical path (rl_insight/semantics/critical_path.py)    |
| "@cplane"  | L           | lane L's time on the critical path                               |
| "@whatif"  | bubbles, tail, cut5, cut10, cut20 | estimated seconds saved (the path's gaps removed; the    |
|            |             | long tail finishing with the others; the slowest k % of generation items cut)     |
| "@ledger"  | C:R         | lane-seconds of lanes of class C (trainer, rollout, other) under ledger reason R   |
|            |             | (rl_insight/semantics/ledger.py; devices are applied when read: steps/ledger.py)  |
| "@ledger_lanes" | C      | how many lanes of class C the step's ledger counts                               |

A window is then: the sums over the steps it fully contains (one indexed SQL aggregate) plus a
raw computation over the partial steps at its two edges, which are short. The result equals
`insights.summarize` over the same window (a test compares them), except that a state's
"usual" duration for the stalled check is taken from the per-step longest durations.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from ....semantics import critical_path as cp
from ....semantics import insights, ledger
from .. import queries as q
from ..backend import StoreConnection
from ..rows import UPSERT_STEP_STAT, UPSERT_SUMMARY
from ..trajectories.facts import LANE_PREFIX as AGENT_LANE_PREFIX  # one lane per trajectory: not a worker's bubbles

NS = 1e9
BLOCK = 32  # consecutive steps summed into one block: a window reads its blocks and a few single steps
GRACE_S = 10.0  # a step is summarized this long after it ended, so late spans from other processes are in
PHASES = ("generation", "training", "overlap", "either")


def step_rows(spans: list[dict[str, Any]], step: int, a: int, b: int, now_ns: int,
              versions: list[tuple[float, float]], before: Iterable[dict[str, Any]] = ()
              ) -> list[tuple[str, str, float]]:
    """(lane, name, value) rows of one step window [a, b) from the spans overlapping it (`before`: spans that ended
    before it, for the ledger's lanes still down at its start)."""
    rows: list[tuple[str, str, float]] = []
    for lane, per in insights.lane_busy(spans, a, b, now_ns).items():
        rows += [(lane, name, sec) for name, sec in per.items() if sec > 0]
    for lane, v in insights.lane_utilization(spans, a, b, now_ns).items():
        rows.append((lane, "", v["busy_s"]))
    for name, sec in insights.step_breakdown(spans, [(step, a, b)], now_ns)[0]["states"].items():
        rows.append(("", name, sec))
    ov = insights.overlap(spans, a, b, now_ns)
    rows += [("@phase", "generation", ov["generation_s"]), ("@phase", "training", ov["training_s"]),
             ("@phase", "overlap", ov["overlap_s"]),
             ("@phase", "either", ov["generation_s"] + ov["training_s"] - ov["overlap_s"])]
    for lane, iv in insights.generation_lanes(spans, now_ns).items():
        sec = iv.length_in(a, b) / NS
        if sec > 0:
            rows.append(("@gen", lane, sec))
    longest: dict[str, float] = {}
    for s in insights.states(spans):
        end = s.get("end_ns")
        if end is not None and a <= end < b:
            longest[s["name"]] = max(longest.get(s["name"], 0.0), (end - s["start_ns"]) / NS)
    rows += [("@maxdur", name, sec) for name, sec in longest.items()]
    rows += ledger_rows(spans, a, b, now_ns, before)
    ending = [s for s in spans if s.get("end_ns") is not None and a <= s["end_ns"] < b]
    values = insights.staleness_values(ending, versions, now_ns)
    if values:
        rows += [
            ("@stale", "sum", sum(values)),
            ("@stale", "count", float(len(values))),
            ("@stale", "max", max(values)),
        ]
    return rows


def lane_class(lane: str, generation_lanes: set[str]) -> str:
    """trainer (one device each), rollout (its tensor-parallel size each, from the run's config when read), other."""
    if ledger.is_trainer(lane):
        return "trainer"
    return "rollout" if lane in generation_lanes or lane.startswith("replica") else "other"


def ledger_rows(spans: list[dict[str, Any]], a: int, b: int, now_ns: int,
                before: Iterable[dict[str, Any]] = ()) -> list[tuple[str, str, float]]:
    """The step's ledger by lane class and reason ("@ledger", "@ledger_lanes"); trajectory lanes are not workers.
    `before`: spans that ended before the step (a lane whose process died there is lost until it works again)."""
    workers = [s for s in spans if not (s.get("lane") or "").startswith(AGENT_LANE_PREFIX)]
    down = {lane for lane in ledger.lost_at(before, a) if not lane.startswith(AGENT_LANE_PREFIX)}
    per_lane = ledger.step_ledger(workers, a, b, now_ns, down=down)
    gen = {lane for lane, reasons in per_lane.items() if ledger.GENERATING in reasons}  # (generated in the step)
    parts: dict[str, list[float]] = {}
    lanes: dict[str, int] = {}
    for lane, reasons in per_lane.items():
        cls = lane_class(lane, gen)
        lanes[cls] = lanes.get(cls, 0) + 1
        for reason, sec in reasons.items():
            parts.setdefault(f"{cls}:{reason}", []).append(sec)
    # (fsum: exactly rounded, the same whatever order the store returned the spans in)
    return ([("@ledger", k, math.fsum(v)) for k, v in parts.items()]
            + [("@ledger_lanes", c, float(n)) for c, n in lanes.items()])


def wait_rows(conn: StoreConnection, run_id: int, step: int, a: int, b: int, now_ns: int,
              spans: list[dict[str, Any]] | None = None) -> list[tuple[str, str, float]]:
    """The step's rollout wait; the generation it waited on may have ended before the step began, so the
    spans are read from the previous step's length back (or given: `spans`, read so)."""
    if spans is None:
        spans = q.spans_in(conn, run_id, a - (b - a), b, attributes=False)
    w = insights.rollout_wait(spans, [(step, a, b)], now_ns)
    return [("@wait", "wait_s", w[0]["wait_s"])] if w else []


def stored_steps(conn: StoreConnection, run_id: int, kind: str = "step") -> set[int]:
    """Steps (or the first steps of blocks, kind="block") whose statistics are stored."""
    return {
        r[0]
        for r in conn.execute("SELECT first_step FROM step_summaries WHERE run_id = ? AND kind = ?", (run_id, kind))
    }


def complete_blocks(windows: list[tuple[int, int, int]], done: set[int],
                    blocks_done: set[int]) -> list[tuple[int, int, int, list[int]]]:
    """Blocks of BLOCK consecutive windows (aligned on the window list) whose steps are all stored and
    that are not summed yet: (first_step, start_ns, end_ns, steps)."""
    out = []
    for i in range(0, len(windows) - BLOCK + 1, BLOCK):
        chunk = windows[i:i + BLOCK]
        if chunk[0][0] in blocks_done or not all(w[0] in done for w in chunk):
            continue
        if any(b[1] != a[2] for a, b in zip(chunk, chunk[1:])):
            continue  # not contiguous in time
        out.append((chunk[0][0], chunk[0][1], chunk[-1][2], [w[0] for w in chunk]))
    return out


def pending_steps(conn: StoreConnection, run_id: int, windows: list[tuple[int, int, int]], now_ns: int,
                  done: set[int] | None = None) -> list[tuple[int, int, int]]:
    """Complete step windows (ended more than GRACE_S ago) without stored statistics (`done`: the steps
    known to be stored, when the caller keeps that set; else read from the store)."""
    done = stored_steps(conn, run_id) if done is None else done
    cutoff = now_ns - int(GRACE_S * NS)
    return [w for w in windows if w[2] <= cutoff and w[0] not in done]


def compute_steps(conn: StoreConnection, run_id: int, windows: list[tuple[int, int, int]], versions: list[tuple[float,
                  float]],
                  now_ns: int) -> list[tuple[int, int, int, int, str, str, float]]:
    """step_stats rows (run_id, step, start_ns, end_ns, lane, name, value) for the given windows."""
    out = []
    for step, a, b in windows:
        # from the previous step's length back (the rollout wait; the ledger's lanes still down), in one read
        wide = q.spans_in(conn, run_id, a - (b - a), b, attributes=("param_version", "cut_short"))
        spans = [s for s in wide if s["end_ns"] is None or s["end_ns"] > a]
        before = [s for s in wide if s["end_ns"] is not None and s["end_ns"] <= a]
        rows = step_rows(spans, step, a, b, now_ns, versions, before) + wait_rows(conn, run_id, step, a, b, now_ns,
                                                                                   wide)
        rows += path_rows(conn, run_id, step, a, b, spans, now_ns)
        out += [(run_id, step, a, b, lane, name, value) for lane, name, value in rows]
    return out


def step_trajectories(conn: StoreConnection, run_id: int, step: int) -> list[dict[str, Any]]:
    """The step's agent-loop trajectories that ran on a known replica (the generation items of its what-if)."""
    return [{"replica": r, "start_ns": a, "end_ns": b} for r, a, b in conn.execute(
        "SELECT replica, start_ns, end_ns FROM trajectories WHERE run_id = ? AND step = ? AND replica IS NOT NULL "
        "AND start_ns IS NOT NULL AND end_ns IS NOT NULL", (run_id, step))]


def path_rows(conn: StoreConnection, run_id: int, step: int, a: int, b: int, spans: list[dict[str, Any]],
              now_ns: int) -> list[tuple[str, str, float]]:
    """The step's critical path and what-if rows ("@cp", "@cplane", "@whatif")."""
    path = cp.critical_path(spans, a, b, now_ns)
    return cp.step_whatif_rows(path, cp.generation_items(spans, a, b, now_ns, step_trajectories(conn, run_id, step)))


def steps_without_path(conn: StoreConnection, run_id: int, limit: int) -> list[tuple[int, int, int]]:
    """Stored steps summarized before their critical path was kept (an older version): (step, start, end)."""
    return [tuple(r) for r in conn.execute(
        "SELECT first_step, start_ns, end_ns FROM step_summaries s WHERE run_id = ? AND kind = 'step' AND NOT EXISTS "
        "(SELECT 1 FROM step_stats t WHERE t.run_id = s.run_id AND t.step = s.first_step AND t.lane = '@whatif' "
        "AND t.name = 'bubbles') ORDER BY first_step LIMIT ?", (run_id, limit))]


def compute_paths(conn: StoreConnection, run_id: int, windows: list[tuple[int, int, int]],
                  now_ns: int) -> list[tuple[int, int, int, int, str, str, float]]:
    """Only the critical-path rows of the given (already summarized) steps."""
    out = []
    for step, a, b in windows:
        spans = q.spans_in(conn, run_id, a, b, attributes=False)
        rows = path_rows(conn, run_id, step, a, b, spans, now_ns)
        out += [(run_id, step, a, b, lane, name, v) for lane, name, v in rows]
    return out


def _add(d: dict, key: Any, v: float) -> None:
    d[key] = d.get(key, 0.0) + v


def window_insights(conn: StoreConnection, run_id: int, t0: int, t1: int, now_ns: int, windows: list[tuple[int, int,
                    int]],
                    versions: list[tuple[float, float]], max_steps: int | None = None,
                    stalled_min_s: float = 60.0) -> dict[str, Any]:
    """`insights.summarize` over [t0, t1), from the stored per-step rows plus the raw partial edges."""
    in_window = [w for w in windows if w[2] > t0 and w[1] < t1]
    summaries = conn.execute(
        "SELECT kind, first_step, start_ns, end_ns FROM step_summaries WHERE run_id = ? AND start_ns >= ? "
        "AND end_ns <= ? ORDER BY start_ns",
        (run_id, t0, t1),
    ).fetchall()
    stored = {first for kind, first, _, _ in summaries if kind == "step"}
    # the longest run of consecutive complete, stored steps inside the window: summed from stored rows
    full = [w for w in in_window if w[1] >= t0 and w[2] <= t1 and w[0] in stored]
    block: list[tuple[int, int, int]] = []
    for w in full:
        if block and w[1] != block[-1][2]:
            break
        block.append(w)
    edges = [(t0, t1)] if not block else [(t0, block[0][1]), (block[-1][2], t1)]
    edges = [(a, b) for a, b in edges if b > a]

    lane_busy: dict[str, float] = {}
    busy: dict[tuple[str, str], float] = {}
    phases: dict[str, float] = {}
    stale: dict[str, Any] = {"sum": 0.0, "count": 0.0, "max": None}

    def take(rows: Any) -> None:
        for lane, name, total, mx in rows:
            if lane == "@phase":
                _add(phases, name, total)
            elif lane == "@stale":
                if name == "max":
                    stale["max"] = mx if stale["max"] is None else max(stale["max"], mx)
                else:
                    stale[name] += total
            elif lane in ("", "@gen", "@maxdur", "@wait", "@cp", "@cplane", "@whatif", "@ledger", "@ledger_lanes"):
                continue
            elif name == "":
                _add(lane_busy, lane, total)
            else:
                _add(busy, (lane, name), total)

    if block:
        lo, hi = block[0][1], block[-1][2]
        chosen, last_end = [], lo  # summed blocks inside the run of stored steps, never overlapping
        for kind, first, a, b in summaries:
            if kind == "block" and a >= last_end and b <= hi:
                chosen.append((first, a, b))
                last_end = b
        for first, _, _ in chosen:
            take(
                conn.execute(
                    "SELECT lane, name, total, mx FROM step_blocks WHERE run_id = ? AND first_step = ?", (run_id, first)
                )
            )
        singles = [w[0] for w in block if not any(a <= w[1] and w[2] <= b for _, a, b in chosen)]
        for i in range(0, len(singles), 500):
            part = singles[i:i + 500]
            take(conn.execute(f"SELECT lane, name, sum(value), max(value) FROM step_stats WHERE run_id = ? AND step IN "
                              f"({','.join('?' * len(part))}) GROUP BY lane, name", (run_id, *part)))
    edge_spans: list[dict[str, Any]] = []
    for a, b in edges:
        spans = q.spans_in(conn, run_id, a, b, attributes="param_version")
        edge_spans += spans
        for lane, v in insights.lane_utilization(spans, a, b, now_ns).items():
            _add(lane_busy, lane, v["busy_s"])
        for lane, per in insights.lane_busy(spans, a, b, now_ns).items():
            for name, sec in per.items():
                _add(busy, (lane, name), sec)
        ov = insights.overlap(spans, a, b, now_ns)
        _add(phases, "generation", ov["generation_s"])
        _add(phases, "training", ov["training_s"])
        _add(phases, "overlap", ov["overlap_s"])
        _add(phases, "either", ov["generation_s"] + ov["training_s"] - ov["overlap_s"])
        ending = [s for s in spans if s.get("end_ns") is not None and a <= s["end_ns"] < b]
        values = insights.staleness_values(ending, versions, now_ns)
        if values:
            stale["sum"] += sum(values)
            stale["count"] += len(values)
            stale["max"] = max(values) if stale["max"] is None else max(stale["max"], max(values))

    window = max(1, t1 - t0)
    lanes = {lane: {"busy_s": sec, "utilization": sec * NS / window, "bubble_ratio": 1 - sec * NS / window}
             for lane, sec in lane_busy.items() if sec > 0}
    busy_out: dict[str, dict[str, float]] = {}
    for (lane, name), sec in busy.items():
        busy_out.setdefault(lane, {})[name] = sec
    either = phases.get("either", 0.0)
    overlap = {
        "generation_s": phases.get("generation", 0.0),
        "training_s": phases.get("training", 0.0),
        "overlap_s": phases.get("overlap", 0.0),
        "overlap_ratio": phases.get("overlap", 0.0) / either if either > 0 else 0.0,
    }
    steps, tails = _steps_and_tails(conn, run_id, in_window[-max_steps:] if max_steps else in_window, now_ns)
    history = _duration_history(conn, run_id)
    open_spans = [s for s in edge_spans if s.get("end_ns") is None] + _open_spans(conn, run_id, t0, t1)
    seen: set[str] = set()
    open_unique = []
    for s in open_spans:  # the first of each id, in order
        if s["id"] not in seen:
            seen.add(s["id"])
            open_unique.append(s)
    staleness = None
    if stale["count"]:
        staleness = {"mean": stale["sum"] / stale["count"], "max": stale["max"], "samples": int(stale["count"])}
    waits = [{"step": s["step"], "wait_s": s.pop("rollout_wait_s")} for s in steps if "rollout_wait_s" in s]
    stuck = insights.stalled(open_unique, now_ns, min_seconds=stalled_min_s, history=history)
    return {"window": {"from_ns": t0, "to_ns": t1, "seconds": (t1 - t0) / NS},
            "lanes": insights.without_stalls(lanes, stuck, t0, t1, now_ns), "busy": busy_out,
            "overlap": overlap, "steps": steps, "long_tail": tails, "rollout_wait": waits, "stalled": stuck,
            # (the finished states of the window's unsummarized edges count too: a summary that lags behind, on a
            # busy host, must not make a healthy run's states look new)
            "unjudged": insights.unjudged(open_unique + [e for e in edge_spans if e.get("end_ns") is not None],
                                          history), "staleness": staleness}


def _steps_and_tails(conn: StoreConnection, run_id: int, in_window: list[tuple[int, int, int]],
                     now_ns: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Step breakdown and long tail for every step overlapping the window (whole steps, as summarize does):
    stored steps from their rows, the others (the step in progress, or one not summarized yet) from spans."""
    if not in_window:
        return [], []
    steps_wanted = [w[0] for w in in_window]
    stored: set[int] = set()
    states: dict[int, dict[str, float]] = {}
    gen: dict[int, dict[str, float]] = {}
    waits: dict[int, float] = {}
    lane_busy: dict[int, tuple[float, int]] = {}  # per step: its lanes' busy seconds and how many lanes
    for i in range(0, len(steps_wanted), 500):
        part = steps_wanted[i:i + 500]
        marks = ",".join("?" * len(part))
        stored |= {
            r[0]
            for r in conn.execute(
                f"SELECT first_step FROM step_summaries WHERE run_id = ? AND kind = 'step' AND first_step IN ({marks})",
                (run_id, *part),
            )
        }
        for step, lane, name, value in conn.execute(
                f"SELECT step, lane, name, value FROM step_stats WHERE run_id = ? AND step IN ({marks}) "
                f"AND lane IN ('', '@gen', '@wait')", (run_id, *part)):
            if lane == "@wait":
                waits[step] = value
            else:
                (states if lane == "" else gen).setdefault(step, {})[name] = value
        # each lane's busy seconds (lane, "") summed per step in SQL: one row a step, not one a lane
        for step, total, n in conn.execute(
                f"SELECT step, sum(value), count(*) FROM step_stats WHERE run_id = ? AND step IN ({marks}) "
                "AND name = '' AND lane NOT IN ('', '@gen', '@wait', '@phase', '@stale', '@maxdur') "
                "AND lane NOT LIKE ? GROUP BY step", (run_id, *part, AGENT_LANE_PREFIX + "%")):
            lane_busy[step] = (total, n)
    for step, a, b in (w for w in in_window if w[0] not in stored):  # few: each read on its own
        spans = q.spans_in(conn, run_id, a, b, attributes=False)
        states[step] = insights.step_breakdown(spans, [(step, a, b)], now_ns)[0]["states"]
        gen[step] = {lane: iv.length_in(a, b) / NS for lane, iv in insights.generation_lanes(spans, now_ns).items()}
        for _, _, value in wait_rows(conn, run_id, step, a, b, now_ns):
            waits[step] = value
        per_lane = [v["busy_s"] for lane, v in insights.lane_utilization(spans, a, b, now_ns).items()
                    if not lane.startswith(AGENT_LANE_PREFIX)]
        lane_busy[step] = (sum(per_lane), len(per_lane))
    steps, tails = [], []
    for step, a, b in in_window:
        steps.append({"step": step, "start_ns": a, "end_ns": b, "duration_s": (b - a) / NS,
                      "states": {k: v for k, v in sorted(states.get(step, {}).items()) if v > 0}})
        total, n = lane_busy.get(step, (0.0, 0))
        if n and b > a:  # the share of lane time idle in the step, over the lanes that worked in it
            steps[-1]["bubble_ratio"] = max(0.0, 1 - total * NS / (n * (b - a)))
        t = insights.tail_of_step(step, gen.get(step, {}))
        if t is not None:
            tails.append(t)
        if step in waits:
            steps[-1]["rollout_wait_s"] = waits[step]
    return steps, tails


def _duration_history(conn: StoreConnection, run_id: int, steps: int = 200) -> dict[str, list[float]]:
    """Per state name, the longest finished duration of each of the last `steps` summarized steps."""
    out: dict[str, list[float]] = {}
    for name, value in conn.execute(
            "SELECT name, value FROM step_stats WHERE run_id = ? AND lane = '@maxdur' AND step >= "
            "coalesce((SELECT max(step) FROM step_stats WHERE run_id = ?), 0) - ?", (run_id, run_id, steps)):
        out.setdefault(name, []).append(value)
    return out


def _open_spans(conn: StoreConnection, run_id: int, t0: int, t1: int) -> list[dict[str, Any]]:
    return [
        {"id": r[0], "name": r[1], "lane": r[2], "kind": r[3], "start_ns": r[4], "end_ns": None, "attributes": {}}
        for r in conn.execute(
            "SELECT id, name, lane, kind, start_ns FROM spans INDEXED BY spans_open WHERE run_id = ? "
            "AND end_ns IS NULL AND start_ns < ?",
            (run_id, t1),
        )
    ]


def store(conn: StoreConnection, rows: list[tuple], blocks: list[tuple[int, int, int, int, list[int]]]) -> None:
    """Write computed steps (`rows` of step_stats) and rebuild the complete 32-step blocks named (the writer's
    thread, in its transaction)."""
    conn.executemany(UPSERT_STEP_STAT, rows)
    marks = {(r[0], r[1]): (r[2], r[3]) for r in rows}
    conn.executemany(UPSERT_SUMMARY.format(kind="step"), [(run, step, a, b) for (run, step), (a, b) in marks.items()])
    for run_id, first, a, b, steps in blocks:
        conn.execute("DELETE FROM step_blocks WHERE run_id = ? AND first_step = ?", (run_id, first))
        conn.execute(
            f"INSERT INTO step_blocks SELECT ?, ?, ?, ?, lane, name, sum(value), max(value) FROM step_stats "
            f"WHERE run_id = ? AND step IN ({','.join('?' * len(steps))}) GROUP BY lane, name",
            (run_id, first, a, b, run_id, *steps),
        )
        conn.execute(UPSERT_SUMMARY.format(kind="block"), (run_id, first, a, b))
