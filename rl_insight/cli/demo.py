"""`rl-insight demo`: a simulated verl job you can watch."""

from __future__ import annotations

import os
import subprocess
import time
import zlib
from pathlib import Path
from typing import Optional

import typer

from .. import env
from ..child import python_command, python_env
from ..errors import ServiceError
from ..services.home import Home
from ..services.state import StackState

FAULTS = ("xid", "npu", "hang", "slow-replica", "nan", "precision-drift", "kv-pressure", "straggler")


def _stack_url(home: Home) -> tuple[str, str, StackState | None]:
    """The running stack of this home, or start one in the background (embedded default)."""
    state = StackState.read(home)
    if state and state.supervisor_alive():
        typer.echo(
            f"Using the rl-insight server already running for {home.root} ({state.ingest_url}); the demo's run is "
            "stored there next to any other run."
        )
    if not (state and state.supervisor_alive()):
        typer.echo("No rl-insight server running: starting one in the background (stop it with `rl-insight server "
                   "stop`).")
        r = subprocess.run(python_command("rl_insight", "server", "start", "--detach", "--home", str(home.root),
                                          "--host", "127.0.0.1", "--auto-port"), capture_output=True, text=True,
                           env=python_env())
        if r.returncode != 0:
            raise ServiceError(f"could not start the server:\n{r.stdout}{r.stderr}")
        state = StackState.read(home)
        if state is None:
            raise ServiceError(f"the server started but wrote no readable state file ({home.state_file})")
        for moved in state.moved_ports:  # why the addresses below are not :18080 / :9090
            typer.echo(f"  {moved}")
    token = home.read_token() if state.token_required else ""
    return state.ingest_url, token, state


def _checked_choices(ctx: typer.Context, mode: str, engine: str, framework: str, fault: str | None) -> str:
    """A bad --mode, --engine, --framework or --fault refused by name; the engine the job rolls out with."""
    if mode not in ("sync", "async"):
        raise typer.BadParameter("mode must be sync or async", param_hint="--mode")
    if engine not in ("vllm", "sglang", "vllm-omni"):
        raise typer.BadParameter("engine must be vllm, sglang or vllm-omni", param_hint="--engine")
    if framework not in ("verl", "slime"):
        raise typer.BadParameter("framework must be verl or slime", param_hint="--framework")
    if fault not in (None, *FAULTS):
        raise typer.BadParameter(f"fault must be {', '.join(FAULTS[:-1])} or {FAULTS[-1]}", param_hint="--fault")
    if framework != "slime":
        return engine
    source = ctx.get_parameter_source("engine")
    if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP") and engine != "sglang":
        raise typer.BadParameter("slime rolls out with SGLang: leave --engine out or pass --engine sglang",
                                 param_hint="--engine")
    return "sglang"


