"""`rl-insight stacks`: where is every process of a running job now? The stacks of every thread of the run's
processes (or those chosen), grouped, with the odd ones out named (server/rooms/stacks/book.py does the work).

    rl-insight stacks --run demo/hang                ask, wait, print the sentence and the groups
    rl-insight stacks --run 3 --ranks 0-7 --native   only ranks 0-7, with py-spy's native frames
    rl-insight stacks --run 3 --list | --show ID     the run's snapshots; one of them again
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import InvalidInputError, NotFoundError
from ..protocol import DEFAULT_STACK_DEADLINE_S
from ..protocol.stacks import MAX_WAIT_S
from .options import HomeOpt, ServerUrlOpt, TokenOpt, echo_table, int_ranges
from .reach import Server, require_server

FRAMES_SHOWN = 12  # innermost frames printed per group (--json has them all)


def _csv(text: Optional[str]) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def resolve_run(server: Server, run: str) -> int:
    """`--run` as a run id: a number is one; PROJECT/EXPERIMENT is looked up in the server's runs."""
    if run.isdigit():
        return int(run)
    project, sep, experiment = run.partition("/")
    if not sep or not project or not experiment:
        raise InvalidInputError(f"--run {run!r}: give PROJECT/EXPERIMENT or a run id")
    runs = server.request("GET", "/api/v1/runs", params={"project": project})["runs"]
    found = [r["id"] for r in runs if r["project"] == project and r["experiment_name"] == experiment]
    if not found:
        raise NotFoundError(f"no run {run} on {server.url}", hint="`rl-insight runs list` shows the runs it holds")
    return max(found)


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _ago(ns: int | None, now_ns: int) -> str:
    return f"{max(0.0, (now_ns - ns) / 1e9):.0f} s" if ns else "?"


def _member(m: dict[str, Any], answered: bool, now_ns: int) -> list[str]:
    """A group member's line: its lanes' states, when it was last seen (no answer), its step and resources."""
    states = ", ".join(f"{'' if s['lane'] == m['label'] else s['lane'] + ' '}in {s['state']} for "
                       f"{_ago(s.get('since_ns'), now_ns)}" for s in m.get("states") or [])
    seen = f"last seen {_ago(m.get('last_seen_ns'), now_ns)} ago" if not answered else ""
    res = (f"step {m['step']}, " if m.get("step") is not None else "") + \
        (f"RSS {_size(m['rss_bytes'])}, CPU {m['cpu_s']:.0f} s" if m.get("rss_bytes") and
         m.get("cpu_s") is not None else "")
    extra = "; ".join(x for x in (states, seen, res.rstrip(", ")) if x)
    return [f"    {m['label']}: {extra}"] if extra else []


def _frames(g: dict[str, Any], frames_shown: int) -> list[str]:
    """A group's stack, innermost last, and the C frames under the Python ones."""
    out = []
    frames = g.get("frames") or []
    for f in frames[-frames_shown:]:
        code = f"    {f['code']}" if f.get("code") else ""
        out.append(f"      {f['file']}:{f['line']} {f['func']}{code}")
    if len(frames) > frames_shown:
        out.append(f"      ({len(frames) - frames_shown} outer frames not shown; --json has them)")
    c_frames = [f for f in g.get("native") or [] if f["line"] == 0][-4:]
    if c_frames:
        out.append("    native (py-spy): " + " ← ".join(f"{f['func']} ({f['file'].rsplit('/', 1)[-1]})"
                                                        for f in reversed(c_frames)))
    return out


def describe(snap: dict[str, Any], frames_shown: int = FRAMES_SHOWN) -> list[str]:
    """A completed snapshot as text: the sentence, then each group with its members' states and its stack."""
    now_ns = int(snap.get("completed_at", time.time()) * 1e9)
    took = snap.get("completed_at", snap["created_at"]) - snap["created_at"]
    head = (f"stack snapshot {snap['id']} of {snap['project']}/{snap['experiment_name']}: {snap['answered']} of "
            f"{snap['expected_count']} processes answered in {took:.1f} s" + (f" ({snap['origin']}: {snap['reason']})"
                                                                               if snap.get("reason") else ""))
    out = [head, "", snap.get("summary", ""), ""]
    if snap.get("note"):
        out.insert(1, f"note: {snap['note']}")
    for i, g in enumerate(snap.get("groups", []), 1):
        tag = "  ODD ONE OUT" if g.get("odd_one_out") else ("  NO ANSWER" if not g["answered"] else "")
        out.append(f"group {i} — {g['size']}: {g['labels']}{tag}")
        if g["answered"]:
            out.append(f"  in {g['where']['text']}")
        out += [line for m in g["members"][:8] for line in _member(m, g["answered"], now_ns)]
        if len(g["members"]) > 8:
            out.append(f"    … {len(g['members']) - 8} more")
        out += _frames(g, frames_shown)
        out.append("")
    native = {r.get("native_state") for r in (snap.get("reports") or {}).values()}
    if native - {"ok", "not_asked", None}:
        messages = {r["native_message"] for r in snap["reports"].values() if r.get("native_state") not in ("ok",)}
        out.append("native frames: " + "; ".join(sorted(m for m in messages if m)))
    return out


