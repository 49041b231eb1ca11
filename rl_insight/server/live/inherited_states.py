"""States the previous boot stored as open, handed to the client tracker at start: closed as cut short unless their
processes announce them again within the silence limit."""

from __future__ import annotations

import json
import logging

from ...protocol import SpanRecord
from ..runstore.reader import RunStoreReader
from .clients import ClientTracker

log = logging.getLogger("rl_insight.server")


def inherit_open_states(reader: RunStoreReader, clients: ClientTracker, silence_s: float, limit: int = 100_000) -> None:
    found = []
    for project, experiment, last_seen, _finished, (sid, trace, parent, name, lane, start, attrs) in \
            reader.runs.open_states(limit):
        try:
            a = json.loads(attrs)
        except ValueError:
            a = {}
        a = {**(a if isinstance(a, dict) else {}), "project": project, "experiment_name": experiment}
        found.append((SpanRecord(sid, trace, parent, name, lane, "state", start, None, a, 256), int(last_seen * 1e9)))
    if found:
        clients.inherit(found)
        log.info("%d states were open when the server last stopped; closed as cut short in %.0f s unless their "
                 "processes announce them", len(found), silence_s)
