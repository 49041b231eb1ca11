"""`trace_state` lanes: one top-level state per lane, same-name overlaps merged, nesting kept.

Semantics (upstream's, plus two fixes):

* A lane (default: the process id) holds at most one top-level state. The first entrant opens it
  and a *start event* is sent at once, so the server knows about a state that has not ended yet.
* Entrants with the same name while it is open join it (hundreds of concurrent `vllm_generate`
  coroutines on `replica_3` become one busy interval); the last one out closes it.
* Entrants with a different name are not dropped (upstream drops them): each becomes a child span
  of the lane's state, e.g. `actor_update` inside `train_batch` on `rank_0`.

The table lock is held only for dict updates, never across the `with` body, so it is safe for
threads and for coroutines that `await` inside the block.
"""

from __future__ import annotations

import threading
from threading import get_ident
from time import time_ns

from .batching import _SPAN, _SPAN_START
from .delivery import Delivery

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal

_TOP, _MERGED, _CHILD = 0, 1, 2


class LaneTable:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lanes: dict[str, _Lane] = {}

    def reset(self) -> None:
        """Forget open lanes; blocks still open exit without emitting (identity check below)."""
        with self.lock:
            self.lanes = {}

    def open_starts(self) -> list[tuple]:
        """The start events of the states open now, as queued: announced again to a restarted server, which
        otherwise closes states of the previous boot that nobody claims (their process died meanwhile)."""
        with self.lock:
            return [
                (
                    _SPAN_START,
                    lane.span_id,
                    lane.trace_id,
                    None,
                    lane.name,
                    lane_id,
                    lane.start_ns,
                    None,
                    lane.attrs,
                    "state",
                )
                for lane_id, lane in self.lanes.items()
            ]

    def holders(self) -> list[tuple[str, str, int, int]]:
        """(lane, state, since ns, ident of the thread that opened it) of each open state: a stack snapshot marks
        which thread holds which lane (client/control/stacks/answers.py)."""
        with self.lock:
            return [(lane_id, lane.name, lane.start_ns, lane.thread) for lane_id, lane in self.lanes.items()]


class _Lane:
    __slots__ = ("name", "count", "start_ns", "span_id", "trace_id", "attrs", "thread")

    def __init__(self, name: str, start_ns: int, span_id: int, trace_id: int, attrs: dict) -> None:
        self.thread = get_ident()  # the thread that opened the state (an asyncio lane: its event loop's)
        self.name = name
        self.count = 1
        self.start_ns = start_ns
        self.span_id = span_id
        self.trace_id = trace_id
        self.attrs = attrs


# a state's attributes without labels, made once: by lane, then name (two look-ups cost less than a tuple key's
# making and hashing, on every state)
_PLAIN_ATTRS: dict[str, dict[str, dict[str, Any]]] = {}
_MAX_PLAIN_ATTRS = 4096
_plain_attrs_count = 0


def _state_attrs(name: str, lane_id: str, labels: dict) -> dict[str, Any]:
    # Forced keys last: callers cannot override them (upstream behaviour). Without labels (the usual call) the same
    # read-only dict for a name and lane each time: nothing downstream changes a span's attributes (batching.py reads
    # them; protocol 2 even sends one object once per batch).
    if not labels:
        by_name = _PLAIN_ATTRS.get(lane_id)
        attrs = by_name.get(name) if by_name is not None else None
        if attrs is None:
            attrs = {"monitor.trace_segment": "state_interval", "state_name": name, "state_lane_id": lane_id}
            global _plain_attrs_count
            if _plain_attrs_count < _MAX_PLAIN_ATTRS:
                _plain_attrs_count += 1
                _PLAIN_ATTRS.setdefault(lane_id, {})[name] = attrs
        return attrs
    attrs = dict(labels)
    attrs["monitor.trace_segment"] = "state_interval"
    attrs["state_name"] = name
    attrs["state_lane_id"] = lane_id
    return attrs


def _decorate(make_block: Any, func: Any) -> Any:
    """`@trace_state(...)` on a sync or async function: a fresh block per call (the block is single-use)."""
    import functools
    import inspect

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            async with make_block():
                return await func(*args, **kwargs)

        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with make_block():
            return func(*args, **kwargs)

    return wrapper


