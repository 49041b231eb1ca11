"""Stack snapshots: the request that rides on ingest replies and what each process answers, validated once here.

A snapshot is asked of a run (`POST /api/v1/runs/{id}/stacks`); every ingest reply of that run lists the pending
ones in `RunControl.stacks` (`StackRequest.to_wire`). A process whose lanes, roles or rank match answers once, from
its sender thread (never the training thread), with `ROUTE_STACKS/<id>/report`::

    {"process": {"host", "pid", "rank"?, "lanes": [...], "roles": [...]},
     "taken_ns", "step"?, "rss_bytes"?, "cpu_s"?,
     "threads": [{"id", "name", "daemon", "main", "sender",
                  "lanes": [{"lane", "state", "since_ns"}],          # the open trace_state lanes this thread holds
                  "frames": [{"file", "line", "func", "code"?}],      # outermost first, innermost last
                  "native": [{"file", "line", "func"}]?}],            # py-spy's frames, when asked and permitted
     "truncated_threads", "native_state": "not_asked"|"ok"|"not_installed"|"refused"|"failed", "native_message",
     "flight_recorder"?: {"state": "ok"|"no_torch"|"not_initialized"|"off"|"failed", "message", "rank"?,
                          "groups": {pg id: {"name", "enqueued", "started", "completed"}},   # sequence numbers
                          "entries": [{"seq", "p2p_seq", "p2p", "op", "pg", "state", "retired", "in_sizes",
                                       "out_sizes", "dtypes", "created_ns"}]}}              # the newest, oldest first

Nothing in a request is executed: it only says which processes answer and whether to ask py-spy. Stacks are read
by the process itself (`sys._current_frames`); file paths are as the process reports them. Every list and string
is bounded both when built (client/control/stacks/answers.py) and when read (`decode_stack_report`, the server).
"""

from __future__ import annotations

from .control import Selector, SelectsProcesses, request_id
from .limits import INT64_MAX, MAX_LANE, MAX_SPAN_NAME, MAX_TS_S
from .profiles import CLIENT_HEARTBEAT_S
from .values import ItemError, TextCleaner, finite_float

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ROUTE_STACKS = "/api/v1/stacks"
MAX_STACK_THREADS = 256  # threads reported per process (vLLM, Ray workers: dozens; more are counted, not listed)
MAX_STACK_FRAMES = 128  # frames per thread, the innermost kept (a deeper stack says how many were cut)
MAX_STACK_REPORT_BYTES = 1024 * 1024  # one process's report on the wire
# one process's report as kept (estimated from what is decoded: a report of empty frames is small on the wire and
# large decoded); past it, the frames of threads that hold no lane and are not the main thread are cut, innermost kept
MAX_STACK_REPORT_KEPT_BYTES = 2 * 1024 * 1024
MAX_HELD_LANES = 64  # lanes one process holds (its own lanes; a lane is held by one thread)
FRAME_OVERHEAD_BYTES = 120  # a kept frame's dict and numbers, beside its strings
MAX_FRAME_FILE = 512
MAX_FRAME_FUNC = 256
MAX_FRAME_CODE = 240
CODE_FRAMES = 4  # source lines sent for the innermost frames of each thread (what a reader looks at)
DEFAULT_STACK_DEADLINE_S = CLIENT_HEARTBEAT_S + 4.0  # an idle process hears at its heartbeat, then answers
MAX_STACK_DEADLINE_S = 300.0
MAX_WAIT_S = 40.0  # past its deadline, a snapshot waits on for processes that hold a state and still beat, this long
NATIVE_STATES = ("not_asked", "ok", "not_installed", "refused", "failed")
FR_STATES = ("ok", "no_torch", "not_initialized", "off", "failed")
MAX_FR_ENTRIES = 64  # flight-recorder entries per process, the newest
MAX_FR_GROUPS = 64  # process groups per process
MAX_FR_TENSORS = 4  # tensors described per entry
MAX_FR_DIMS = 8  # dimensions per tensor


class StackRequest(SelectsProcesses):
    """Which processes of a run answer (no selector: all of them), whether they add py-spy's native frames, and
    until when the request is listed (epoch s)."""

    __slots__ = ("id", "selector", "native", "expires_at")

    def __init__(self, id: str, lanes: tuple[str, ...] = (), roles: tuple[str, ...] = (), ranks: tuple[int, ...] = (),
                 native: bool = False, expires_at: float = 0.0) -> None:
        self.id = id
        self.selector = Selector(lanes, roles, ranks)
        self.native = native
        self.expires_at = expires_at

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, **self.selector.to_wire(), "native": self.native, "expires_at": self.expires_at}

    @classmethod
    def from_wire(cls, d: Any) -> StackRequest:
        """The one validation of a request (the server's book builds it with this, a client reads each entry of a
        reply with it); ValueError naming the problem otherwise."""
        if not isinstance(d, dict):
            raise ValueError("a stack request must be an object")
        rid = request_id(d, "stack request")
        selector = Selector.from_wire(d)
        try:
            expires_at = finite_float(d.get("expires_at", 0.0), "expires_at", 0.0, MAX_TS_S)
        except ItemError as exc:
            raise ValueError(str(exc)) from None
        return cls(rid, selector.lanes, selector.roles, selector.ranks, d.get("native") is True, expires_at)



