"""`rl-insight profile …`: profile chosen steps on chosen ranks of a running job, from the monitor.

request / list / show / cancel / fetch talk to the server's /api/v1/profiles; `request --emit-verl-config`
prints verl's own profiler overrides instead (nsys, npu, torch_memory users), and `upload` sends what
verl's profiler wrote into the same view.
"""

from __future__ import annotations

import gzip
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import InvalidInputError
from ..protocol import DEFAULT_PROFILE_ACTIVITIES, DEFAULT_PROFILE_TTL_S, DEFAULT_PROFILE_WINDOW_S, parse_steps
from .options import HomeOpt, ServerUrlOpt, TokenOpt, echo_table, int_ranges
from .reach import Server, require_server

profile_app = typer.Typer(
    rich_markup_mode=None,  # help is plain text: `[service]` stays, no markup is eaten
    help="Profile chosen steps on chosen ranks of a running job (torch.profiler, on request).",
    no_args_is_help=True)

RunOpt = typer.Option(..., "--run", help="The run: PROJECT/EXPERIMENT or its run id (the number in the UI's address).")
VERL_ROLES = {
    "actor": "actor_rollout_ref.actor",
    "ref": "actor_rollout_ref.ref",
    "rollout": "actor_rollout_ref.rollout",
    "critic": "critic",
    "reward_model": "reward_model",
}
VERL_TOOLS = ("torch", "nsys", "npu", "torch_memory")
UPLOADABLE = (".json.gz", ".json", ".sqlite", ".pickle", ".pkl")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?)?\s*$", re.I)


def _csv(text: Optional[str]) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _ranks(text: Optional[str]) -> list[int]:
    return int_ranges(text, "--ranks")


