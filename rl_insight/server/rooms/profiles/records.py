"""A profile request as the book keeps it, stores it (`request.json` and a process journal, or the fleet's shared
record) and serves it: one typed record, so every read and write of a field is checked (mypy) against what the
record holds.

Invariants: the stored form is the record itself (JSON objects all the way down), so a request written by an older
server reads as one; `request` is the ProfileRequest's wire form (protocol/profiles.py), validated when the request
was made and never changed after; `processes` maps "host:pid" to what that process reported last (a late report
never reopens a finished one) and `files` maps a trace's name to its upload's progress, the two maps a fleet's
servers fill row by row (server/fleet/shared_book.py); `unknown_run` marks a request made before its run sent data
(swept a day after it expired when the run never came), `passed` one whose first step ended before any process
took it.
"""

from typing import Any, Literal

from typing_extensions import NotRequired, TypedDict

RequestState = Literal["pending", "running", "done", "failed", "cancelled", "expired"]


class RequestWire(TypedDict):
    """ProfileRequest.to_wire()'s shape."""

    id: str
    project: str
    experiment_name: str
    steps: list[int]  # [first, last]
    lanes: list[str]
    roles: list[str]
    ranks: list[int]
    tool: str
    activities: list[str]
    memory: bool
    stack: bool
    expires_at: float
    max_window_s: float
    max_bytes: int
    stage: str


class ProcessEntry(TypedDict):
    """What one process reported last (protocol/profiles.decode_process_report), and when."""

    host: str
    pid: int
    rank: int | None
    lanes: list[str]
    roles: list[str]
    state: str
    message: str
    updated_at: NotRequired[float]
    window: NotRequired[dict[str, Any]]  # start_ns, end_ns, steps of its profiling window
    file: NotRequired[str]  # the trace it uploads


class FileEntry(TypedDict):
    """An uploaded trace: bytes received of its declared total."""

    bytes: int
    total: int
    complete: bool
    updated_at: float


class ProfileRecord(TypedDict):
    request: RequestWire
    created_at: float
    origin: str  # api, ui, auto (the stall watch), upload (traces a job wrote itself)
    cancelled_at: float | None
    processes: dict[str, ProcessEntry]
    files: dict[str, FileEntry]
    analysis: dict[str, Any]  # {"state": none|pending|running|done|failed, ...} (analysis.py)
    unknown_run: NotRequired[bool]
    passed: NotRequired[dict[str, Any]]  # at, message


class ProfileView(ProfileRecord):
    """A request as the API serves it (ProfileBook.describe): the record, its id and its state now."""

    id: str
    state: RequestState


class ProfileList(TypedDict):
    profiles: list[ProfileView]
    count: int


def run_of(rec: ProfileRecord) -> tuple[str, str]:
    return rec["request"]["project"], rec["request"]["experiment_name"]


class ProfileProcessReported(TypedDict):
    """One process's report on a profile request: its entry and the request's state (never the whole request)."""

    id: str
    state: str
    process: ProcessEntry


class ChunkStored(TypedDict):
    size: int  # bytes of the file the server holds now
    complete: bool
