"""`rl-insight findings`: what the detectors found in a run, one shape for every kind (semantics/findings.py) — a
hung job, a lane that makes every step slower — with the cause, the steps, the evidence and what to check next.

    rl-insight findings --run demo/straggler            every finding, as text
    rl-insight findings --run 3 --kind straggler --json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import InvalidInputError
from ..semantics.findings import BY_NAME
from .call_stacks import resolve_run
from .options import HomeOpt, ServerUrlOpt, TokenOpt
from .reach import require_server


def describe(answer: dict[str, Any]) -> list[str]:
    """The findings as text: each one's sentence, then its evidence and what to check next."""
    found = answer["findings"]
    if not found:
        return [f"run {answer['run_id']}: no findings (no hang verdict, no lane slower than its peers)"]
    out = [f"run {answer['run_id']}: {len(found)} finding(s)"]
    for f in found:
        state = "open" if f.get("open") else "ended"
        steps = f"steps {f['first_step']}–{f['last_step']}" if f.get("first_step") is not None else "no step"
        out += ["", f"[{f['kind']}] {f['subject']}: {f['cause']} ({steps}, {state}, confidence "
                    f"{f['confidence']:.2f})", f"  {f['sentence']}"]
        out += [f"  - {e}" for e in f["evidence"]]
        if f["next"]:
            out.append("  check next:")
            out += [f"    - {n}" for n in f["next"]]
    return out


def findings(
    run: str = typer.Option(..., "--run", help="The run: PROJECT/EXPERIMENT or its run id (the number in the UI)."),
    kind: Optional[str] = typer.Option(None, "--kind", help="Only findings of this kind: " + ", ".join(BY_NAME)
                                       + "."),
    as_json: bool = typer.Option(False, "--json", help="Print the answer as JSON (GET /api/v1/runs/ID/findings)."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """What the detectors found in a run: a hung job, a rank or replica that makes every step slower — each with its
    cause, steps, evidence and what to check next. Exits 1 when a finding is open."""
    if kind is not None and kind not in BY_NAME:
        raise InvalidInputError(f"--kind {kind!r} is no kind of finding", hint="kinds: " + ", ".join(BY_NAME))
    server = require_server(home, server_url, token, None)
    run_id = resolve_run(server, run)
    answer = server.request("GET", f"/api/v1/runs/{run_id}/findings", params={"kind": kind} if kind else None)
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
    else:
        for line in describe(answer):
            typer.echo(line)
    return 1 if any(f.get("open") for f in answer["findings"]) else 0
