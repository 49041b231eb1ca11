"""A store kind's read: a query of the run store called with the reading thread's connection, which the caller
never holds (routes and features ask a kind's reader, `reader.samples.series(...)`, never a raw connection).

Invariant: the connection is taken when the read is called, on the calling thread (runstore/reader.py: one per
thread), exactly as a handler that held `reader.conn()` did.
"""

from __future__ import annotations

from typing import Any, Callable, Concatenate, Generic, ParamSpec, TypeVar

from .backend import StoreConnection

P = ParamSpec("P")
R = TypeVar("R")


class Bound(Generic[P, R]):
    def __init__(self, query: Callable[Concatenate[StoreConnection, P], R]) -> None:
        self.query = query

    def __get__(self, kind: Any, owner: Any = None) -> Callable[P, R]:
        query, reader = self.query, kind.reader

        def read(*args: P.args, **kwargs: P.kwargs) -> R:
            return query(reader.conn(), *args, **kwargs)

        read.__doc__ = query.__doc__
        return read


class StoreKind:
    """The reads of one kind of data (runs, samples, spans, steps, trajectories) over one reader."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
