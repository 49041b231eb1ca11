"""A profile request on disk (one server): `<root>/<id>/request.json` (the request and its state, written
atomically, without its processes) and `processes.jsonl`, the journal of what each process reported (one line
appended per report, O(1) however many processes answer; replayed at start, the last line of a process winning;
rewritten in one piece once it holds four times more lines than processes). A torn last line, from a crash
mid-append, is skipped. A fleet keeps the same records in its store instead (rooms/profiles/shared.py), behind the
same methods.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable

from ....fsutil import atomic_write
from ....protocol import ProfileRequest
from .analysis import ANALYSIS_ATTEMPTS
from .records import ProfileRecord

log = logging.getLogger("rl_insight.server.rooms.profiles.book")
JOURNAL = "processes.jsonl"


class RequestFiles:
    def __init__(self, root: Path, is_request_id: Callable[[str], bool]) -> None:
        self.root = root
        self._is_request_id = is_request_id
        self._lines: dict[str, int] = {}  # journal lines per request, to know when to compact

    def load(self) -> list[ProfileRecord]:
        """Every readable request under the root, with its processes; an analysis a server stop interrupted runs
        once more (pending), or, interrupted `ANALYSIS_ATTEMPTS` times, ends failed."""
        out = []
        for d in sorted(self.root.iterdir()) if self.root.is_dir() else []:
            f = d / "request.json"
            if not self._is_request_id(d.name) or not f.is_file():
                continue
            try:
                rec = json.loads(f.read_text())
                ProfileRequest.from_wire(rec["request"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("skipping unreadable profile request %s: %s", d, exc)
                continue
            self.read_processes(d.name, rec)
            analysis = rec.setdefault("analysis", {"state": "none"})
            if analysis.get("state") == "running":  # interrupted by a server stop
                if analysis.get("attempts", 1) >= ANALYSIS_ATTEMPTS:
                    rec["analysis"] = {
                        "state": "failed",
                        "attempts": analysis.get("attempts", 1),
                        "message": f"the analysis was interrupted {ANALYSIS_ATTEMPTS} times by a server stop; "
                        "not tried again (the traces are kept: `rl-insight profile fetch`)",
                    }
                else:
                    rec["analysis"] = {**analysis, "state": "pending"}  # done once more
                self.save(rec)
            out.append(rec)
        return out

    def create(self, rec: ProfileRecord) -> None:
        self.save(rec)

    def update(self, rec: ProfileRecord, mutate: Callable[[ProfileRecord], bool]) -> bool:
        """`mutate` has been applied to `rec` (one server: nobody else changes it); saved."""
        self.save(rec)
        return True

    def put_file(self, rec: ProfileRecord, name: str) -> None:
        self.save(rec)

    def save(self, rec: ProfileRecord) -> None:
        """request.json without the processes (they live in the journal)."""
        d = self.root / rec["request"]["id"]
        d.mkdir(parents=True, exist_ok=True)
        atomic_write(d / "request.json", json.dumps({**rec, "processes": {}}, indent=1))

    def read_processes(self, rid: str, rec: ProfileRecord) -> None:
        """The journal replayed into `rec["processes"]` (a request.json of a version before the journal carries
        them itself: they move into the journal before the next save writes request.json without them)."""
        in_file = bool(rec.setdefault("processes", {}))
        self._lines[rid] = self._replay(self.root / rid / JOURNAL, rec["processes"])
        if in_file:
            self.compact(rec)

    def journal(self, rec: ProfileRecord, key: str) -> None:
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

    def compact(self, rec: ProfileRecord) -> None:
        """The journal rewritten with one line per process (atomically)."""
        rid, procs = rec["request"]["id"], rec["processes"]
        (self.root / rid).mkdir(parents=True, exist_ok=True)
        atomic_write(self.root / rid / JOURNAL,
                     "".join(json.dumps({"key": k, "entry": e}) + "\n" for k, e in procs.items()))
        self._lines[rid] = len(procs)

    def forget(self, rids: list[str]) -> None:
        for rid in rids:
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