def _int(v: Any, lo: int = 0, hi: int = INT64_MAX) -> int | None:
    if type(v) is float and v.is_integer():
        v = int(v)
    return v if type(v) is int and lo <= v <= hi else None


class _Cutter(TextCleaner):
    """Text from a report: cut to its bound rather than refused (a long path is still worth showing)."""

    __slots__ = ()

    def cut(self, x: Any, max_len: int, default: str = "?") -> str:
        return self.clean(x[:max_len]) if isinstance(x, str) and x else default


def _frames(raw: Any, strings: _Cutter, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise ValueError(f"{where} must be a list of frames")
    out = []
    for f in raw[-MAX_STACK_FRAMES:]:  # the innermost frames are the ones that say where a thread is
        if not isinstance(f, dict):
            raise ValueError(f"{where}: each frame must be an object with file, line and func")
        if not (isinstance(f.get("file"), str) and f["file"]) and not (isinstance(f.get("func"), str) and f["func"]):
            continue  # a frame that names nothing says nothing (and would be kept as much as one that does)
        frame: dict[str, Any] = {"file": strings.cut(f.get("file"), MAX_FRAME_FILE),
                                 "line": _int(f.get("line"), 0, 2**31) or 0,
                                 "func": strings.cut(f.get("func"), MAX_FRAME_FUNC)}
        if isinstance(f.get("code"), str) and f["code"]:
            frame["code"] = strings.cut(f["code"], MAX_FRAME_CODE)
        out.append(frame)
    return out


def _seq(v: Any) -> int | None:
    return _int(v, 0, 2**62)


def _shapes(v: Any) -> list[list[int]]:
    if not isinstance(v, list):
        return []
    return [[d for d in (_int(x, 0, 2**62) for x in shape[:MAX_FR_DIMS]) if d is not None]
            for shape in v[:MAX_FR_TENSORS] if isinstance(shape, list)]


def _flight_recorder(raw: Any, strings: _Cutter) -> dict[str, Any] | None:
    """A process's flight-recorder evidence (client/control/stacks/flight_recorder.py), bounded; None if absent."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or raw.get("state") not in FR_STATES:
        raise ValueError(f"flight_recorder must be an object whose state is one of {', '.join(FR_STATES)}")
    out: dict[str, Any] = {"state": raw["state"], "message": strings.cut(raw.get("message"), 500, "")}
    if raw.get("rank") is not None:
        out["rank"] = _int(raw.get("rank"), 0, 2**31)
    if raw["state"] != "ok":
        return out
    groups: dict[Any, Any] = raw["groups"] if isinstance(raw.get("groups"), dict) else {}
    out["groups"] = {strings.cut(k, 64): {"name": strings.cut(g.get("name"), 128, ""), "enqueued": _seq(g.get(
        "enqueued")), "started": _seq(g.get("started")), "completed": _seq(g.get("completed"))}
        for k, g in list(groups.items())[:MAX_FR_GROUPS] if isinstance(g, dict)}
    entries: list[Any] = raw["entries"] if isinstance(raw.get("entries"), list) else []
    out["entries"] = [{"seq": _seq(e.get("seq")), "p2p_seq": _seq(e.get("p2p_seq")), "p2p": e.get("p2p") is True,
                       "op": strings.cut(e.get("op"), 128), "pg": strings.cut(str(e.get("pg", "0")), 64),
                       "state": strings.cut(e.get("state"), 32), "retired": e.get("retired") is True,
                       "in_sizes": _shapes(e.get("in_sizes")), "out_sizes": _shapes(e.get("out_sizes")),
                       "dtypes": [strings.cut(d, 32) for d in (e.get("dtypes") or [])[:MAX_FR_TENSORS]
                                  if isinstance(d, str)] if isinstance(e.get("dtypes"), list) else [],
                       "created_ns": _int(e.get("created_ns")) or 0}
                      for e in entries[-MAX_FR_ENTRIES:] if isinstance(e, dict)]
    return out


def decode_stack_report(body: Any) -> dict[str, Any]:
    """What one process answered, checked and bounded (strings cut, lists capped, numbers in range); ValueError
    naming the first problem otherwise. The result is what the server stores."""
    if not isinstance(body, dict):
        raise ValueError("a stack report must be a JSON object")
    strings = _Cutter()
    proc = body.get("process")
    pid = _int(proc.get("pid")) if isinstance(proc, dict) else None
    if not isinstance(proc, dict) or not isinstance(proc.get("host"), str) or pid is None:
        raise ValueError("process must be an object with host (string) and pid (non-negative integer)")
    rank = proc.get("rank")
    if rank is not None and _int(rank, 0, 2**31) is None:
        raise ValueError(f"process rank must be an integer in [0, 2**31), found {str(rank)[:40]!r}")

    def texts(v: Any, n: int, max_len: int) -> list[str]:
        return [strings.cut(x, max_len) for x in v[:n] if isinstance(x, str) and x] if isinstance(v, list) else []

    threads_in = body.get("threads")
    if not isinstance(threads_in, list) or not threads_in:
        raise ValueError("threads must be a non-empty list (every process has at least one thread)")
    threads = []
    held_lanes: set[str] = set()  # a lane is held by one thread of the process, and a process holds a few
    has_main = False  # a process has one main thread (the first that says so)
    for i, t in enumerate(threads_in[:MAX_STACK_THREADS]):
        if not isinstance(t, dict):
            raise ValueError(f"threads[{i}] must be an object")
        lanes = []
        for held in (t.get("lanes") or [])[:MAX_HELD_LANES] if isinstance(t.get("lanes"), list) else []:
            if isinstance(held, dict) and isinstance(held.get("lane"), str) and held["lane"]:
                lane = strings.cut(held["lane"], MAX_LANE)
                if lane in held_lanes or len(held_lanes) >= MAX_HELD_LANES:
                    continue
                held_lanes.add(lane)
                lanes.append({"lane": lane, "state": strings.cut(held.get("state"), MAX_SPAN_NAME),
                              "since_ns": _int(held.get("since_ns")) or 0})
        main = t.get("main") is True and not has_main
        has_main = has_main or main
        thread: dict[str, Any] = {
            "id": _int(t.get("id"), 0, 2**64) or 0,
            "name": strings.cut(t.get("name"), 256),
            "daemon": t.get("daemon") is True, "main": main, "sender": t.get("sender") is True,
            "lanes": lanes,
            "frames": _frames(t.get("frames") or [], strings, f"threads[{i}].frames"),
            "cut_frames": _int(t.get("cut_frames"), 0, 2**31) or 0,
        }
        if t.get("native") is not None:
            thread["native"] = _frames(t["native"], strings, f"threads[{i}].native")
        threads.append(thread)
    kept = _fit(threads)
    native_state = body.get("native_state", "not_asked")
    if native_state not in NATIVE_STATES:
        raise ValueError(f"native_state must be one of {', '.join(NATIVE_STATES)}")
    step = body.get("step")
    cpu = body.get("cpu_s")
    recorder = _flight_recorder(body.get("flight_recorder"), strings)
    if recorder is not None:
        kept += 300 * len(recorder.get("entries", ())) + 200 * len(recorder.get("groups", ()))
    return {
        "process": {"host": strings.cut(proc["host"], 128), "pid": pid,
                    "rank": _int(rank, 0, 2**31) if rank is not None else None,
                    "lanes": texts(proc.get("lanes"), 64, MAX_LANE), "roles": texts(proc.get("roles"), 16, 128)},
        "taken_ns": _int(body.get("taken_ns")) or 0,
        "step": _int(step) if step is not None else None,
        "rss_bytes": _int(body.get("rss_bytes")),
        "cpu_s": float(cpu) if isinstance(cpu, (int, float)) and not isinstance(cpu, bool) and 0 <= cpu < 1e12
        else None,
        "threads": threads,
        "truncated_threads": (_int(body.get("truncated_threads"), 0, 2**31) or 0)
        + max(0, len(threads_in) - MAX_STACK_THREADS),
        "native_state": native_state,
        "native_message": strings.cut(body.get("native_message"), 1000, ""),
        **({"flight_recorder": recorder} if recorder is not None else {}),
        "kept_bytes": kept,
    }


def thread_bytes(t: dict[str, Any]) -> int:
    """What one decoded thread holds, estimated (its strings, and an overhead per frame, lane and thread)."""
    frames = [*t["frames"], *t.get("native", ())]
    return 200 + len(t["name"]) + 150 * len(t["lanes"]) + sum(
        FRAME_OVERHEAD_BYTES + len(f["file"]) + len(f["func"]) + len(f.get("code", "")) for f in frames)


def _fit(threads: list[dict[str, Any]]) -> int:
    """Cut the frames of the threads that say least (no lane held, not the main thread; the last first) until the
    report fits MAX_STACK_REPORT_KEPT_BYTES, each cut counted in the thread's `cut_frames`; the bytes kept."""
    sizes = [thread_bytes(t) for t in threads]
    total = sum(sizes)
    for i in reversed(range(len(threads))):
        if total <= MAX_STACK_REPORT_KEPT_BYTES:
            break
        t = threads[i]
        if t["lanes"] or t["main"]:
            continue
        t["cut_frames"] += max(0, len(t["frames"]) - 1)
        t["frames"] = t["frames"][-1:]  # where it is, innermost, still said
        t.pop("native", None)
        total += thread_bytes(t) - sizes[i]
    return total
