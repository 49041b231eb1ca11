"""Runs, the writer side (`run_reads.py` is the reader's): what the server learns of a run besides its data — heard
from, finished (or lost, with why), its config and tags — into the open transaction.

Invariants: a run is created the first time anything names it (`Identities`, in key order); "finished" is final
until the run is heard from again; a run's config and tags are the latest its clients sent.
"""

from __future__ import annotations

import json
from typing import Any

from .backend import StoreConnection
from .identities import Identities
from .transaction_rows import TransactionRows


def finished(c: StoreConnection, ids: Identities, item: tuple[str, str, dict[str, Any] | None],
             rows: TransactionRows) -> None:
    """The run ended: cleanly (no `lost`), or lost with what the server knew of why."""
    project, experiment, lost = item
    run_id = ids.run_id(c, project, experiment, rows.now)
    rows.touch(run_id, final=True)
    c.execute("UPDATE runs SET end_state = ? WHERE id = ?",
              (json.dumps({"state": "lost", **lost}) if lost else None, run_id))


def heard(c: StoreConnection, ids: Identities, item: tuple[str, str], rows: TransactionRows) -> None:
    """A client of the run spoke (a heartbeat): the run is seen now."""
    rows.touch(ids.run_id(c, item[0], item[1], rows.now))


def run_info(c: StoreConnection, ids: Identities, item: tuple[str, str, dict[str, Any], list[str]],
             rows: TransactionRows) -> None:
    project, experiment, config, tags = item
    c.execute("UPDATE runs SET config = ?, tags = ? WHERE id = ?",
              (json.dumps(config, allow_nan=False), json.dumps(tags), ids.run_id(c, project, experiment, rows.now)))