class StateBlock:
    """The context manager returned by `trace_state` when monitoring is enabled; also a decorator."""

    __slots__ = ("_exp", "_table", "_name", "_lane_id", "_labels", "_lane", "_role", "_start", "_rf")

    def __init__(self, exp: Delivery, table: LaneTable, name: str, lane_id: str, labels: dict) -> None:
        self._exp = exp
        self._table = table
        self._name = name
        self._lane_id = lane_id
        self._labels = labels

    def __enter__(self, is_async: bool = False) -> None:  # (one call: this is the hot path)
        now = time_ns()
        table, name, lane_id, exp = self._table, self._name, self._lane_id, self._exp
        with table.lock:
            lane = table.lanes.get(lane_id)
            if lane is None:
                sid, tid = exp.new_ids()
                lane = _Lane(name, now, sid, tid, _state_attrs(name, lane_id, self._labels))
                table.lanes[lane_id] = lane
                role = _TOP
            elif lane.name == name:
                lane.count += 1
                role = _MERGED
            else:
                role = _CHILD
        self._lane, self._role, self._start, self._rf = lane, role, now, None
        prof = exp.profiling
        if role == _TOP:  # its start event, queued here (the one place that does: a method call less per state)
            if lane_id not in exp.process.lanes:  # (a set look-up; the call only for a lane not noted yet)
                exp.process.note_lane(lane_id)  # this process's lanes: what a request's --lanes selects
            if prof.hot:
                prof.boundary(lane_id, name)  # a lane's first state (of a step): where a process without a step
                # clock starts
            q = exp.queue
            if len(q) >= exp.queue_max:
                exp.drop("queue_full")
            q.append((_SPAN_START, lane.span_id, lane.trace_id, None, name, lane_id, now, None, lane.attrs, "state"))
        if not prof.hot:  # (one attribute read when no profile is asked: the usual case)
            return
        if role == _CHILD:
            prof.boundary(lane_id, name)  # a nested state can open a stage profiling window
        if role != _MERGED and not is_async and prof.hot:
            # inside a profiling window: the state in the trace too (not for `async with`: coroutines interleave on
            # one thread, and their ranges would not nest)
            self._rf = prof.annotate(name)

    def __exit__(self, *exc: object) -> Literal[False]:
        now = time_ns()
        lane, exp = self._lane, self._exp
        if self._rf is not None:
            exp.profiling.end_annotation(self._rf)
        if self._role == _CHILD:
            attrs = _state_attrs(self._name, self._lane_id, self._labels)
            exp.span(exp.new_span_id(), lane.trace_id, lane.span_id, self._name, self._lane_id,
                     self._start, now, attrs, "state_child")
            if exp.profiling.hot:
                exp.profiling.stage_end(self._lane_id, self._name)
            return False
        table = self._table
        with table.lock:
            lane.count -= 1
            emit = lane.count == 0 and table.lanes.get(self._lane_id) is lane
            if emit:
                del table.lanes[self._lane_id]
        if emit:
            if self._labels:  # (labels could name a turn source: the span budget decides, in Delivery.span)
                exp.span(lane.span_id, lane.trace_id, None, lane.name, self._lane_id, lane.start_ns, now, lane.attrs,
                         "state")
            else:  # a plain state, which the span budget always keeps: queued here, a method call less per state
                q = exp.queue
                if len(q) >= exp.queue_max:
                    exp.drop("queue_full")
                q.append((_SPAN, lane.span_id, lane.trace_id, None, lane.name, self._lane_id, lane.start_ns, now,
                          lane.attrs, "state"))
            if exp.profiling.hot:
                exp.profiling.stage_end(self._lane_id, lane.name)  # a stage profiling window ends with its state
        return False

    async def __aenter__(self) -> None:
        self.__enter__(True)

    async def __aexit__(self, *exc: object) -> Literal[False]:
        return self.__exit__(*exc)

    def __call__(self, func: Any) -> Any:
        exp, table, name, lane_id, labels = self._exp, self._table, self._name, self._lane_id, self._labels
        return _decorate(lambda: StateBlock(exp, table, name, lane_id, labels), func)


class NoopBlock:
    """Returned when monitoring is disabled: costs one attribute lookup."""

    __slots__ = ()
    _spec: tuple | None = None

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> Literal[False]:
        return False

    def __call__(self, func: Any) -> Any:
        """Decorating while monitoring is off: the function is wrapped lazily, so that it is traced when
        monitoring is on at call time (upstream checks at call time too)."""
        spec = self._spec
        if spec is None:
            return func
        return _decorate(lambda: _trace_state(*spec), func)


class DeferredNoop(NoopBlock):
    """A no-op block that remembers its `trace_state` arguments for use as a decorator."""

    __slots__ = ("_spec",)

    def __init__(self, spec: tuple) -> None:
        self._spec = spec


NOOP_BLOCK = NoopBlock()
_trace_state: Any = None  # set by client.api (avoids an import cycle)
