"""`rl-insight mcp`: the case file of a stuck or slow run for an AI agent — the same evidence a person sees, as
read-only tools of a Model Context Protocol server on stdio (the `mcp` package from PyPI).

Tools: the runs (with their status and why), a run's verdict and findings, its latest stack snapshot's groups, one
step's critical path explained, and the diff of two runs. Each tool is one GET of the server's API with the same token a
person's CLI uses, so the agent sees what that token may see and changes nothing. Answers are JSON, cut to
MAX_ANSWER_CHARS with a note when longer (an agent's context is not a place for 4,096 ranks' stacks).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import RLInsightError
from .call_stacks import resolve_run
from .options import HomeOpt, ServerUrlOpt, TokenOpt
from .reach import Server, require_server

MAX_ANSWER_CHARS = 16_000
GROUPS_SHOWN = 12
MEMBERS_SHOWN = 8


def bounded(answer: Any) -> str:
    """JSON text of `answer`, cut to MAX_ANSWER_CHARS (the cut said, with how much was left out)."""
    text = json.dumps(answer, separators=(",", ":"), default=str, ensure_ascii=False)  # (compact: an agent's
    # context holds more of the answer; a reader of it needs no indentation)
    if len(text) <= MAX_ANSWER_CHARS:
        return text
    return text[:MAX_ANSWER_CHARS] + f"\n… cut: {len(text) - MAX_ANSWER_CHARS} more characters; ask narrower"


def _snapshot_brief(snap: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's sentence, verdict and groups, each group by where it is and who is in it (no raw frames)."""
    groups = []
    for g in snap.get("groups", [])[:GROUPS_SHOWN]:
        groups.append({"size": g["size"], "labels": g["labels"], "answered": g["answered"],
                       "odd_one_out": g.get("odd_one_out", False),
                       "where": (g.get("where") or {}).get("text"),
                       "members": [{"label": m.get("label"), "states": m.get("states"), "step": m.get("step")}
                                   for m in g.get("members", [])[:MEMBERS_SHOWN]]})
    return {"id": snap["id"], "state": snap["state"], "origin": snap.get("origin"), "created_at": snap["created_at"],
            "answered": snap.get("answered"), "expected_count": snap.get("expected_count"),
            "summary": snap.get("summary"), "verdict": snap.get("verdict"), "groups": groups,
            "groups_left_out": max(0, len(snap.get("groups", [])) - GROUPS_SHOWN)}


def _element(e: dict[str, Any]) -> dict[str, Any]:
    """A state on a path in an agent's terms: lane, state, seconds and slack (no epoch nanoseconds)."""
    return {"lane": e.get("lane"), "state": e.get("name"), "seconds": e.get("seconds"), "slack_s": e.get("slack_s")}


def step_case(path: dict[str, Any]) -> dict[str, Any]:
    """One step's critical path, its conclusion first (the answer may be cut at the end, never at the start)."""
    chain = " → ".join(f"{e['lane']} {e['name']} {e['seconds']:.2f} s" for e in path.get("elements", [])[:8])
    more = len(path.get("elements", [])) - 8
    w = path.get("what_if") or {}
    fixes = [(w.get("tail_s") or 0, "the long-tail replica finishing with the others"
              + (f" ({w['tail_lane']})" if w.get("tail_lane") else "")),
             (w.get("cut_s") or 0, f"not waiting for the slowest {w.get('cut_percent', 10):g} % of generations"),
             (w.get("bubbles_s") or 0, "removing the idle gaps on the path")]
    if "stage_s" in w:
        fixes.append((w["stage_s"], f"{w['stage']} {w['faster_percent']:g} % faster"))
    best = max(fixes, key=lambda f: f[0])
    sentence = (f"step {path['step']} took {path['duration_s']:.2f} s; its critical path: {chain}"
                + (f" and {more} more" if more > 0 else "") + f"; {path.get('bubbles_s', 0):.2f} s idle on it"
                + (f"; the biggest saving (estimate): {best[1]}, {best[0]:.2f} s" if best[0] > 0 else "") + ".")
    others = sorted(path.get("others", []), key=lambda e: e.get("slack_s", 0))[:20]  # the nearest first
    out = {"sentence": sentence, "step": path["step"], "duration_s": path["duration_s"],
           "bubbles_s": path.get("bubbles_s"), "path": [_element(e) for e in path.get("elements", [])],
           "gaps_s": [g.get("seconds") for g in path.get("gaps", [])], "by_stage": path.get("by_stage"),
           "by_lane": path.get("by_lane"), "what_if": w, "nearest_others": [_element(e) for e in others]}
    if path.get("critical_trajectory"):
        out["critical_trajectory"] = path["critical_trajectory"]
    return out


def diff_case(d: dict[str, Any], per_step: bool, offset: int, limit: int) -> dict[str, Any]:
    """Two runs' diff, its conclusion first; the aligned steps only when asked, a page at a time."""
    out: dict[str, Any] = {"sentence": d.get("sentence"), "names": d.get("names"),
                           "aligned_steps": d.get("aligned_steps")}
    for k in ("median_a_s", "median_b_s", "mean_delta_s", "change", "significant", "noise_s", "threshold_s"):
        if k in d:
            out[k] = d[k]
    out["ledger"] = d.get("ledger")
    out["by_stage"], out["by_class"] = d.get("by_stage"), d.get("by_class")
    out["lanes"] = (d.get("lanes") or [])[:12]
    out["savings_b"], out["pending_steps"] = d.get("savings_b"), d.get("pending_steps")
    rows = d.get("steps") or []
    if per_step:
        start, size = max(0, offset), max(1, min(limit, 500))
        out["steps"] = rows[start:start + size]
        out["next_offset"] = start + size if start + size < len(rows) else None
    out["steps_total"] = len(rows)
    if not per_step:
        out["steps_note"] = "per-step rows left out: run_diff(per_step=true, offset=0, limit=50) pages them"
    return out


