"""Profile requests kept in a fleet's store (server/fleet/shared_book.py), behind the methods of their files on
disk (rooms/profiles/files.py): several ingest servers on one store see the same requests, statuses and files.

A request is one record (the request, its origin, cancellation, analysis); each process's report and each
uploaded file is a part of it, written by the server that heard it. The traces themselves lie in the profiles
directory every server of the fleet mounts (`--shared-dir`, docs/scale.md).
"""

from __future__ import annotations

import logging
from typing import Any, cast

from ....protocol import PROCESS_TERMINAL
from ...fleet.records import SharedRecords
from ...fleet.shared_book import SharedBook
from .records import ProfileRecord

log = logging.getLogger("rl_insight.server")

KIND = "profile"


def _merge(rec: ProfileRecord, field: str, key: str, body: Any) -> None:
    """A process's entry another server wrote; a finished process is never reopened by a late report."""
    entries = cast(dict[str, dict[str, Any]], rec[field])  # type: ignore[literal-required]  # processes or files
    mine = entries.get(key)
    if field == "processes" and mine and mine.get("state") in PROCESS_TERMINAL and \
            body.get("state") not in PROCESS_TERMINAL:
        return
    entries[key] = body


class SharedRequests(SharedBook[ProfileRecord]):
    def __init__(self, records: SharedRecords) -> None:
        super().__init__(records, lambda r: r["request"]["id"],
                         lambda r: (r["request"]["project"], r["request"]["experiment_name"]),
                         ("processes", "files"), _merge)

    def journal(self, rec: ProfileRecord, key: str) -> None:
        self.put_part(rec, "processes", key)

    def put_file(self, rec: ProfileRecord, name: str) -> None:
        self.put_part(rec, "files", name)


def shared_requests(records: SharedRecords | None, shared_dir: str | None, profiles_dir: Any) -> SharedRequests | None:
    """Profile requests in the store (`records`: on a store a fleet shares), every server of the fleet seeing them;
    None: files under data_dir, one server."""
    if records is None:
        return None
    if not shared_dir:
        log.warning("profile traces are kept under %s on this server only: with several servers on one store, "
                    "give them all one --shared-dir (docs/scale.md)", profiles_dir)
    return SharedRequests(records)
