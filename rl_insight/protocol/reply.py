"""The ingest reply: what every answer to a batch says, built by the server and read by the client, here only.

Control rides on replies (a client never polls): `RunControl` is the part of a reply about the client's run
(its active profile requests and its step clock); anything a later feature asks of processes goes there.

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

MAX_REQUESTS_READ = 64  # profile requests a client considers per reply (a server lists a run's active ones)


class RunControl:
    """What a reply asks of the processes of one run. `profile` None: the server does not profile (no list in
    the reply); a list is authoritative: a request missing from it is cancelled or over. `stacks`: the run's
    pending stack snapshots (each answered once per process; empty when none)."""

    __slots__ = ("profile", "run_step", "run_step_at", "stacks")

    def __init__(self, profile: list[ProfileRequest] | None = None, run_step: int | None = None,
                 run_step_at: float = 0.0, stacks: list[StackRequest] | None = None) -> None:
        self.profile = profile
        self.stacks = stacks or []
        self.run_step = run_step  # the run's step clock, for processes that do not log the step themselves
        self.run_step_at = run_step_at  # when the server saw that clock move (epoch s, the server's clock)

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.profile is not None:
            out["profile"] = [r.to_wire() for r in self.profile]
        if self.stacks:
            out["stacks"] = [r.to_wire() for r in self.stacks]
        if self.run_step is not None:
            out["run_step"], out["run_step_at"] = self.run_step, self.run_step_at
        return out

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> RunControl:
        profile: list[ProfileRequest] | None = None
        listed = body.get("profile")
        if isinstance(listed, list):
            profile = []
            for entry in listed[:MAX_REQUESTS_READ]:
                try:
                    profile.append(ProfileRequest.from_wire(entry))
                except ValueError:
                    continue  # one malformed entry never hides the others
        stacks: list[StackRequest] = []
        asked = body.get("stacks")
        for entry in asked[:MAX_REQUESTS_READ] if isinstance(asked, list) else ():
            try:
                stacks.append(StackRequest.from_wire(entry))
            except ValueError:
                continue
        step = body.get("run_step")
        at = body.get("run_step_at")
        if type(step) is int and step >= 0:
            return cls(profile, step, float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0,
                       stacks)
        return cls(profile, stacks=stacks)


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
