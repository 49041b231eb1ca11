"""This process as control requests select it and as its answers describe it: host, pid, rank, roles and the lanes
it has opened; and where it is, by its own step metric or else by the run's step clock the replies carry.

One object a process (client/delivery.py holds it), read by every kind of control request: a profile request and a
stack snapshot pick processes by the same identity (protocol/control.Selector), and a process that never profiles
still answers stacks as itself. Invariant: `lanes` only grows (bounded by MAX_PROCESS_LANES); `rank()` and `roles()`
are read when asked (torch.distributed may start after this process's first batch). Stdlib only.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from ...protocol import RunControl

MAX_PROCESS_LANES = 4096  # lanes remembered for --lanes matching (an agent loop makes one per trajectory)


class ThisProcess:
    def __init__(self, host: str, pid: int, own_step: Callable[[], int | float | None]) -> None:
        self.host = host
        self.pid = pid
        self._own_step = own_step  # the step this process logged last (None: it logs none)
        self.lanes: set[str] = set()
        self.run_step: int | None = None  # the run's step clock, from the replies
        self.run_step_at = 0.0  # when the server saw that clock move (epoch s, the server's clock)

    def note_lane(self, lane: str) -> None:
        """(the hot path) A lane this process opened a state in: what a request's `lanes` selects."""
        if lane not in self.lanes and len(self.lanes) < MAX_PROCESS_LANES:
            self.lanes.add(lane)

    def hear(self, control: RunControl) -> None:
        """(the sender thread) A reply's step clock for the run, when it carries one."""
        if control.run_step is not None:
            self.run_step_at = control.run_step_at
            self.run_step = control.run_step

    def rank(self) -> int | None:
        for var in ("RANK", "RL_INSIGHT_RANK"):
            v = os.environ.get(var, "")
            if v.isdigit():
                return int(v)
        dist = sys.modules.get("torch.distributed")  # never imported here: only read when the job has it
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except Exception:
            pass
        return None

    def roles(self) -> set[str]:
        out = {lane.split("/", 1)[0] for lane in list(self.lanes) if "/" in lane}
        role = os.environ.get("RL_INSIGHT_ROLE")
        if role:
            out.add(role)
        return out

    def step(self) -> int | None:
        """The step this process is in by its own step metric, else by the run's clock from the replies."""
        own = self._own_step()
        return int(own) if own is not None else self.run_step

    def selected_by(self, request: Any) -> bool:
        """Whether a control request (any kind: each has `matches`) picks this process."""
        return bool(request.matches(self.lanes, self.roles(), self.rank()))

    def describe(self) -> dict[str, Any]:
        """This process in a report (protocol: `process` of a profile status or a stack answer)."""
        return {"host": self.host, "pid": self.pid, "rank": self.rank(), "lanes": sorted(self.lanes)[:64],
                "roles": sorted(self.roles())[:16]}