def demo(
    ctx: typer.Context,
    mode: str = typer.Option(
        "sync", help="sync: generate then train; async: generation of step+1 overlaps training of step."
    ),
    steps: int = typer.Option(0, min=0, help="Steps to run; 0 runs until Ctrl+C."),
    replicas: int = typer.Option(4, min=1, max=64, help="Rollout replicas (lanes replica_0..)."),
    ranks: int = typer.Option(4, min=1, max=64, help="Trainer ranks (lanes rank_0..)."),
    engine: str = typer.Option("vllm", help="Stand-in rollout engine: vllm, sglang or vllm-omni."),
    step_seconds: float = typer.Option(4.0, min=0.5, help="Approximate wall time of one step."),
    server_url: Optional[str] = typer.Option(
        None, "--server-url", envvar=env.SERVER_URL, help="Send to this server instead of the local stack."
    ),
    token: Optional[str] = typer.Option(None, "--token", envvar=env.TOKEN),
    project: str = typer.Option("rl-insight-demo"),
    experiment_name: Optional[str] = typer.Option(None, help="Default: demo-<mode>-<time>."),
    home: Optional[Path] = typer.Option(None, "--home", envvar=env.HOME),
    fault: Optional[str] = typer.Option(
        None,
        help="Inject a fault: xid (GPU 0 reports XID 79) or npu (NPU 0 reports unhealthy) to see an alert fire "
        "(at step 2); hang (trainer rank ranks/2 never reaches the step's collective, at step 5: the job hangs; see "
        "`rl-insight stacks`); slow-replica (the last replica generates 3x slower from step 2: compare with a run "
        "without it, `rl-insight runs diff`); nan (actor/pg_loss turns NaN from step 2); precision-drift "
        "(training/rollout_probs_diff_mean climbs past 0.01 from step 2); kv-pressure (replica_0's KV cache stays "
        "above 95% from step 2); straggler (the last trainer rank does 50% more work in every phase from step 2: a "
        "finding names it, `rl-insight findings`, docs/findings.md). Each of the others fires its alert "
        "(docs/alerts.md).",
    ),
    fault_step: int = typer.Option(0, "--fault-step", min=0, help="Inject the fault at this step instead (0: the "
                                                                   "fault's default)."),
    seed: Optional[int] = typer.Option(
        None, "--seed", min=0, help="Random seed of the simulated values and timings (default: from the experiment "
        "name, so two runs differ and a rerun under the same name repeats)."),
    framework: str = typer.Option("verl", "--framework", help="verl, or slime: slime's metric keys (train/loss, "
                                  "rollout/rewards, perf/*_time, with role / rank labels), Megatron ranks and SGLang "
                                  "rollout (--engine sglang), as upstream's slime dashboard reads them."),
    moe: bool = typer.Option(False, "--moe", help="Log verl's rollout MoE load-balance metrics (rollout/moe/*) of a "
                             "simulated 12-layer, 16-expert model whose expert 5 of layer 7 gets hot: the run page's "
                             "MoE heatmap names it."),
    filter_share: float = typer.Option(
        0.0, "--filter-share", min=0.0, max=0.9, help="Dynamic sampling: this share of the groups drawn each step "
        "has zero reward variance and is filtered before training (0.25: 32 groups drawn, 8 filtered, 24 trained); "
        "the run's token ledger reports it (`rl-insight runs ledger`)."),
    agent: bool = typer.Option(
        False,
        "--agent",
        help="The rollout is a multi-turn tool-calling agent loop, reported through "
        "agent_loop_session and (when MLflow is installed) verl's MLflow traces over OTLP; see the run "
        "page's trajectories.",
    ),
) -> int:
    """Run a simulated verl job: trainer metrics, RL state lanes, stand-in engines and exporters."""
    from ..demo.run import Demo, DemoConfig

    engine = _checked_choices(ctx, mode, engine, framework, fault)
    h = Home.resolve(home)
    state: StackState | None = None
    if server_url:
        url, tok = server_url.rstrip("/"), token or ""
    else:
        url, tok, state = _stack_url(h)
    experiment = experiment_name or f"demo-{'agent-' if agent else ''}{mode}-{time.strftime('%Y%m%d-%H%M%S')}"
    typer.echo(f"Sending to {url} as project={project} experiment_name={experiment}")
    typer.echo(f"  web UI:           {url}/")
    typer.echo(f"  trainer metrics:  {url}/metrics")
    typer.echo(f"  open RL states:   {url}/api/v1/spans/open")
    if agent:
        typer.echo("  trajectories:     the run page's 'Agent-loop trajectories' section (docs/trajectories.md)")
    prom = state.service("prometheus") if state else None
    if prom is not None:
        typer.echo(f"  Prometheus:       {prom.url}/graph?g0.expr=rl_insight_monitor_critic_score_mean")
    elif state is not None:  # the stack this demo started, without Prometheus: say so, and what stays empty
        typer.echo("  Prometheus:       not installed: the run page's engine, hardware and TransferQueue panels stay "
                   "empty (the timeline, charts and insights do not need it). Get it: apt-get install prometheus, or "
                   "`rl-insight server install`, then `rl-insight server stop` and run the demo again.")
    typer.echo("Ctrl+C stops the demo." if steps <= 0 else f"Running {steps} steps.")
    os.environ.pop("RL_INSIGHT_TOKEN", None)
    cfg = DemoConfig(server_url=url, token=tok, project=project, experiment_name=experiment, mode=mode,  # type: ignore[arg-type]  # mode and engine: typer checked them against the choices
                     engine=engine, steps=steps, replicas=replicas, ranks=ranks, step_seconds=step_seconds,  # type: ignore[arg-type]  # mode and engine: typer checked them against the choices
                     fault=fault, fault_step=fault_step, agent=agent, moe=moe, framework=framework,
                     filter_share=filter_share,
                     seed=seed if seed is not None else zlib.crc32(experiment.encode()))
    runner = Demo(cfg, report=lambda m: typer.echo(f"[demo] {m}"))
    rc = runner.run()
    typer.echo(f"Demo finished after {runner.steps_done} steps.")
    if runner.delivery_problem:
        raise ServiceError(
            runner.delivery_problem,
            hint="check that the server runs (`rl-insight server status`) and that RL_INSIGHT_TOKEN / --token "
            "is the server's token",
        )
    return rc
