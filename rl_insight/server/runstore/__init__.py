"""Run store: SQLite (WAL) file with runs, step-aligned metric samples and spans."""

from .reader import RunStoreReader
from .writer import RunStoreWriter, SampleRow

__all__ = ["RunStoreReader", "RunStoreWriter", "SampleRow"]
