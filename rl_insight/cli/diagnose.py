"""`rl-insight diagnose`: why is this job stuck? The verdict of a stack snapshot — its class, the culprit ranks and
hosts, the collective, the RL phase and step, the evidence and what to check next (server/rooms/stacks/verdict.py).

    rl-insight diagnose --run demo/hang            take a snapshot now, print the verdict
    rl-insight diagnose --run 3 --latest --json    the verdict of the latest snapshot (the server's own, after a stall)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..protocol import DEFAULT_STACK_DEADLINE_S
from .call_stacks import resolve_run, take
from .options import HomeOpt, ServerUrlOpt, TokenOpt
from .reach import require_server


def describe(answer: dict[str, Any]) -> list[str]:
    """The verdict as text: the run's status, the sentence, the evidence, what to check next."""
    v = answer.get("verdict")
    snap = answer.get("snapshot") or {}
    status = answer["status"] + (f" ({answer['why']})" if answer.get("why") else "")
    out = [f"run {answer['run_id']}: {status}"]
    if v is None:
        out.append("no verdict: no stack snapshot of this run is complete (take one: rl-insight diagnose without "
                   "--latest)")
        return out
    out += ["", v["sentence"], ""]
    if v["evidence"]:
        out.append("evidence:")
        out += [f"  - {e}" for e in v["evidence"]]
    if v["next"]:
        out.append("check next:")
        out += [f"  - {n}" for n in v["next"]]
    if snap:
        out += ["", f"from stack snapshot {snap.get('id')} ({snap.get('origin')}; {snap.get('answered')} of "
                    f"{snap.get('expected_count')} processes answered): {snap.get('summary', '')}"]
    return out


def diagnose(
    run: str = typer.Option(..., "--run", help="The run: PROJECT/EXPERIMENT or its run id (the number in the UI)."),
    latest: bool = typer.Option(False, "--latest", help="The verdict of the run's latest snapshot (the server takes "
                                                        "one by itself when a run stalls) instead of taking one now."),
    native: bool = typer.Option(False, "--native", help="Add native frames to the snapshot (py-spy)."),
    deadline: float = typer.Option(DEFAULT_STACK_DEADLINE_S, "--deadline", help="Seconds to wait for answers."),
    as_json: bool = typer.Option(False, "--json", help="Print the verdict as JSON: class, culprits, collective (op, "
                                                       "seq), phase, step, evidence, next."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Why a running job is stuck: one verdict from its lanes, stacks and flight-recorder entries — the culprit
    ranks, the collective, the RL phase, and what to check next."""
    server = require_server(home, server_url, token, None)
    run_id = resolve_run(server, run)
    if not latest:
        take(server, run_id, {"native": native, "deadline_s": deadline}, deadline, say=not as_json)
    answer = server.request("GET", f"/api/v1/runs/{run_id}/verdict")
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
    else:
        for line in describe(answer):
            typer.echo(line)
    return 0 if answer.get("verdict") else 1
