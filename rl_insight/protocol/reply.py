"""The ingest reply: what every answer to a batch says, built by the server and read by the client, here only.

Control rides on replies (a client never polls): `RunControl` is the part of a reply about the client's run
(every kind's open control requests, `CONTROL_KINDS`, and its step clock); anything a later feature asks of
processes is a new kind there.

Encoding is plain JSON objects (the wire is unchanged from the dict the server used to write by hand)::

    {"accepted", "rejected", "errors": [...], "boot_id", "replaced_strings", "protocols": [1, 2],
     "profile": [ProfileRequest.to_wire(), ...]?, "stacks": [StackRequest.to_wire(), ...]?,
     "run_step"?, "run_step_at"?, "detail"?}

`IngestReply.from_wire` never raises: a client reads what it understands of any server's answer (an older
server sends no `profile`, a newer one may send more keys) and treats the rest as absent.
"""

from __future__ import annotations

from .profiles import ProfileRequest
from .stacks import StackRequest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_REQUESTS_READ = 64  # requests of one kind a client considers per reply (a server lists a run's active ones)


class ControlKind:
    """One kind of control request as replies carry it: its key in the reply, its class (protocol/control.py says
    what a class has), and whether an empty list is sent (profile: an empty list says "none open here" and a
    missing one "this server does not profile"; stacks: nothing pending is said by no list)."""

    __slots__ = ("key", "request", "listed_when_empty")

    def __init__(self, key: str, request: Any, listed_when_empty: bool) -> None:
        self.key, self.request, self.listed_when_empty = key, request, listed_when_empty


# Every kind of control request: a new kind is its request class and one entry here (and its folders on each side)
CONTROL_KINDS = (ControlKind("profile", ProfileRequest, True), ControlKind("stacks", StackRequest, False))


class RunControl:
    """What a reply asks of the processes of one run: each kind's open requests (`requests[key]`; None: the reply
    carried no list of that kind), and the run's step clock. A list is authoritative: a request missing from it is
    cancelled or over. `profile` and `stacks` read the two kinds of today (`stacks` is [] when none are pending)."""

    __slots__ = ("requests", "run_step", "run_step_at")

    def __init__(self, profile: list[ProfileRequest] | None = None, run_step: int | None = None,
                 run_step_at: float = 0.0, stacks: list[StackRequest] | None = None, *,
                 requests: dict[str, list[Any] | None] | None = None) -> None:
        self.requests: dict[str, list[Any] | None] = {"profile": profile, "stacks": stacks} if requests is None \
            else requests
        self.run_step = run_step  # the run's step clock, for processes that do not log the step themselves
        self.run_step_at = run_step_at  # when the server saw that clock move (epoch s, the server's clock)

    @property
    def profile(self) -> list[ProfileRequest] | None:
        return self.requests.get("profile")

    @property
    def stacks(self) -> list[StackRequest]:
        return self.requests.get("stacks") or []

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind in CONTROL_KINDS:
            listed = self.requests.get(kind.key)
            if listed is not None and (listed or kind.listed_when_empty):
                out[kind.key] = [r.to_wire() for r in listed]
        if self.run_step is not None:
            out["run_step"], out["run_step_at"] = self.run_step, self.run_step_at
        return out

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> RunControl:
        requests: dict[str, list[Any] | None] = {}
        for kind in CONTROL_KINDS:
            listed = body.get(kind.key)
            if not isinstance(listed, list):
                requests[kind.key] = None
                continue
            read = requests[kind.key] = []
            for entry in listed[:MAX_REQUESTS_READ]:
                try:
                    read.append(kind.request.from_wire(entry))
                except ValueError:
                    continue  # one malformed entry never hides the others
        step = body.get("run_step")
        at = body.get("run_step_at")
        if type(step) is int and step >= 0:
            return cls(None, step, float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0,
                       requests=requests)
        return cls(requests=requests)


class IngestReply:
    """The answer to one batch. `rejected` items are listed in `errors` (the first MAX_ERRORS_REPORTED);
    `boot_id` changes when the server restarted (the client then resends what the server lost); `protocols`
    are the batch versions this server accepts; `detail` is set when nothing was accepted (HTTP 422)."""

    __slots__ = ("accepted", "rejected", "errors", "boot_id", "replaced_strings", "protocols", "control", "detail")

    def __init__(self, accepted: int = 0, rejected: int = 0, errors: list[dict[str, Any]] | None = None,
                 boot_id: str | None = None, replaced_strings: int = 0, protocols: tuple[int, ...] = (1,),
                 control: RunControl | None = None, detail: str | None = None) -> None:
        self.accepted = accepted
        self.rejected = rejected
        self.errors = errors or []
        self.boot_id = boot_id
        self.replaced_strings = replaced_strings
        self.protocols = protocols
        self.control = control or RunControl()
        self.detail = detail

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"accepted": self.accepted, "rejected": self.rejected, "errors": self.errors,
                               "boot_id": self.boot_id, "replaced_strings": self.replaced_strings,
                               "protocols": list(self.protocols), **self.control.to_wire()}
        if self.detail is not None:
            out["detail"] = self.detail
        return out

    @classmethod
    def from_wire(cls, body: Any, sent: int = 0) -> IngestReply:
        """What a client reads of an answer to `sent` items; never raises. Counts outside what is possible
        (negative, or far more than was sent) read as 0: a confused server never corrupts the client's books."""
        if not isinstance(body, dict):
            return cls()

        def count(key: str) -> int:
            v = body.get(key, 0)
            return v if type(v) is int and 0 <= v <= sent + 1000 else 0

        errors = body.get("errors")
        protocols = body.get("protocols")
        boot = body.get("boot_id")
        detail = body.get("detail")
        return cls(count("accepted"), count("rejected"),
                   [e for e in errors[:8] if isinstance(e, dict)] if isinstance(errors, list) else [],
                   boot if isinstance(boot, str) else None, count("replaced_strings"),
                   tuple(v for v in protocols if type(v) is int) if isinstance(protocols, list) else (1,),
                   RunControl.from_wire(body), detail if isinstance(detail, str) else None)
