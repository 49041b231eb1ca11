"""The runs list a team reads (`GET /api/v1/runs`, `rl-insight runs list`, the UI's runs page): filtered by project,
status, tag and a search, sorted, with a summary metric's latest value and chosen config keys as columns.

Invariants: filters and sorting apply to every run the store holds before `limit` cuts the list (the first page is
the true first page); a run without the summary metric or a config key has None there and sorts last either way.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Literal, Sequence, cast

from ...errors import InvalidInputError
from ...semantics.names import InvalidNameError, sanitize_metric_name
from . import queries as q
from .backend import StoreConnection
from .results import RunListed

SortKey = Literal["last_seen", "first_seen", "duration", "name", "last_step", "metric"]
SORT_KEYS: tuple[str, ...] = ("last_seen", "first_seen", "duration", "name", "last_step", "metric")
STATUSES = ("live", "stalled", "hung", "idle", "finished", "lost")
MAX_CONFIG_COLUMNS = 8

# the latest value of one metric in each run that has it (a series without labels first, then the smallest labels)
_LATEST = ("SELECT s.run_id, s.labels, (SELECT p.value FROM samples p WHERE p.series_id = s.id ORDER BY p.ts DESC "
           "LIMIT 1) FROM series s WHERE s.name = ? ORDER BY s.run_id, length(s.labels), s.labels")


def metric_name(name: str) -> str:
    """A metric as the job logged it (`critic/score/mean`) as the store names it; InvalidInputError otherwise."""
    try:
        base = sanitize_metric_name(name)
    except InvalidNameError as exc:
        raise InvalidInputError(f"metric {name[:100]!r}: {exc}") from None
    return base[:-len("_total")] if base.endswith("_total") else base


def latest_values(conn: StoreConnection, name: str) -> dict[int, float | None]:
    out: dict[int, float | None] = {}
    for run_id, _labels, value in conn.execute(_LATEST, (metric_name(name),)):
        out.setdefault(int(run_id), value)
    return out


def list_runs(conn: StoreConnection, live_window_s: float, *, project: str | None = None, status: str | None = None,
              tag: str | None = None, search: str | None = None, metric: str | None = None,
              config_keys: Sequence[str] = (), sort: str = "last_seen", descending: bool = True,
              limit: int | None = None, conditions: q.Conditions | None = None,
              visible: Callable[[str | None], bool] | None = None) -> list[RunListed]:
    """The runs; `visible` (a principal's projects) filters with the rest, before `limit`."""
    if status is not None and status not in STATUSES:
        raise InvalidInputError(f"status must be one of {', '.join(STATUSES)}, found {status[:40]!r}")
    if sort not in SORT_KEYS:
        raise InvalidInputError(f"sort must be one of {', '.join(SORT_KEYS)}, found {sort[:40]!r}")
    if sort == "metric" and not metric:
        raise InvalidInputError("sort=metric needs metric=NAME (the summary metric to sort by)")
    if len(config_keys) > MAX_CONFIG_COLUMNS:
        raise InvalidInputError(f"at most {MAX_CONFIG_COLUMNS} config columns, found {len(config_keys)}")
    runs = cast(list[RunListed], q.list_runs(conn, live_window_s, project, conditions))
    if visible is not None:
        runs = [r for r in runs if visible(r["project"])]
    if status is not None:
        runs = [r for r in runs if r["status"] == status]
    if tag:
        runs = [r for r in runs if tag in r["tags"]]
    if search:
        needle = search.lower()
        runs = [r for r in runs if needle in f"{r['project']}/{r['experiment_name']}".lower()
                or any(needle in t.lower() for t in r["tags"])]
    if metric:
        values = latest_values(conn, metric)
        for r in runs:
            r["metric"] = values.get(r["id"])
    if config_keys:
        configs = _configs(conn, [r["id"] for r in runs])
        for r in runs:
            c = configs.get(r["id"], {})
            r["config_values"] = {k: c.get(k) for k in config_keys}
    runs = _sorted(runs, sort, descending)
    return runs[:limit] if limit is not None else runs


def _configs(conn: StoreConnection, run_ids: list[int]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for i in range(0, len(run_ids), 500):
        part = run_ids[i:i + 500]
        for run_id, config in conn.execute(f"SELECT id, config FROM runs WHERE id IN ({','.join('?' * len(part))})",
                                           part):
            try:
                parsed = json.loads(config) if config else {}
            except ValueError:
                parsed = {}
            out[int(run_id)] = parsed if isinstance(parsed, dict) else {}
    return out


def _sorted(runs: list[RunListed], sort: str, descending: bool) -> list[RunListed]:
    def key(r: RunListed) -> Any:
        if sort == "name":
            return f"{r['project']}/{r['experiment_name']}".lower()
        if sort == "duration":
            return r["duration_s"]
        return r.get(sort)

    present = [r for r in runs if key(r) is not None]
    missing = [r for r in runs if key(r) is None]  # (last, whichever the order)
    return sorted(present, key=key, reverse=descending) + missing
