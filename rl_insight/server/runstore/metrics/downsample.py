"""A series downsampled for a chart of about `points` points: per-bucket minimum and maximum in SQL (the extremes
are never averaged away), or Largest-Triangle-Three-Buckets over the rows in Python. Both keep the first and last
points, so a line starts and ends where the data does."""

from __future__ import annotations

from typing import Any

from ..backend import StoreConnection


def minmax(
    conn: StoreConnection, col: str, where: str, args: list[Any], lo: float, hi: float, points: int
) -> list[list[float]]:
    """Per bucket, the minimum and maximum point (SQLite returns the row of MIN()/MAX() for bare columns;
    PostgreSQL says the same with DISTINCT ON)."""
    buckets = max(1, (points - 2) // 2)
    width = (hi - lo) / buckets or 1.0
    if conn.dialect.distinct_on:
        b = f"least(CAST(trunc(({col} - ?) / ?) AS BIGINT), {buckets - 1})"
        rows = []
        for order in ("ASC", "DESC"):
            rows += conn.execute(
                f"SELECT DISTINCT ON (b) {b} AS b, {col}, value FROM samples WHERE {where} AND value IS NOT NULL "
                f"ORDER BY b, value {order}", [lo, width, *args]).fetchall()
    else:
        b = f"min(CAST(({col} - ?) / ? AS INTEGER), {buckets - 1})"
        rows = conn.execute(
            f"SELECT {b} AS b, {col}, min(value) FROM samples WHERE {where} GROUP BY b", [lo, width, *args]
        ).fetchall()
        rows += conn.execute(
            f"SELECT {b} AS b, {col}, max(value) FROM samples WHERE {where} GROUP BY b", [lo, width, *args]
        ).fetchall()
    # the first and last points too, so the line starts and ends where the data does
    for order in ("ASC", "DESC"):
        rows += conn.execute(
            f"SELECT 0, {col}, value FROM samples WHERE {where} ORDER BY {col} {order} LIMIT 1", args
        ).fetchall()
    seen: set[tuple[float, float]] = set()
    pts = []
    for _, xv, yv in sorted(rows, key=lambda r: (r[1], r[2] if r[2] is not None else 0)):
        if (xv, yv) not in seen:
            seen.add((xv, yv))
            pts.append([xv, yv])
    return pts


def lttb(data: list[tuple[float, float]], threshold: int) -> list[list[float]]:
    """Largest-Triangle-Three-Buckets (Steinarsson 2013): keeps the visual shape with `threshold` points."""
    n = len(data)
    if threshold >= n or threshold < 3:
        return [list(p) for p in data]
    out = [list(data[0])]
    every = (n - 2) / (threshold - 2)
    a = 0
    for i in range(threshold - 2):
        start, end = int((i + 1) * every) + 1, min(int((i + 2) * every) + 1, n)
        avg_x = avg_y = 0.0
        for x, y in data[start:end]:
            avg_x += x
            avg_y += y or 0.0
        cnt = max(1, end - start)
        avg_x, avg_y = avg_x / cnt, avg_y / cnt
        r_start, r_end = int(i * every) + 1, int((i + 1) * every) + 1
        ax, ay = data[a]
        ay = ay or 0.0
        best, best_area = r_start, -1.0
        for j in range(r_start, r_end):
            x, y = data[j]
            area = abs((ax - avg_x) * ((y or 0.0) - ay) - (ax - x) * (avg_y - ay))
            if area > best_area:
                best, best_area = j, area
        out.append(list(data[best]))
        a = best
    out.append(list(data[-1]))
    return out