def take(server: Server, run_id: int, body: dict[str, Any], deadline: float, say: bool = True) -> dict[str, Any]:
    """Ask for a snapshot and wait for it (the server waits up to 40 s for processes that hold a state and still
    beat); the snapshot as it is when complete, or when waiting ran out."""
    base = f"/api/v1/runs/{run_id}/stacks"
    snap = server.request("POST", base, json=body)
    if say:
        typer.echo(f"Asked {snap['expected_count']} process(es) for their stacks; waiting {deadline:.0f} s (up to "
                   f"{max(deadline, MAX_WAIT_S):.0f} s for a process that holds a state and still beats) …", err=True)
    end = time.monotonic() + max(deadline, MAX_WAIT_S) + 10
    while snap["state"] == "pending" and time.monotonic() < end:
        time.sleep(0.5)
        snap = server.request("GET", f"{base}/{snap['id']}")
    return snap


def stacks(
    run: str = typer.Option(..., "--run", help="The run: PROJECT/EXPERIMENT or its run id (the number in the UI)."),
    ranks: Optional[str] = typer.Option(None, help="Only these ranks, e.g. 0,3 or 0-7."),
    lanes: Optional[str] = typer.Option(None, help="Only processes with these lanes (comma list, as on the timeline)."),
    roles: Optional[str] = typer.Option(None, help="Only processes of these roles (comma list)."),
    native: bool = typer.Option(False, "--native", help="Add native frames (py-spy in the job's environment, where "
                                                       "ptrace is permitted)."),
    deadline: float = typer.Option(DEFAULT_STACK_DEADLINE_S, "--deadline", help="Seconds to wait for answers; an "
                                   "idle process hears within its 10 s heartbeat."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait for the snapshot and print it (default), or print "
                                                            "its id and return."),
    as_json: bool = typer.Option(False, "--json", help="Print the snapshot as JSON (with every process's answer)."),
    list_: bool = typer.Option(False, "--list", help="List the run's snapshots instead of taking one."),
    show: Optional[str] = typer.Option(None, "--show", help="Print this snapshot of the run again."),
    exact_lines: bool = typer.Option(False, "--exact-lines", help="Group by line too: two lines of one function are "
                                                                 "two places (default: grouped by function)."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Stack snapshot of a running (or hung) job: every thread of its processes, grouped by call path, the odd
    ones out named; processes that do not answer are listed as suspects."""
    server = require_server(home, server_url, token, None)
    run_id = resolve_run(server, run)
    base = f"/api/v1/runs/{run_id}/stacks"
    if list_:
        items = server.request("GET", base)["snapshots"]
        if as_json:
            typer.echo(json.dumps(items, indent=2))
            return 0
        echo_table([[s["id"], time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s["created_at"])), s["origin"],
                     s["state"], f"{s['answered']}/{s['expected_count']}", (s.get("summary") or "")[:100]]
                    for s in items], ["id", "taken", "origin", "state", "answered", "summary"])
        return 0
    if show is None:
        body = {"lanes": _csv(lanes), "roles": _csv(roles), "ranks": int_ranges(ranks, "--ranks"), "native": native,
                "deadline_s": deadline}
        if not wait:
            snap = server.request("POST", base, json=body)
            typer.echo(f"Asked {snap['expected_count']} process(es) for their stacks: snapshot {snap['id']}. "
                       f"See it with `rl-insight stacks --run {run} --show {snap['id']}`.")
            return 0
        show = take(server, run_id, body, deadline)["id"]
    snap = server.request("GET", f"{base}/{show}", params={"reports": "true", "exact": str(exact_lines).lower()})
    if as_json:
        typer.echo(json.dumps(snap, indent=2))
    elif snap["state"] == "pending":
        typer.echo(f"snapshot {snap['id']}: still collecting ({snap['answered']} of {snap['expected_count']} answered)")
    else:
        for line in describe(snap):
            typer.echo(line)
    return 0 if snap["state"] == "complete" else 1
