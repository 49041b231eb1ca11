"""Counters summed across the processes that feed them, from what each process sent (schema 10).

A counter, and a histogram's `_count` and `_sum`, is cumulative per sending process (its own running value, which
makes resends idempotent). The writer keeps each sender's latest value in `series_parts` (series, client) and the
series' sum of them in `series.total`, moved by the difference each new value makes, in the transaction that
stores the sample; the sample is stored as that total. So the run store holds the sum across every process that
fed the series, whichever server of a fleet each one reached: on PostgreSQL the series rows are locked (in id
order) before the parts are read, so two servers adding to one series at once both count, never one over the other.

Invariants: `series.total` is the sum of the series' `series_parts.value` (for series written since schema 10;
older samples keep what the server that wrote them exposed, and an older series starts its total over from the
parts its processes send after the upgrade — every process resends its totals when the server restarts); a part
only moves forward in time (a resent or late value changes nothing); a sample's stored value is the total after
the values of its transaction up to its time; a value older than its process's latest is not stored (a resend,
stored already, or superseded by the newer running value that includes it).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..backend import StoreConnection

_UPSERT = ("INSERT INTO series_parts (series_id, client, value, ts) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (series_id, client) DO UPDATE SET value = excluded.value, ts = excluded.ts "
           "WHERE excluded.ts >= series_parts.ts")
_ADD = "UPDATE series SET total = coalesce(total, 0) + ? WHERE id = ? RETURNING total"


def summed(conn: StoreConnection, rows: Sequence[tuple[int, str, float, float]]) -> list[float | None]:
    """For `rows` ((series id, client, time, the client's own value), in the order given), the value each is stored
    with: its series' total across clients after it; None for a value older than what its client already said
    (a resend, stored already, or a late one its client's newer total includes: not stored again). Inside the
    writer's transaction."""
    by_series: dict[int, list[int]] = {}
    for i, (sid, _, _, _) in enumerate(rows):
        by_series.setdefault(sid, []).append(i)
    sids = sorted(by_series)
    marks = ",".join("?" * len(sids))
    conn.dialect.lock_rows(conn, "series", sids)  # another server's transaction on these series waits, or this one
    clients = sorted({r[1] for r in rows})
    parts: dict[tuple[int, str], tuple[float, float]] = {
        (int(sid), str(client)): (float(value), float(ts)) for sid, client, value, ts in conn.execute(
            f"SELECT series_id, client, value, ts FROM series_parts WHERE series_id IN ({marks}) AND client IN "
            f"({','.join('?' * len(clients))})", (*sids, *clients))}
    out: list[float | None] = [None] * len(rows)
    changed: set[tuple[int, str]] = set()
    for sid in sids:
        order = sorted(by_series[sid], key=lambda i: rows[i][2])
        deltas: list[float | None] = []
        for i in order:
            _, client, ts, own = rows[i]
            prev = parts.get((sid, client))
            if prev is None or ts >= prev[1]:
                deltas.append(own - (prev[0] if prev is not None else 0.0))
                parts[(sid, client)] = (own, ts)
                changed.add((sid, client))
            else:
                deltas.append(None)  # older than what this client already said: it changes nothing
        total = float(conn.execute(_ADD, (sum(d for d in deltas if d is not None), sid)).fetchone()[0])
        for i, delta in zip(reversed(order), reversed(deltas)):  # the total after each, from the last one back
            if delta is not None:
                out[i] = total
                total -= delta
    conn.executemany(_UPSERT, [(sid, client, *parts[(sid, client)]) for sid, client in sorted(changed)])
    return out


def as_totals(conn: StoreConnection, offered: Sequence[Any], sample_rows: list[tuple]) -> None:
    """Counter rows stored as their series' total across processes: `offered` are the SampleRows behind
    `sample_rows` ((series id, step, time, value), in the same order); those that name their process (counters)
    take the total after them, and one older than what its process already said (a resend, or included in a newer
    value) is dropped from `sample_rows`. Inside the writer's transaction."""
    at = [i for i, r in enumerate(offered) if r.client]
    if not at:
        return
    totals = summed(conn, [(sample_rows[i][0], offered[i].client, offered[i].ts, offered[i].value) for i in at])
    superseded = set()
    for i, total in zip(at, totals):
        sid, step, ts, _ = sample_rows[i]
        if total is None:
            superseded.add(i)
        else:
            sample_rows[i] = (sid, step, ts, total)
    if superseded:
        sample_rows[:] = [r for i, r in enumerate(sample_rows) if i not in superseded]

