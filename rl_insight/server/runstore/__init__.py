"""Run store: SQLite (WAL) file with runs, step-aligned metric samples and spans."""

from .reader import RunStoreReader
from .rows import SampleRow
from .writer import RunStoreWriter

__all__ = ["RunStoreReader", "RunStoreWriter", "SampleRow"]
