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
only moves forward in time (a resent or late value changes nothing); a sample's stored value is the sum of every
process's latest value at its time as far as the store has heard (a value timed before the series' newest sample
adds itself to every later one: the stored series never goes down, whichever server each process reached); a value
older than its process's latest is not stored (a resend, stored already, or superseded by the newer running value
that includes it).
"""

from __future__ import annotations

from typing import Any, Sequence

from ..backend import StoreConnection

_UPSERT = ("INSERT INTO series_parts (series_id, client, value, ts) VALUES (?, ?, ?, ?) "
           "ON CONFLICT (series_id, client) DO UPDATE SET value = excluded.value, ts = excluded.ts "
           "WHERE excluded.ts >= series_parts.ts")
_ADD = "UPDATE series SET total = coalesce(total, 0) + ? WHERE id = ? RETURNING total"
_NEWEST = "SELECT max(ts) FROM samples WHERE series_id = ?"
_AT_OR_BEFORE = "SELECT ts, value FROM samples WHERE series_id = ? AND ts <= ? ORDER BY ts DESC LIMIT 1"
_ADD_AFTER = "UPDATE samples SET value = value + ? WHERE series_id = ? AND ts > ?"


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
        _place_late(conn, sid, [(rows[i][2], d, i) for i, d in zip(order, deltas) if d is not None], out)
    conn.executemany(_UPSERT, [(sid, client, *parts[(sid, client)]) for sid, client in sorted(changed)])
    return out


def _place_late(conn: StoreConnection, sid: int, accepted: list[tuple[float, float, int]],
                out: list[float | None]) -> None:
    """Values timed before the series' newest stored sample (a process whose batch came late, through this server or
    another of a fleet): each is what was stored just before its time plus what it adds, and every stored sample
    after its time adds it too — so the stored series, read in time order, is the sum of each process's latest value
    at that time and never goes down (the total after the transaction would put a later process's count before its
    time: a reader taking a rate saw a reset). `accepted`: (time, delta, index into `out`) in time order."""
    newest = conn.execute(_NEWEST, (sid,)).fetchone()[0]
    if newest is None:
        return
    before: tuple[float, float] | None = None  # the last late value of this transaction: (time, value)
    for ts, delta, i in accepted:
        if ts >= newest:
            break  # (in time order: the rest come after every stored sample, as their totals say)
        stored = conn.execute(_AT_OR_BEFORE, (sid, ts)).fetchone()
        base = before[1] if before is not None and (stored is None or before[0] >= stored[0]) else \
            (float(stored[1]) if stored is not None and stored[1] is not None else 0.0)
        out[i] = base + delta
        before = (ts, base + delta)
        conn.execute(_ADD_AFTER, (delta, sid, ts))


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

