"""Chrome trace / Perfetto JSON, shared by the run store export and the offline analysis.

One process per lane (sorted by prefix then number), threads per track inside it. Complete
("X") events on one thread must nest properly or viewers draw them wrongly, so events that
partly overlap (two concurrent collectives, merged states) are spread over extra threads of the
same track ("communication", "communication #2", …): every thread holds a properly nested set.
Stdlib only.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, NamedTuple

from .lane_order import lane_sort_key


class Slice(NamedTuple):
    lane: str
    track: str
    name: str
    cat: str
    start_ns: int
    end_ns: int
    args: dict[str, Any] | None


def _nested_threads(slices: list[Slice]) -> list[int]:
    """Index of the thread for each slice (input sorted by start, longer first): greedy, each thread a
    stack of open intervals; a slice goes on the first thread where it fits inside the top or after it."""
    stacks: list[list[int]] = []
    out = []
    for s in slices:
        placed = False
        for i, st in enumerate(stacks):
            while st and st[-1] <= s.start_ns:
                st.pop()
            if not st or s.end_ns <= st[-1]:
                st.append(s.end_ns)
                out.append(i)
                placed = True
                break
        if not placed:
            stacks.append([s.end_ns])
            out.append(len(stacks) - 1)
    return out


def lane_events(pid: int, lane: str, slices: Iterable[Slice]) -> list[dict[str, Any]]:
    """The events of one lane (one process): its metadata, then each track's slices on properly nested threads."""
    tracks: dict[str, list[Slice]] = {}
    for s in slices:
        tracks.setdefault(s.track, []).append(s)
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": lane or "(no lane)"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
    tid = 0
    for track, items in sorted(tracks.items()):
        items.sort(key=lambda s: (s.start_ns, -s.end_ns))
        threads = _nested_threads(items)
        for k in range(max(threads, default=-1) + 1):
            tid += 1
            label = track if k == 0 else f"{track} #{k + 1}"
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
        first_tid = tid - max(threads, default=-1)
        for s, k in zip(items, threads):
            ev = {"ph": "X", "name": s.name, "cat": s.cat, "pid": pid, "tid": first_tid + k,
                  "ts": s.start_ns / 1000, "dur": max(0.0, (s.end_ns - s.start_ns) / 1000)}
            if s.args:
                ev["args"] = s.args
            events.append(ev)
    return events


def _other(title: str, other: dict[str, Any] | None) -> dict[str, Any]:
    return {"title": title, "exporter": "rl-insight", **(other or {})}


def build(slices: Iterable[Slice], title: str, other: dict[str, Any] | None = None) -> dict[str, Any]:
    by_lane: dict[str, list[Slice]] = {}
    for s in slices:
        by_lane.setdefault(s.lane, []).append(s)
    events: list[dict[str, Any]] = []
    for pid, lane in enumerate(sorted(by_lane, key=lane_sort_key), start=1):
        events += lane_events(pid, lane, by_lane[lane])
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": _other(title, other)}


def build_stream(
    lanes: Iterable[tuple[str, Iterable[Slice]]], title: str, other: dict[str, Any] | None = None
) -> Iterator[str]:
    """The same JSON as `build`, as text chunks, one lane at a time (lanes given in display order): memory
    stays bounded by the largest lane, and the download starts at once."""
    import json

    yield '{"traceEvents":['
    first = True
    for pid, (lane, slices) in enumerate(lanes, start=1):
        events = lane_events(pid, lane, slices)
        if events:
            yield ("" if first else ",") + ",".join(json.dumps(e, default=str) for e in events)
            first = False
    yield '],"displayTimeUnit":"ms","otherData":' + json.dumps(_other(title, other), default=str) + "}"
