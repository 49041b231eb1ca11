"""Write side of the trajectory model: turns, trajectory records and engine requests into the run store.

Called by the writer thread inside its transaction with the spans it just stored (server/runstore/trajectories/facts.py
says what each span contributes). Turns are keyed by (trajectory, start, span id), so a turn that arrives
twice is one turn; each touched trajectory's totals are then recomputed from its turns (not incremented),
so turns arriving out of order, twice, or before their trajectory's own record give the same row.
"""

from __future__ import annotations

import json
from typing import Callable, Iterable

from ....protocol import SpanRecord
from ..backend import StoreConnection
from .facts import LlmRequest, TrajectoryInfo, Turn, facts

DETAIL_TEXT_MAX = 4096  # characters of each text a turn keeps (a prompt, a response, a tool's arguments or result)


def detail_json(detail: dict) -> str | None:
    """A turn's detail as stored: every value whole JSON, each string cut at DETAIL_TEXT_MAX (marked "…"), never the
    JSON text itself (cut at 2,048 characters, a turn with a long tool argument was stored unreadable)."""
    if not detail:
        return None
    kept = {k: (v[: DETAIL_TEXT_MAX - 1] + "…" if isinstance(v, str) and len(v) > DETAIL_TEXT_MAX else v)
            for k, v in detail.items()}
    return json.dumps(kept, default=str)


_MAX_CACHED = 200_000  # trajectory ids remembered between batches (2M-trajectory runs must not grow this without bound)

_UPSERT_TURN = (
    "INSERT INTO turns (traj, start_ns, span_id, end_ns, kind, name, step, replica, tokens_in, tokens_out, "
    "error, request_id, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (traj, start_ns, span_id) "
    "DO UPDATE SET end_ns = excluded.end_ns, kind = excluded.kind, name = excluded.name, step = excluded.step, "
    "replica = excluded.replica, tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out, "
    "error = excluded.error, request_id = excluded.request_id, detail = excluded.detail"
)
_UPSERT_REQUEST = (
    "INSERT INTO llm_requests (run_id, request_id, parent_id, trace_id, start_ns, end_ns, replica, tokens_in, "
    "tokens_out, queue_s, ttft_s, prefill_s, decode_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (run_id, request_id) DO UPDATE SET parent_id = excluded.parent_id, trace_id = excluded.trace_id, "
    "start_ns = excluded.start_ns, end_ns = excluded.end_ns, replica = excluded.replica, "
    "tokens_in = excluded.tokens_in, tokens_out = excluded.tokens_out, queue_s = excluded.queue_s, "
    "ttft_s = excluded.ttft_s, prefill_s = excluded.prefill_s, decode_s = excluded.decode_s"
)
# a later record's known values win; what it does not know keeps what an earlier one said
_MERGE_INFO = (
    "UPDATE trajectories SET info_step = coalesce(?, info_step), sample = coalesce(?, sample), rollout_n = "
    "coalesce(?, rollout_n), "
    "validate = coalesce(?, validate), source = coalesce(source, ?), status = coalesce(?, status), reward = "
    "coalesce(?, reward), "
    "reported_turns = coalesce(?, reported_turns), info_start_ns = coalesce(?, info_start_ns), "
    "info_end_ns = coalesce(?, info_end_ns) WHERE id = ?"
)
# The engine request of a turn: by request id, or the request span is the turn span's child.
# `r`: the request span whose parent is the turn's span (the first, if an engine retried), else the request
# named by the turn's request id; one request per turn at most, so no turn is counted twice.
REQUEST_OF_TURN = (
    "LEFT JOIN llm_requests r ON r.run_id = ?1 AND r.request_id = coalesce((SELECT p.request_id FROM llm_requests p "
    "WHERE p.run_id = ?1 AND p.parent_id = t.span_id ORDER BY p.start_ns LIMIT 1), t.request_id)"
)
_TOTALS = (
    f"SELECT min(t.start_ns), max(t.end_ns), count(*), sum(t.kind = 'generate'), sum(t.kind = 'tool'), "
    f"sum(t.kind = 'tool' AND t.error IS NOT NULL), sum(coalesce(t.tokens_in, r.tokens_in)), "
    f"sum(coalesce(t.tokens_out, r.tokens_out)), sum(CASE WHEN t.kind = 'generate' THEN t.end_ns - t.start_ns END), "
    f"sum(CASE WHEN t.kind = 'tool' THEN t.end_ns - t.start_ns END) FROM turns t {REQUEST_OF_TURN} WHERE t.traj = ?2"
)
_BUSIEST_REPLICA = (
    f"SELECT coalesce(t.replica, r.replica) AS rep FROM turns t {REQUEST_OF_TURN} WHERE t.traj = ?2 AND t.kind = "
    "'generate' "
    f"AND coalesce(t.replica, r.replica) IS NOT NULL GROUP BY rep ORDER BY sum(t.end_ns - t.start_ns) DESC LIMIT 1"
)
_TOOLS = "SELECT DISTINCT name FROM turns WHERE traj = ? AND kind = 'tool' ORDER BY name LIMIT 32"
_FIRST_STEP = "SELECT step FROM turns WHERE traj = ? AND step IS NOT NULL ORDER BY start_ns LIMIT 1"


