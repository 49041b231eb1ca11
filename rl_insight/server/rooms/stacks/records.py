"""A stack snapshot as the book keeps it, stores it (a JSON file, or the fleet's shared record) and serves it: one
typed record, so every read and write of a field is checked (mypy) against what the record holds.

Invariants: the stored form is the record itself (JSON objects all the way down), so a snapshot written by an older
server reads as one; `reports` maps "host:pid" to that process's answer (protocol/stacks.decode_stack_report) and is
the part a fleet's servers fill row by row (server/fleet/shared_book.py); the keys marked NotRequired appear when
the snapshot completes (`missing`, `completed_at`, and the summary's `units`, `groups`, `summary`, `moved`) or when
the server restarted while it was collected (`note`).
"""

from typing import Any, Literal, Optional

from typing_extensions import NotRequired, TypedDict

from ...live.clients import LiveProcess

SnapshotState = Literal["pending", "complete"]


class Moved(TypedDict):
    """Who moved since the run's previous snapshot (groups.moved)."""

    previous: str
    did_not_move: str
    moved: str
    still_count: int
    moved_count: int
    seconds: NotRequired[float]


class Collective(TypedDict):
    """The collective a verdict names: its operation, sequence number and process group (each null when unknown)."""

    op: str | None
    seq: int | None
    pg: str | None
    sizes: str | None


VerdictClass = Literal["dead_process", "unresponsive", "desync", "late_rank", "unfinished", "in_collective",
                       "not_collective", "slow_healthy", "not_stuck", "unknown"]

# A stuck run's verdict (rooms/stacks/verdict.py): its class, the culprit lanes and hosts, the collective, the RL
# phase and step, the evidence, what to check next, the snapshot it came from. (`class` is a keyword: functional form.)
Verdict = TypedDict("Verdict", {
    "class": VerdictClass,
    "culprits": list[str],
    "hosts": list[str],
    "collective": Optional[Collective],
    "phase": Optional[str],
    "step": Optional[int],
    "evidence": list[str],
    "next": list[str],
    "snapshot": Optional[str],
    "sentence": str,
})


class MissingProcess(LiveProcess):
    """A process the snapshot asked that did not answer: as it was asked, and whether it still beat at the end."""

    beating: NotRequired[bool]  # heard from after the snapshot was asked (alive, but could not answer)
    gone: NotRequired[bool]  # went silent before it could be asked (dropped from the live processes, no goodbye)


class _Snapshot(TypedDict):
    """What every form of a snapshot has: the stored record, its views in the API."""

    id: str
    project: str
    experiment_name: str
    run_id: int | None
    created_at: float
    deadline_at: float
    origin: str  # api, ui, auto (the stall watch)
    reason: str
    request: dict[str, Any]  # the StackRequest's wire form, as the replies list it
    state: SnapshotState
    note: NotRequired[str]
    completed_at: NotRequired[float]
    summary: NotRequired[str]
    moved: NotRequired[Moved]
    verdict: NotRequired[dict[str, Any]]  # (complete) rooms/stacks/verdict.decide: class, culprits, collective, …
    # (complete) the stall watch's latest look at the run: every lane within its usual time (True), stalled (False),
    # not judged yet (None); a run that is not stalled is never given a culprit
    lanes_usual: NotRequired[bool | None]


class StackSnapshot(_Snapshot):
    """The record the book keeps and stores."""

    expected: list[LiveProcess]
    reports: dict[str, dict[str, Any]]  # "host:pid" -> its answer
    missing: NotRequired[list[MissingProcess]]
    units: NotRequired[list[dict[str, Any]]]
    groups: NotRequired[list[dict[str, Any]]]


class SnapshotListed(_Snapshot):
    """A snapshot in a run's list (StackBook.list): how many answered of how many asked, without the detail."""

    answered: int
    expected_count: int


class SnapshotView(SnapshotListed):
    """One snapshot as the API serves it (StackBook.get): the detail, and each process's answer when asked."""

    expected: list[LiveProcess]
    missing: NotRequired[list[MissingProcess]]
    units: NotRequired[list[dict[str, Any]]]
    groups: NotRequired[list[dict[str, Any]]]
    reports: NotRequired[dict[str, dict[str, Any]]]  # (reports=true)


class VerdictAnswer(TypedDict):
    """GET /runs/{id}/verdict: the run's status (and why), and the verdict of its latest complete snapshot (null
    without one: take one)."""

    run_id: int
    status: str
    why: str | None
    verdict: Verdict | None
    snapshot: SnapshotListed | None


class SnapshotList(TypedDict):
    run_id: int
    snapshots: list[SnapshotListed]
    count: int


def run_of(snap: StackSnapshot) -> tuple[str, str]:
    return snap["project"], snap["experiment_name"]


def key_of(proc: LiveProcess) -> str:
    """The key a process's answer is kept under."""
    return f"{proc['host']}:{proc['pid']}"


class StackProcessReported(TypedDict):
    """One process's stacks, stored: the snapshot's state and the process's key (host:pid)."""

    id: str
    state: str
    process: str
