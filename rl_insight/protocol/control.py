"""What every control request shares: its id, and which processes of its run it asks (`Selector`), validated and
matched here once for every kind (profile requests, stack snapshots, and any later kind).

A control request is asked of a run by the CLI or the UI, rides on the ingest replies of that run's processes
(reply.py's `RunControl`, whose `CONTROL_KINDS` lists the kinds), is answered by the processes it selects and is
kept by the server (server/control/). Each kind is a class with `id`, `expires_at`, `selector`, `to_wire`,
`from_wire` (its one validation, raising ValueError that names the problem) and `matches`.

Stdlib only, no `re` (training processes import this).
"""

from __future__ import annotations

from .limits import INT64_MAX, MAX_ID, MAX_LABEL_VALUE, MAX_LANE
from .values import ItemError, TextCleaner

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

MAX_SELECTORS = 256  # lanes, roles or ranks one request names


def request_id(d: dict[str, Any], what: str) -> str:
    """A request's id from its wire form: 1-32 lowercase hex digits (ValueError otherwise)."""
    rid = d.get("id")
    if not isinstance(rid, str) or not 1 <= len(rid) <= MAX_ID or not all(c in "0123456789abcdef" for c in rid):
        raise ValueError(f"{what} id must be 1-32 lowercase hex digits")
    return rid


class Selector:
    """Which processes of a run a request asks: those with any of `lanes`, any of `roles` (`-` and `_` alike) or
    one of `ranks`; no selector at all asks every process. The same rule on both sides: a process decides whether
    it is asked (client/control/this_process.py), the server which live processes it expects to answer."""

    __slots__ = ("lanes", "roles", "ranks")

    def __init__(self, lanes: tuple[str, ...] = (), roles: tuple[str, ...] = (), ranks: tuple[int, ...] = ()) -> None:
        self.lanes = lanes
        self.roles = roles
        self.ranks = ranks

    def __bool__(self) -> bool:
        """Whether it names anything (an empty selector asks every process)."""
        return bool(self.lanes or self.roles or self.ranks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and (self.lanes, self.roles, self.ranks) == (other.lanes, other.roles,
                                                                                          other.ranks)

    def __hash__(self) -> int:
        return hash((self.lanes, self.roles, self.ranks))

    def picks(self, lanes: Iterable[str], roles: Iterable[str], rank: int | None) -> bool:
        """Whether a process with these lanes, roles and rank is asked."""
        if not self:
            return True
        norm = {r.replace("-", "_") for r in roles}
        return bool(set(self.lanes) & set(lanes)) or any(r.replace("-", "_") in norm for r in self.roles) or \
            (rank is not None and rank in self.ranks)

    def describe(self) -> str:
        """In words, for messages ("lanes rollout/0 or ranks 3", "every process")."""
        said = [f"{what} {', '.join(map(str, v))}" for what, v in
                (("lanes", self.lanes), ("roles", self.roles), ("ranks", self.ranks)) if v]
        return " or ".join(said) or "every process"

    def to_wire(self) -> dict[str, Any]:
        return {"lanes": list(self.lanes), "roles": list(self.roles), "ranks": list(self.ranks)}

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Selector:
        """The one validation of a selector, read from a request's wire form (its `lanes`, `roles`, `ranks`);
        ValueError naming the problem."""
        strings = TextCleaner()

        def texts(key: str, max_len: int) -> tuple[str, ...]:
            v = d.get(key) or []
            if not isinstance(v, list) or len(v) > MAX_SELECTORS:
                raise ValueError(f"{key} must be a list of at most {MAX_SELECTORS}")
            return tuple(strings.text(x, key, max_len) for x in v)

        ranks = d.get("ranks") or []
        if not isinstance(ranks, list) or len(ranks) > MAX_SELECTORS or \
                not all(type(r) is int and 0 <= r <= INT64_MAX for r in ranks):
            raise ValueError("ranks must be a list of non-negative integers")
        try:
            return cls(texts("lanes", MAX_LANE), texts("roles", MAX_LABEL_VALUE), tuple(ranks))
        except ItemError as exc:
            raise ValueError(str(exc)) from None


class SelectsProcesses:
    """What every kind of request has of its `Selector`: the lanes, roles and ranks it names, and whether it asks
    a process (a kind's class sets `selector` in its constructor)."""

    __slots__ = ()
    selector: Selector

    @property
    def lanes(self) -> tuple[str, ...]:
        return self.selector.lanes

    @property
    def roles(self) -> tuple[str, ...]:
        return self.selector.roles

    @property
    def ranks(self) -> tuple[int, ...]:
        return self.selector.ranks

    def matches(self, lanes: Iterable[str], roles: Iterable[str], rank: int | None) -> bool:
        """Whether a process with these lanes, roles and rank is asked."""
        return self.selector.picks(lanes, roles, rank)
