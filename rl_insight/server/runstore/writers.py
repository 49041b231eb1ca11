"""The run store's writer, in a process of its own (the default) or in a thread of the server's (tests, small
setups): both take the same hand-over (runstore/hand_over.py)."""

from __future__ import annotations

from ...errors import ConfigError
from .backend import Backend
from .hand_over import HandOver
from .writer import RunStoreWriter
from .writer_process import WriterProcess

WRITER_KINDS = {"process": WriterProcess, "thread": RunStoreWriter}


def open_writer(kind: str, backend: Backend, retention_days: float, max_bytes: int,
                step_metric: str = "training/global_step") -> HandOver:
    if kind not in WRITER_KINDS:
        raise ConfigError(f"store_writer {kind!r} is not one of {', '.join(WRITER_KINDS)}")
    return WRITER_KINDS[kind](backend, retention_days=retention_days, max_bytes=max_bytes,
                              step_metric=step_metric)