def _said(read: Callable[..., str]) -> Callable[..., str]:
    """A tool whose read failed (no such run, the server away, a refused token) answers the error in words, as the
    CLI says it, instead of an opaque tool failure."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(read)
    def tool(*args: Any, **kwargs: Any) -> str:
        try:
            return read(*args, **kwargs)
        except RLInsightError as exc:
            raise ToolError(str(exc)) from None
    return tool


def _latest_snapshot(server: Server, run_id: int) -> str | None:
    listed = server.request("GET", f"/api/v1/runs/{run_id}/stacks")["snapshots"]
    return listed[0]["id"] if listed else None


def build(server: Server) -> Any:
    """The MCP server and its tools, each a read of `server`."""
    from mcp.server.mcpserver import MCPServer

    from .._version import __version__

    app = MCPServer("rl-insight", version=__version__, instructions=(
        "Read-only access to an rl-insight monitor of reinforcement-learning training runs: runs and their status, "
        "why a run is stuck (verdict), where its processes are (stack snapshot groups), one step's critical path, "
        "and where one run's time went against another's. Runs are named PROJECT/EXPERIMENT or by id."))

    @app.tool()
    @_said
    def runs(project: Optional[str] = None, status: Optional[str] = None, limit: int = 50) -> str:
        """The runs, newest activity first: id, project, experiment, status (live, stalled, hung, idle, finished,
        lost), why (stalled or hung), last step. Filter by project or status."""
        params = {"limit": max(1, min(limit, 500)), **({"project": project} if project else {}),
                  **({"status": status} if status else {})}
        listed = server.request("GET", "/api/v1/runs", params=params)["runs"]
        return bounded([{k: r.get(k) for k in ("id", "project", "experiment_name", "status", "why", "last_step",
                                                "last_seen")} for r in listed])

    @app.tool()
    @_said
    def verdict(run: str) -> str:
        """Why a run is stuck: the verdict of its latest stack snapshot — class, culprit lanes and hosts, the collective
        (op, sequence number), the RL phase and step, the evidence and what to check next."""
        return bounded(server.request("GET", f"/api/v1/runs/{resolve_run(server, run)}/verdict"))

    @app.tool()
    @_said
    def findings(run: str, kind: Optional[str] = None) -> str:
        """What the detectors found in a run, one shape for every kind: a hung job, a rank or replica that makes
        every step slower (kind `straggler`) — subject, cause, steps, what it costs a step, evidence, what next."""
        params = {"kind": kind} if kind else None
        return bounded(server.request("GET", f"/api/v1/runs/{resolve_run(server, run)}/findings", params=params))

    @app.tool()
    @_said
    def stack_groups(run: str, snapshot: Optional[str] = None) -> str:
        """Where every process of a run was at its latest stack snapshot (or the one named): the sentence, the verdict,
        and the groups of identical call paths with the odd ones out."""
        run_id = resolve_run(server, run)
        snapshot = snapshot or _latest_snapshot(server, run_id)
        if snapshot is None:
            return bounded({"snapshot": None, "note": "this run has no stack snapshot yet (the server takes one "
                                                      "by itself when the run stalls; `rl-insight diagnose` "
                                                      "takes one now)"})
        return bounded(_snapshot_brief(server.request("GET", f"/api/v1/runs/{run_id}/stacks/{snapshot}")))

    @app.tool()
    @_said
    def explain_step(run: str, step: Optional[int] = None) -> str:
        """One step's critical path (the last complete one unless named), its conclusion first: the sentence, then the
        chain of states that set its length (lane, state, seconds, slack), the idle gaps on it, seconds by stage and
        by lane, what-if savings, and the nearest other states."""
        params = {} if step is None else {"step": step}
        path = server.request("GET", f"/api/v1/runs/{resolve_run(server, run)}/critical-path", params=params)
        return bounded(step_case(path))

    @app.tool()
    @_said
    def run_diff(a: str, b: str, steps: Optional[str] = None, per_step: bool = False, offset: int = 0,
                 limit: int = 50) -> str:
        """Where run B's time went against run A's: the sentence first, then the change, by stage, by lane class, the
        lanes that changed most, where B's extra device time went, and B's biggest fix. `steps` (e.g. "10-200")
        narrows both runs to a step range; `per_step` adds the aligned steps, `limit` at a time from `offset`
        (`next_offset` says where the next page starts)."""
        params: dict[str, Any] = {"a": resolve_run(server, a), "b": resolve_run(server, b)}
        if steps:
            params["steps"] = steps
        return bounded(diff_case(server.request("GET", "/api/v1/runs/diff", params=params), per_step, offset, limit))

    return app


def mcp(
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> None:
    """An MCP server on stdio for AI agents: read-only tools over the monitor's runs, verdicts, stack snapshots,
    critical paths and run diffs (the `mcp` extra: pip install "rl-insight[mcp]")."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        from ..errors import MissingExtraError

        raise MissingExtraError("the MCP server needs the `mcp` package (2.x)", hint='pip install "rl-insight[mcp]"')
    build(require_server(home, server_url, token, None)).run("stdio")