class TrajectoryStore:
    """The writer thread's trajectory indexer (one per writer; not thread-safe by design)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, str], int] = {}
        self.turns = 0
        self.requests = 0

    def forget(self) -> None:
        """After a rollback or deleted runs: ids may be gone."""
        self._ids.clear()

    def apply(
        self, conn: StoreConnection, spans: Iterable[SpanRecord], run_id_of: Callable[[SpanRecord], int]
    ) -> int:
        """Index the trajectory facts of finished spans; returns how many facts were found."""
        touched: set[tuple[int, int]] = set()
        turns: list[tuple] = []
        requests: list[tuple] = []
        found = 0
        for span in spans:
            found_here = facts(span)
            if not found_here:
                continue
            run_id = run_id_of(span)
            for f in found_here:
                found += 1
                if isinstance(f, Turn):
                    tid = self._traj_id(conn, run_id, f.traj_key)
                    turns.append(
                        (
                            tid,
                            f.start_ns,
                            f.span_id,
                            f.end_ns,
                            f.kind,
                            f.name,
                            f.step,
                            f.replica,
                            f.tokens_in,
                            f.tokens_out,
                            f.error,
                            f.request_id,
                            detail_json(f.detail),
                        )
                    )
                    touched.add((run_id, tid))
                elif isinstance(f, TrajectoryInfo):
                    tid = self._traj_id(conn, run_id, f.traj_key)
                    conn.execute(
                        _MERGE_INFO,
                        (
                            f.step,
                            f.sample,
                            f.rollout_n,
                            None if f.validate is None else int(f.validate),
                            f.source,
                            f.status,
                            f.reward,
                            f.reported_turns,
                            f.start_ns,
                            f.end_ns,
                            tid,
                        ),
                    )
                    touched.add((run_id, tid))
                elif isinstance(f, LlmRequest):
                    requests.append(
                        (
                            run_id,
                            f.request_id,
                            f.parent_id,
                            f.trace_id,
                            f.start_ns,
                            f.end_ns,
                            f.replica,
                            f.tokens_in,
                            f.tokens_out,
                            f.queue_s,
                            f.ttft_s,
                            f.prefill_s,
                            f.decode_s,
                        )
                    )
        if turns:
            conn.insert_rows(_UPSERT_TURN, turns)
            self.turns += len(turns)
        if requests:
            conn.insert_rows(_UPSERT_REQUEST, requests)
            self.requests += len(requests)
            touched |= self._trajectories_of_requests(conn, requests)
        for run_id, tid in touched:
            self._recompute(conn, run_id, tid)
        return found

    def _traj_id(self, conn: StoreConnection, run_id: int, key: str) -> int:
        tid = self._ids.get((run_id, key))
        if tid is None:
            conn.execute("INSERT INTO trajectories (run_id, key) VALUES (?, ?) ON CONFLICT DO NOTHING", (run_id, key))
            tid = conn.execute("SELECT id FROM trajectories WHERE run_id = ? AND key = ?", (run_id, key)).fetchone()[0]
            if len(self._ids) >= _MAX_CACHED:
                self._ids.clear()
            self._ids[(run_id, key)] = tid
        return tid

    @staticmethod
    def backfill_steps(conn: StoreConnection, run_id: int, step: int, before_ns: int) -> int:
        """The run's clock moved for the first time, to `step`, at `before_ns`: trajectories without a step that
        began before it (their spans came before any step metric) were in that step. Returns how many."""
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM trajectories WHERE run_id = ? AND step IS NULL AND start_ns < ?", (run_id, before_ns)
            )
        ]
        for tid in ids:
            conn.execute("UPDATE turns SET step = ? WHERE traj = ? AND step IS NULL", (step, tid))
            conn.execute("UPDATE trajectories SET step = ? WHERE id = ?", (step, tid))
        return len(ids)

    @staticmethod
    def _trajectories_of_requests(conn: StoreConnection, requests: list[tuple]) -> set[tuple[int, int]]:
        """Trajectories whose turns an engine request that arrived after them belongs to."""
        out: set[tuple[int, int]] = set()
        for run_id, request_id, parent_id, trace_id, *_ in requests:
            for (tid,) in conn.execute("SELECT traj FROM turns WHERE request_id = ?", (request_id,)):
                out.add((run_id, tid))
            if parent_id:
                # the parent is a generate turn of a trace-keyed trajectory: find it through the request's trace
                row = conn.execute(
                    "SELECT id FROM trajectories WHERE run_id = ? AND key = ?", (run_id, f"trace:{trace_id}")
                ).fetchone()
                if row:
                    out.add((run_id, row[0]))
        return out

    @staticmethod
    def _recompute(conn: StoreConnection, run_id: int, tid: int) -> None:
        (start, end, n, gens, tools, tool_errors, tok_in, tok_out, gen_ns, tool_ns) = conn.execute(
            _TOTALS, (run_id, tid)
        ).fetchone()
        replica = conn.execute(_BUSIEST_REPLICA, (run_id, tid)).fetchone()
        names = [r[0] for r in conn.execute(_TOOLS, (tid,))]
        first_step = conn.execute(_FIRST_STEP, (tid,)).fetchone()
        # one statement: the trajectory's own record (an agent loop's root span) may begin before its first turn, so
        # start/end are the wider of the turns' and the record's (SET sees the old row, hence the repeated expressions)
        start_sql = "min(coalesce(:start, info_start_ns), coalesce(info_start_ns, :start))"
        end_sql = "max(coalesce(:end, info_end_ns), coalesce(info_end_ns, :end))"
        conn.execute(
            f"UPDATE trajectories SET start_ns = {start_sql}, end_ns = {end_sql}, duration_s = ({end_sql} - "
            f"{start_sql}) / 1e9, "
            "step = coalesce(info_step, :first_step), turns = :n, generates = :gens, tool_calls = :tools, "
            "tool_errors = :tool_errors, "
            "tokens_in = :tok_in, tokens_out = :tok_out, generate_s = :gen_s, tool_s = :tool_s, replica = :replica, "
            "tools = :names "
            "WHERE id = :tid",
            {
                "start": start,
                "end": end,
                "first_step": first_step[0] if first_step else None,
                "n": n,
                "gens": gens or 0,
                "tools": tools or 0,
                "tool_errors": tool_errors or 0,
                "tok_in": tok_in,
                "tok_out": tok_out,
                "gen_s": None if gen_ns is None else gen_ns / 1e9,
                "tool_s": None if tool_ns is None else tool_ns / 1e9,
                "replica": replica[0] if replica else None,
                "names": "," + ",".join(names) + "," if names else None,
                "tid": tid,
            },
        )