def _bytes(text: str) -> int:
    m = _SIZE.match(text)
    if not m:
        raise InvalidInputError(f"--max-bytes {text!r}: give a size like 256MiB or 1GiB")
    unit = (m.group(2) or "").upper()[:1]
    return int(float(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[unit])


def _run_fields(run: str) -> dict[str, Any]:
    if run.isdigit():
        return {"run_id": int(run)}
    project, sep, experiment = run.partition("/")
    if not sep or not project or not experiment:
        raise InvalidInputError(f"--run {run!r}: give PROJECT/EXPERIMENT or a run id")
    return {"project": project, "experiment_name": experiment}


def _steps(text: str) -> tuple[int, int]:
    try:  # the contract's grammar, the same the server reads
        return parse_steps(text)
    except ValueError as exc:
        raise InvalidInputError(f"--{exc}") from None


def verl_overrides(first: int, last: int, roles: list[str], ranks: list[int], tool: str, activities: list[str],
                   memory: bool, stack: bool, save_path: str) -> list[str]:
    """verl's own profiler, configured for the same steps and ranks (Hydra overrides for main_ppo)."""
    if tool not in VERL_TOOLS:
        raise InvalidInputError(f"--tool {tool!r}: verl's profiler tools are {', '.join(VERL_TOOLS)}")
    unknown = [r for r in roles if r not in VERL_ROLES]
    if unknown:
        raise InvalidInputError(f"--roles {','.join(unknown)}: verl's profiled roles are {', '.join(VERL_ROLES)}")
    steps = list(range(first, last + 1))
    out = [f"global_profiler.tool={tool}", f"global_profiler.steps=[{','.join(map(str, steps))}]",
           f"global_profiler.profile_continuous_steps={len(steps) > 1}", f"global_profiler.save_path={save_path}"]
    for role in roles or ["actor"]:
        key = VERL_ROLES[role]
        out += [f"{key}.profiler.enable=True", f"{key}.profiler.all_ranks={not ranks}"]
        if ranks:
            out.append(f"{key}.profiler.ranks=[{','.join(map(str, ranks))}]")
        if tool == "torch":
            contents = list(activities) + (["memory"] if memory else []) + (["stack"] if stack else [])
            out.append(f"{key}.profiler.tool_config.torch.contents=[{','.join(contents)}]")
            out.append(f"{key}.profiler.tool_config.torch.discrete={len(steps) == 1}")
    return out


def _client(server_url: Optional[str], token: Optional[str], home: Optional[Path]) -> Server:
    return require_server(home, server_url, token, None)


def _describe(p: dict[str, Any], url: str) -> None:
    req = p["request"]
    sel = (
        ", ".join(f"{k} {','.join(map(str, req[k]))}" for k in ("lanes", "roles", "ranks") if req[k]) or "every process"
    )
    stage = f" (stage {req['stage']})" if req.get("stage") else ""
    typer.echo(f"profile {p['id']}: {p['state']} — {req['project']}/{req['experiment_name']} steps "
               f"{req['steps'][0]}-{req['steps'][1]}{stage}, {sel}, {','.join(req['activities'])}")
    if p.get("passed") and not p["processes"]:
        typer.echo(f"  {p['passed']['message']}")
    for proc in p["processes"].values():
        who = f"rank {proc['rank']}" if proc.get("rank") is not None else f"{proc['host']}:{proc['pid']}"
        typer.echo(f"  {who}: {proc['state']}" + (f" — {proc['message']}" if proc.get("message") else ""))
    for name, f in p["files"].items():
        typer.echo(
            f"  trace {name}: {f['bytes']:,} of {f['total']:,} bytes" + ("" if f["complete"] else " (uploading)")
        )
    a = p.get("analysis", {})
    if a.get("state") == "done":
        typer.echo(f"  analysis: {url}/api/v1/profiles/{p['id']}/report/timeline.html ({a.get('events', 0):,} events)")
        _top(a.get("operators") or {})
    elif a.get("state") not in (None, "none"):
        typer.echo(f"  analysis: {a.get('state')}" + (f" — {a.get('message')}" if a.get("message") else ""))


def _top(o: dict[str, Any], n: int = 10) -> None:
    """The profile's top operators and kernels (what torch's key_averages() table says), under its description."""
    def dur(s: float) -> str:
        return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"

    if o.get("operators"):
        typer.echo("\n  top CPU operators by self time:")
        echo_table([[r["name"][:70], str(r["calls"]), dur(r["self_s"]), dur(r["total_s"]), f"{r['self_pct']:.1f} %",
                     "comm" if r["comm"] else "compute",
                     "–" if r.get("peak_allocated_bytes") is None else f"{r['peak_allocated_bytes'] / 2**20:.1f} MiB"]
                    for r in o["operators"][:n]],
                   ["  OPERATOR", "CALLS", "SELF", "TOTAL", "SELF %", "KIND", "PEAK ALLOCATED"])
    if o.get("kernels"):
        typer.echo("\n  top device kernels by time:")
        echo_table([[r["name"][:70], str(r["calls"]), dur(r["total_s"]), f"{r['mean_us']:.1f} µs",
                     f"{r['share_pct']:.1f} %", "comm" if r["comm"] else "compute"] for r in o["kernels"][:n]],
                   ["  KERNEL", "CALLS", "TOTAL", "MEAN", "SHARE", "KIND"])


@profile_app.command("request")
def request(
    run: str = RunOpt,
    steps: str = typer.Option(
        ...,
        "--steps",
        help="One step (120), a range (120-121), or next (the step after the "
        "one running now), by the run's step clock.",
    ),
    lanes: Optional[str] = typer.Option(None, help="Only processes with these lanes (comma list, as on the timeline)."),
    roles: Optional[str] = typer.Option(None, help="Only processes of these roles (comma list)."),
    ranks: Optional[str] = typer.Option(None, help="Only these ranks, e.g. 0,3 or 0-7."),
    stage: str = typer.Option(
        "", "--stage", help="Only this state (a trace_state name, e.g. actor_update) of the one step given."
    ),
    tool: str = typer.Option("torch", help="torch (on request); with --emit-verl-config also nsys, npu, torch_memory."),
    activities: str = typer.Option(",".join(DEFAULT_PROFILE_ACTIVITIES), help="cpu, cuda (comma list)."),
    memory: bool = typer.Option(False, "--memory", help="Record allocations (profile_memory)."),
    stack: bool = typer.Option(False, "--stack", help="Record Python stacks (with_stack)."),
    ttl: float = typer.Option(
        DEFAULT_PROFILE_TTL_S, "--ttl", help="Seconds until the request expires when no process took it."
    ),
    max_window: float = typer.Option(
        DEFAULT_PROFILE_WINDOW_S, "--max-window", help="Seconds a profiling window may stay open."
    ),
    max_bytes: str = typer.Option("256MiB", "--max-bytes", help="Cap on each process's gzip'd trace."),
    emit_verl_config: bool = typer.Option(
        False, "--emit-verl-config", help="Print verl's own profiler overrides for these steps and ranks instead."
    ),
    save_path: str = typer.Option("outputs/profile", "--save-path", help="With --emit-verl-config: verl's save_path."),
    wait: float = typer.Option(0.0, "--wait", help="Wait up to this many seconds for the traces and their analysis."),
    before_start: bool = typer.Option(False, "--before-start", help="The job has not started yet: keep the request "
                                                                    "for its run instead of refusing an unknown run."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Profile steps of a running job on the matching processes: the request rides on the ingest replies,
    each matching process runs torch.profiler for exactly those steps and uploads its trace."""
    if emit_verl_config:
        first, last = _steps(steps)
        for line in verl_overrides(
            first, last, _csv(roles), _ranks(ranks), tool, _csv(activities), memory, stack, save_path
        ):
            typer.echo(line)
        typer.echo(
            f"# then, after the job wrote its traces: rl-insight profile upload {save_path} --run {run} --steps "
            f"{steps}",
            err=True,
        )
        return 0
    if tool != "torch":
        raise InvalidInputError(f"--tool {tool}: on-request profiling runs torch.profiler; for {tool} use "
                                "--emit-verl-config")
    server = _client(server_url, token, home)
    url = server.url
    body = {**_run_fields(run), "steps": steps, "lanes": _csv(lanes), "roles": _csv(roles), "ranks": _ranks(ranks),
            "activities": _csv(activities), "memory": memory, "stack": stack, "ttl_s": ttl, "max_window_s": max_window,
            "max_bytes": _bytes(max_bytes), "stage": stage, "wait_for_run": before_start}
    if steps.strip().lower() != "next":
        _steps(steps)  # said here, before the server is asked
    p = server.request("POST", "/api/v1/profiles", json=body)
    first, last = p["request"]["steps"]
    typer.echo(
        f"Requested profile {p['id']}: steps {first}-{last} of "
        f"{p['request']['project']}/{p['request']['experiment_name']}. "
        f"Watch it with `rl-insight profile show {p['id']}`."
    )
    if wait > 0:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            p = server.request("GET", f"/api/v1/profiles/{p['id']}")
            if p["state"] in ("done", "failed", "cancelled", "expired") and p.get("analysis", {}).get("state") not in (
                "pending",
                "running",
            ):
                break
            time.sleep(1.0)
        _describe(p, url)
        return 0 if p["state"] == "done" else 1
    return 0


@profile_app.command("list")
def list_(
    run: Optional[str] = typer.Option(None, "--run", help="Only this run (PROJECT/EXPERIMENT or run id)."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Profile requests, newest first."""
    server = _client(server_url, token, home)
    items = server.request("GET", "/api/v1/profiles", params=_run_fields(run) if run else None)["profiles"]
    if not items:
        typer.echo("No profile requests.")
        return 0
    rows = [
        [
            p["id"],
            p["state"],
            f"{p['request']['project']}/{p['request']['experiment_name']}",
            f"{p['request']['steps'][0]}-{p['request']['steps'][1]}",
            str(sum(1 for x in p["processes"].values() if x["state"] == "uploaded")),
            p.get("analysis", {}).get("state", ""),
        ]
        for p in items
    ]
    echo_table(rows, ["ID", "STATE", "RUN", "STEPS", "TRACES", "ANALYSIS"])
    return 0


@profile_app.command("show")
def show(profile_id: str = typer.Argument(..., help="The request's id."), server_url: Optional[str] = ServerUrlOpt,
         token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """One request: what each process did, the traces, the analysis."""
    server = _client(server_url, token, home)
    url = server.url
    _describe(server.request("GET", f"/api/v1/profiles/{profile_id}"), url)
    return 0


@profile_app.command("analyze")
def analyze_again(profile_id: str = typer.Argument(..., help="The request's id."),
                  wait: float = typer.Option(120.0, "--wait", help="Seconds to wait for the analysis (0: no wait)."),
                  server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
                  home: Optional[Path] = HomeOpt) -> int:
    """Analyse a profile taken before again, with this version's analysis (top operators and kernels, memory by
    operator, the stages), on the server that keeps its traces; then show it."""
    import time

    server = _client(server_url, token, home)
    p = server.request("POST", f"/api/v1/profiles/{profile_id}/analyze")
    deadline = time.monotonic() + wait
    while p.get("analysis", {}).get("state") in ("pending", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
        p = server.request("GET", f"/api/v1/profiles/{profile_id}")
    _describe(p, server.url)
    return 0 if p.get("analysis", {}).get("state") in ("done", "pending", "running") else 1


@profile_app.command("cancel")
def cancel(profile_id: str = typer.Argument(..., help="The request's id."), server_url: Optional[str] = ServerUrlOpt,
           token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Cancel: armed processes disarm; a process that is profiling stops and discards at its next step boundary."""
    server = _client(server_url, token, home)
    p = server.request("DELETE", f"/api/v1/profiles/{profile_id}")
    typer.echo(f"profile {p['id']}: {p['state']}")
    return 0


@profile_app.command("fetch")
def fetch(
    profile_id: str = typer.Argument(..., help="The request's id."),
    out: Path = typer.Option(Path("."), "--out", help="Directory to write the traces and the report into."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Download a request's traces (and its analysis) for `rl-insight analyze`, Perfetto or HTA."""
    import httpx

    server = _client(server_url, token, home)
    url, headers = server.url, server.headers
    p = server.request("GET", f"/api/v1/profiles/{profile_id}")
    target = out / f"profile-{profile_id}"
    target.mkdir(parents=True, exist_ok=True)
    wrote = []
    names = [(f"/files/{n}", n) for n, f in p["files"].items() if f["complete"]]
    if p.get("analysis", {}).get("state") == "done":
        names += [
            (f"/report/{n}", f"report/{n}")
            for n in ("timeline.html", "trace.perfetto.json", "summary.json", "summary.md")
        ]
    for route, rel in names:
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        with httpx.stream(
            "GET", f"{url}/api/v1/profiles/{profile_id}{route}", headers=headers, timeout=60, trust_env=False
        ) as r:
            if r.status_code != 200:
                continue
            with open(dest, "wb") as f:
                for chunk in r.iter_bytes():
                    f.write(chunk)
        wrote.append(dest)
    if not wrote:
        typer.echo(f"profile {profile_id} has no traces yet ({p['state']}).")
        return 1
    typer.echo("Wrote:")
    for w in wrote:
        typer.echo(f"  {w}")
    return 0


@profile_app.command("upload")
def upload(
    directory: Path = typer.Argument(
        ..., exists=True, file_okay=True, help="What verl's profiler wrote (its save_path)."
    ),
    run: str = RunOpt,
    steps: str = typer.Option("0", "--steps", help="The steps profiled (for the view)."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Upload traces verl's own profiler wrote (torch .json.gz, nsys .sqlite exports, torch_memory pickles) into
    the run's profiles, where they are analysed like on-request ones."""
    files = (
        [directory]
        if directory.is_file()
        else sorted(p for p in directory.rglob("*") if p.is_file() and p.name.endswith(UPLOADABLE))
    )
    if not files:
        raise InvalidInputError(f"no traces under {directory} (looked for {', '.join(UPLOADABLE)})")
    server = _client(server_url, token, home)
    body = {**_run_fields(run), "steps": steps, "activities": ["cpu"], "ttl_s": 86400.0, "max_bytes": 2 * 2**30}
    p = server.request("POST", "/api/v1/profiles", json={**body, "origin": "upload"})
    rid = p["id"]
    proc = {"host": socket.gethostname(), "pid": os.getpid(), "lanes": [], "roles": ["upload"]}
    server.request(
        "POST",
        f"/api/v1/profiles/{rid}/status",
        json={"state": "uploading", "process": proc, "message": f"{len(files)} file(s) from {directory}"},
    )
    sent = 0
    for f in files:
        data = f.read_bytes()
        name = f.name
        if name.endswith(".json"):
            data, name = gzip.compress(data, 6), name + ".gz"
        name = re.sub(r"[^A-Za-z0-9._=+-]", "-", name)[-180:].lstrip("-.") or "trace.json.gz"
        for off in range(0, len(data), 4 * 2**20):
            server.request(
                "POST",
                f"/api/v1/profiles/{rid}/upload/{name}",
                headers={"Content-Type": "application/octet-stream"},
                params={"offset": off, "total": len(data)},
                content=data[off : off + 4 * 2**20],
            )
        sent += 1
        typer.echo(f"  uploaded {f} ({len(data):,} bytes)")
    server.request("POST", f"/api/v1/profiles/{rid}/status",
             json={"state": "uploaded", "process": proc, "message": f"{sent} file(s) uploaded from {directory}"})
    typer.echo(f"Uploaded {sent} file(s) as profile {rid}; `rl-insight profile show {rid}` follows the analysis.")
    return 0
