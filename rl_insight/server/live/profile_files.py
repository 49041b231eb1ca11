"""A profile request on disk: `<root>/<id>/request.json` (the request and its state, written atomically, without
its processes) and `processes.jsonl`, the journal of what each process reported (one line appended per report,
O(1) however many processes answer; replayed at start, the last line of a process winning; rewritten in one
piece once it holds four times more lines than processes). A torn last line, from a crash mid-append, is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...fsutil import atomic_write

JOURNAL = "processes.jsonl"


class RequestFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lines: dict[str, int] = {}  # journal lines per request, to know when to compact

    def save(self, rec: dict[str, Any]) -> None:
        """request.json without the processes (they live in the journal)."""
        d = self.root / rec["request"]["id"]
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / "request.json", json.dumps({**rec, "processes": {}}, indent=1))

    def read_processes(self, rid: str, rec: dict[str, Any]) -> None:
        """The journal replayed into `rec["processes"]` (a request.json of a version before the journal carries
        them itself: they move into the journal before the next save writes request.json without them)."""
        in_file = bool(rec.setdefault("processes", {}))
        self._lines[rid] = self._replay(self.root / rid / JOURNAL, rec["processes"])
        if in_file:
            self.compact(rec)

    def journal(self, rec: dict[str, Any], key: str) -> None:
        """One process's entry appended; the journal is rewritten once it holds 4x more lines than processes."""
        rid = rec["request"]["id"]
        d = self.root / rid
        d.mkdir(parents=True, exist_ok=True)
        n = self._lines.get(rid, 0) + 1
        procs = rec["processes"]
        if n > 4 * len(procs) + 64:
            self.compact(rec)
            return
        with open(d / JOURNAL, "a") as f:
            f.write(json.dumps({"key": key, "entry": procs[key]}) + "\n")
        self._lines[rid] = n

    def compact(self, rec: dict[str, Any]) -> None:
        """The journal rewritten with one line per process (atomically)."""
        rid, procs = rec["request"]["id"], rec["processes"]
        (self.root / rid).mkdir(parents=True, exist_ok=True)
        atomic_write(self.root / rid / JOURNAL,
                     "".join(json.dumps({"key": k, "entry": e}) + "\n" for k, e in procs.items()))
        self._lines[rid] = len(procs)

    def forget(self, rid: str) -> None:
        self._lines.pop(rid, None)

    @staticmethod
    def _replay(journal: Path, procs: dict[str, Any]) -> int:
        try:
            lines = journal.read_text().splitlines()
        except OSError:
            return 0
        for line in lines:
            try:
                item = json.loads(line)
                procs[str(item["key"])] = dict(item["entry"])
            except (ValueError, KeyError, TypeError):
                continue
        return len(lines)
