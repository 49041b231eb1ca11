"""Profile control: the request, what a process reports, the steps grammar, and their defaults, stated once.

--------------------------------------------------------------------------- profile requests
Control rides on replies: every ingest answer of a server that profiles carries `profile`, the list of
the client's run's active requests (ProfileRequest.to_wire); a client matches them to its identity
(lanes, role, rank) and reports back on ROUTE_PROFILES/<id>/status, uploading its trace in chunks to
ROUTE_PROFILES/<id>/upload/<file name>?offset=&total= (409 with the server's `size` to resume elsewhere).
"""

from __future__ import annotations

from .control import MAX_SELECTORS, Selector, SelectsProcesses, request_id
from .limits import INT64_MAX, MAX_EXACT_INT, MAX_LABEL_VALUE, MAX_SPAN_NAME, MAX_TS_S
from .values import ItemError, TextCleaner, finite_float, short_repr

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

ROUTE_PROFILES = "/api/v1/profiles"
PROFILE_TOOLS = ("torch",)
PROFILE_ACTIVITIES = ("cpu", "cuda")
MAX_PROFILE_STEPS = 8  # steps in one window
MAX_PROFILE_WINDOW_S = 900.0  # a window still open after this is closed by the client
DEFAULT_PROFILE_BYTES = 256 * 2**20  # gzip'd trace size cap per process
MAX_PROFILE_BYTES = 2 * 2**30
PROFILE_CHUNK_BYTES = 2**20
MAX_PROFILE_CHUNK_BYTES = 8 * 2**20
MAX_PROFILE_SELECTORS = MAX_SELECTORS  # (its name in earlier releases)
MAX_PROFILE_TTL_S = 7 * 86400.0
MAX_RANK = 2**31
# The defaults of a request, for every place that offers one (the CLI's flags, the HTTP model, the server's book)
DEFAULT_PROFILE_TOOL = "torch"
DEFAULT_PROFILE_ACTIVITIES = PROFILE_ACTIVITIES
DEFAULT_PROFILE_WINDOW_S = 300.0
DEFAULT_PROFILE_TTL_S = 3600.0  # a request no process has taken by then expires
CLIENT_HEARTBEAT_S = 10.0  # an idle client still sends this often: the longest a process may take to hear a request
# what a process reports about a request (status route); terminal ones end its part of the request
PROCESS_STATES = (
    "armed",
    "profiling",
    "uploading",
    "uploaded",
    "failed",
    "unsupported",
    "cancelled",
    "busy",
    "expired",
)
PROCESS_TERMINAL = ("uploaded", "failed", "unsupported", "cancelled", "busy", "expired")


def parse_steps(text: str) -> tuple[int, int]:
    """`120` or `120-121` as (first, last), the one grammar of profile steps (the CLI, the route, the UI's field);
    ValueError naming the problem otherwise. No `re`: the client imports this module."""
    first_s, sep, last_s = text.strip().partition("-")
    first_s, last_s = first_s.strip(), last_s.strip()
    if not (first_s.isdigit() and first_s.isascii() and len(first_s) <= 15) or \
            (sep and not (last_s.isdigit() and last_s.isascii() and len(last_s) <= 15)):
        raise ValueError(f"steps {text[:40]!r}: give one step (120) or a range (120-121)")
    first = int(first_s)
    return first, int(last_s) if sep else first


