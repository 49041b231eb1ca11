"""Steps from a trace's own step ranges, for a file that spans several steps.

verl names one file per step when it profiles discretely; with `discrete: False` one file holds every
profiled step, and traces from other loops carry no step in their name at all. Such traces mark steps
themselves: torch.profiler's `ProfilerStep#N` (one range per `prof.step()`: torch's own count, which is
the training step when the loop steps the profiler once per training step from the start), and ranges
named `step N`, `step_N`, `step:N`, `global_step N`, `train_step N`. Each event takes the step of the
marked range it starts in (the innermost when marks nest); an event outside every mark keeps none. The
marks themselves are not kept as events (they would be every step's outermost "stage" and hide verl's
stages); the timeline draws step boundaries from the events' steps. The step from the file name, when
there is one, is never overridden.
"""

from __future__ import annotations

import re

from ..table import Columns, Segment

STEP_MARK = re.compile(r"^(?:ProfilerStep#|(?:global_|train_)?step[\s_:#=-]*)(\d+)$", re.I)


def split_by_step_marks(cols: Columns, seg: Segment) -> list[int]:
    """Moves the rows of `seg` (a segment without a step) into one segment per marked step, and gives the
    file's memory samples the same steps. Returns the steps found (empty: nothing changed)."""
    marked = {n for n in set(seg.name) if STEP_MARK.match(n)}
    if seg.step is not None or not marked:
        return []
    import numpy as np

    names = seg.name
    idx = [i for i, n in enumerate(names) if n in marked]
    starts = np.asarray(seg.start_ns, dtype="int64")
    ends = np.asarray(seg.end_ns, dtype="int64")
    m_start, m_end = starts[idx], ends[idx]
    m_step = np.array([int(STEP_MARK.match(names[i]).group(1)) for i in idx], dtype="int64")  # type: ignore[union-attr]  # idx holds only names that match
    order = np.argsort(m_start, kind="stable")
    m_start, m_end, m_step = m_start[order], m_end[order], m_step[order]

    def step_at(t: np.ndarray) -> np.ndarray:
        """The step of the innermost mark containing each time (the latest-starting one); -1 when none.
        Marks in start order each paint their span of the sorted times, so inner marks paint last."""
        order_t = np.argsort(t, kind="stable")
        sorted_t = t[order_t]
        painted = np.full(len(t), -1, dtype="int64")
        for a, b, st in zip(m_start.tolist(), m_end.tolist(), m_step.tolist()):
            painted[np.searchsorted(sorted_t, a, "left"): np.searchsorted(sorted_t, b, "right")] = st
        out = np.empty_like(painted)
        out[order_t] = painted
        return out

    row_step = step_at(starts)
    row_step[idx] = -2  # the marks themselves: they become the events' step (and the timeline's step lines), not stages
    key = (seg.source, seg.role, seg.rank, seg.lane, None, seg.file)
    rows_of = {int(s): np.flatnonzero(row_step == s) for s in np.unique(row_step)}
    kept_none = rows_of.pop(-1, None)
    rows_of.pop(-2, None)
    for step, rows in rows_of.items():
        dst = cols.segment(seg.source, seg.role, seg.rank, seg.lane, step, seg.file)
        dst.start_ns, dst.end_ns = list(dst.start_ns), list(dst.end_ns)  # lists to extend, whatever they were
        dst.name += [names[i] for i in rows]
        dst.category += [seg.category[i] for i in rows]
        dst.start_ns += starts[rows].tolist()
        dst.end_ns += ends[rows].tolist()
        dst.attributes += [seg.attributes[i] for i in rows]
    if kept_none is None:
        cols.segments.pop(key, None)
    else:
        seg.name = [names[i] for i in kept_none]
        seg.category = [seg.category[i] for i in kept_none]
        seg.start_ns, seg.end_ns = starts[kept_none].tolist(), ends[kept_none].tolist()
        seg.attributes = [seg.attributes[i] for i in kept_none]
    samples = [k for k, m in enumerate(cols.memory) if m[4] == seg.file and m[2] == seg.lane and m[3] is None]
    if samples:
        mem_steps = step_at(np.array([cols.memory[k][5] for k in samples], dtype="int64"))
        for k, s in zip(samples, mem_steps.tolist()):
            if s >= 0:
                m = cols.memory[k]
                cols.memory[k] = (*m[:3], s, *m[4:])
    return sorted(int(v) for v in np.unique(m_step))
