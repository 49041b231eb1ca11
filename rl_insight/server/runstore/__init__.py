"""The run store: runs, step-aligned metric samples, spans and what is derived from them, in one database chosen once
(backend/: a SQLite file, the default, or PostgreSQL). The writer (writer.py, or writer_process.py in a child
process) is the only code that writes; readers take a connection per thread (reader.py); the query modules beside
them are the read models.

The names below are imported on first use (a command that only reads the config, such as the CLI's, does not load the
writer)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .reader import RunStoreReader
    from .rows import SampleRow
    from .writer import RunStoreWriter

__all__ = ["RunStoreReader", "RunStoreWriter", "SampleRow"]
_WHERE = {"RunStoreReader": ".reader", "RunStoreWriter": ".writer", "SampleRow": ".rows"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_WHERE[name], __name__), name)
