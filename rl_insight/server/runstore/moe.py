"""MoE expert load of a run from the run store (semantics/moe.py defines the metrics): each layer's max violation
by step, and each expert's share at one step when the job logs them. Two indexed reads, no scan of other series."""

from __future__ import annotations

from typing import Any

from ...semantics import moe
from .backend import StoreConnection
from .queries import get_run


def moe_summary(conn: StoreConnection, run_id: int, step: float | None = None,
                max_steps: int = 1000) -> dict[str, Any]:
    get_run(conn, run_id)
    vio_ids: dict[int, int] = {}
    load_ids: dict[int, tuple[int, int]] = {}
    for sid, name in conn.execute(
            "SELECT id, name FROM series WHERE run_id = ? AND name LIKE 'rollout\\_moe\\_%' ESCAPE '\\'", (run_id,)):
        m = moe.VIO.match(name)
        if m and m[1] == "max":
            vio_ids[sid] = int(m[2])
        elif (m := moe.LOAD.match(name)) is not None:
            load_ids[sid] = (int(m[1]), int(m[2]))
    vio: dict[int, list[tuple[float, float]]] = {}
    for sid, layer in vio_ids.items():
        rows = conn.execute("SELECT step, value FROM samples WHERE series_id = ? AND step IS NOT NULL AND value IS NOT "
                            "NULL ORDER BY step DESC LIMIT ?", (sid, max_steps)).fetchall()
        vio[layer] = sorted((float(s), float(v)) for s, v in rows)
    loads: dict[tuple[int, int], float] = {}
    load_step = None
    if load_ids:
        marks = ",".join("?" * len(load_ids))
        if step is None:
            step = conn.execute(f"SELECT max(step) FROM samples WHERE series_id IN ({marks})",
                                tuple(load_ids)).fetchone()[0]
        load_step = step
        if step is not None:
            sql = f"SELECT series_id, value FROM samples WHERE series_id IN ({marks}) AND step = ?"
            for sid, value in conn.execute(sql, (*load_ids, step)):
                if value is not None:
                    loads[load_ids[sid]] = float(value)
    return {"run_id": run_id, **moe.summary(vio, loads or None, load_step)}
