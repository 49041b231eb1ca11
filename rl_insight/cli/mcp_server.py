"""`rl-insight mcp`: the case file of a stuck or slow run for an AI agent — the same evidence a person sees, as
read-only tools of a Model Context Protocol server on stdio (the `mcp` package from PyPI).

Tools: the runs (with their status and why), a run's verdict, its latest stack snapshot's groups, one step's
critical path explained, and the diff of two runs. Each tool is one GET of the server's API with the same token a
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
    text = json.dumps(answer, indent=1, default=str)
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


def build(server: Server) -> Any:
    """The MCP server and its tools, each a read of `server`."""
    from mcp.server.mcpserver import MCPServer

    app = MCPServer("rl-insight", instructions=(
        "Read-only access to an rl-insight monitor of reinforcement-learning training runs: runs and their status, "
        "why a run is stuck (verdict), where its processes are (stack snapshot groups), one step's critical path, "
        "and where one run's time went against another's. Runs are named PROJECT/EXPERIMENT or by id."))

    @app.tool()
    @_said
    def runs(project: Optional[str] = None, status: Optional[str] = None, limit: int = 50) -> str:
        """The runs, newest activity first: id, project, experiment, status (live, stalled, hung, idle, finished,
        lost), why (stalled or hung), last step. Filter by project or status."""
        params: dict[str, Any] = {"limit": max(1, min(limit, 500))}
        if project:
            params["project"] = project
        if status:
            params["status"] = status
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
    def stack_groups(run: str, snapshot: Optional[str] = None) -> str:
        """Where every process of a run was at its latest stack snapshot (or the one named): the sentence, the verdict,
        and the groups of identical call paths with the odd ones out."""
        run_id = resolve_run(server, run)
        if snapshot is None:
            listed = server.request("GET", f"/api/v1/runs/{run_id}/stacks")["snapshots"]
            if not listed:
                return bounded({"snapshot": None, "note": "this run has no stack snapshot yet (the server takes one "
                                                          "by itself when the run stalls; `rl-insight diagnose` "
                                                          "takes one now)"})
            snapshot = listed[0]["id"]
        return bounded(_snapshot_brief(server.request("GET", f"/api/v1/runs/{run_id}/stacks/{snapshot}")))

    @app.tool()
    @_said
    def explain_step(run: str, step: Optional[int] = None) -> str:
        """One step's critical path (the last complete one unless named): the chain of states that set its length,
        each with its slack, the idle gaps on it, seconds by stage and by lane, and what-if savings."""
        params = {} if step is None else {"step": step}
        path = server.request("GET", f"/api/v1/runs/{resolve_run(server, run)}/critical-path", params=params)
        path["others"] = sorted(path.get("others", []), key=lambda e: e.get("slack_s", 0))[:20]  # the nearest first
        return bounded(path)

    @app.tool()
    @_said
    def run_diff(a: str, b: str) -> str:
        """Where run B's time went against run A's, step by step: the change, by stage, by lane class, the lanes that
        changed most, one sentence, and B's biggest fix."""
        return bounded(server.request("GET", "/api/v1/runs/diff", params={"a": resolve_run(server, a),
                                                                          "b": resolve_run(server, b)}))

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