class ProfileRequest(SelectsProcesses):
    """What to profile: steps first..last of one run (or, with `stage`, that state of one step), on the processes
    whose lanes, role or rank match (no selector: every process of the run), with which options, until when."""

    __slots__ = ("id", "project", "experiment_name", "first_step", "last_step", "selector", "tool",
                 "activities", "memory", "stack", "expires_at", "max_window_s", "max_bytes", "stage")

    def __init__(self, id: str, project: str, experiment_name: str, first_step: int, last_step: int,
                 lanes: tuple[str, ...] = (), roles: tuple[str, ...] = (), ranks: tuple[int, ...] = (),
                 tool: str = DEFAULT_PROFILE_TOOL, activities: tuple[str, ...] = DEFAULT_PROFILE_ACTIVITIES,
                 memory: bool = False, stack: bool = False, expires_at: float = 0.0,
                 max_window_s: float = DEFAULT_PROFILE_WINDOW_S,
                 max_bytes: int = DEFAULT_PROFILE_BYTES, stage: str = "") -> None:
        self.id = id
        self.project = project
        self.experiment_name = experiment_name
        self.first_step = first_step
        self.last_step = last_step
        self.selector = Selector(lanes, roles, ranks)
        self.tool = tool
        self.activities = activities
        self.memory = memory
        self.stack = stack
        self.expires_at = expires_at
        self.max_window_s = max_window_s
        self.max_bytes = max_bytes
        self.stage = stage  # "" = the whole step(s); else the window is that state (trace_state name) of the step

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project": self.project,
            "experiment_name": self.experiment_name,
            "steps": [self.first_step, self.last_step],
            **self.selector.to_wire(),
            "tool": self.tool,
            "activities": list(self.activities),
            "memory": self.memory,
            "stack": self.stack,
            "expires_at": self.expires_at,
            "max_window_s": self.max_window_s,
            "max_bytes": self.max_bytes,
            "stage": self.stage,
        }

    @classmethod
    def from_wire(cls, d: Any) -> ProfileRequest:
        """The one validation of a request, wherever it comes from (the server's book checks a new request with
        it, a client each entry of a reply); ValueError naming the problem otherwise."""
        if not isinstance(d, dict):
            raise ValueError("a profile request must be an object")
        rid = request_id(d, "profile request")
        steps = d.get("steps")
        if not (
            isinstance(steps, list)
            and len(steps) == 2
            and all(type(s) is int and 0 <= s <= MAX_EXACT_INT for s in steps)
            and steps[0] <= steps[1]
            and steps[1] - steps[0] < MAX_PROFILE_STEPS
        ):
            said = f"{steps[0]}-{steps[1]}" if isinstance(steps, list) and len(steps) == 2 else short_repr(steps)
            raise ValueError(f"steps {said}: give first <= last (whole steps), at most "
                             f"{MAX_PROFILE_STEPS} steps (a profile of more steps is too large to be useful)")
        strings = TextCleaner()
        selector = Selector.from_wire(d)
        activities = d.get("activities")
        if not isinstance(activities, list) or not activities or len(activities) > len(PROFILE_ACTIVITIES) or \
                any(a not in PROFILE_ACTIVITIES for a in activities):
            raise ValueError(f"activities must be some of {', '.join(PROFILE_ACTIVITIES)}")
        tool = d.get("tool", DEFAULT_PROFILE_TOOL)
        if tool not in PROFILE_TOOLS:
            raise ValueError(f"tool must be one of {', '.join(PROFILE_TOOLS)}")
        try:
            expires_at = finite_float(d.get("expires_at", 0.0), "expires_at", 0.0, MAX_TS_S)
            window = finite_float(
                d.get("max_window_s", DEFAULT_PROFILE_WINDOW_S), "max_window_s", 1.0, MAX_PROFILE_WINDOW_S
            )
            max_bytes = finite_float(d.get("max_bytes", DEFAULT_PROFILE_BYTES), "max_bytes", 1.0, MAX_PROFILE_BYTES)
            project = strings.text(d.get("project"), "project", MAX_LABEL_VALUE)
            experiment = strings.text(d.get("experiment_name"), "experiment_name", MAX_LABEL_VALUE)
            stage = strings.text(d.get("stage") or "", "stage", MAX_SPAN_NAME, empty_ok=True)
        except ItemError as exc:
            raise ValueError(str(exc)) from None
        if stage and steps[0] != steps[1]:
            raise ValueError(f"stage {stage[:60]!r}: a stage is profiled in one step; give one step, not "
                             f"{steps[0]}-{steps[1]}")
        return cls(rid, project, experiment, steps[0], steps[1], selector.lanes, selector.roles, selector.ranks, tool,
                   tuple(activities), d.get("memory") is True, d.get("stack") is True, expires_at, window,
                   int(max_bytes), stage)



def decode_process_report(body: dict[str, Any], file_name_ok: Callable[[str], bool]) -> tuple[str, dict[str, Any]]:
    """What one process says of a profile request: its key (host:pid) and entry; ValueError naming the problem."""
    state = body.get("state")
    if state not in PROCESS_STATES:
        raise ValueError(f"state must be one of {', '.join(PROCESS_STATES)}, found {str(state)[:40]!r}")
    proc = body.get("process")
    pid = whole_number(proc.get("pid")) if isinstance(proc, dict) else None
    if not isinstance(proc, dict) or not isinstance(proc.get("host"), str) or pid is None or not 0 <= pid <= INT64_MAX:
        raise ValueError("process must be an object with host (string) and pid (non-negative integer)")
    rank = whole_number(proc.get("rank"))
    if proc.get("rank") is not None and not (rank is not None and 0 <= rank < MAX_RANK):
        raise ValueError(f"process rank must be an integer in [0, {MAX_RANK}), found {str(proc.get('rank'))[:40]!r}")
    entry: dict[str, Any] = {
        "host": proc["host"][:128],
        "pid": pid,
        "rank": rank,
        "lanes": [str(x)[:256] for x in proc.get("lanes", [])[:64]] if isinstance(proc.get("lanes"), list) else [],
        "roles": [str(x)[:128] for x in proc.get("roles", [])[:16]] if isinstance(proc.get("roles"), list) else [],
        "state": state,
        "message": str(body.get("message") or "")[:2000],
    }
    if body.get("window") is not None:
        entry["window"] = profile_window(body["window"])
    if isinstance(body.get("file"), str) and file_name_ok(body["file"]):
        entry["file"] = body["file"]
    return f"{entry['host']}:{pid}", entry


def whole_number(x: Any) -> int | None:
    """An integer as JSON may spell it (`7` or `7.0`); None for anything else."""
    if type(x) is int:
        return x
    if type(x) is float and x.is_integer() and abs(x) <= 2**63:
        return int(x)
    return None


def profile_window(w: Any) -> dict[str, Any]:
    """A profiling window as a process reports it: epoch nanoseconds start <= end, in int64, and at most a few
    steps; ValueError naming the problem otherwise."""
    start, end = (None, None) if not isinstance(w, dict) else (whole_number(w.get("start_ns")),
                                                                  whole_number(w.get("end_ns")))
    if start is None or end is None or not 0 <= start <= end <= INT64_MAX:
        raise ValueError("window must be an object with start_ns <= end_ns, both integers in [0, 2**63)")
    steps = w.get("steps")
    if steps is not None:
        steps = [whole_number(x) for x in steps] if isinstance(steps, list) and len(steps) <= MAX_PROFILE_STEPS \
            else [None]
        if not all(x is not None and 0 <= x <= MAX_EXACT_INT for x in steps):
            raise ValueError(f"window steps must be a list of at most {MAX_PROFILE_STEPS} step numbers")
    return {"start_ns": start, "end_ns": end, "steps": steps}
