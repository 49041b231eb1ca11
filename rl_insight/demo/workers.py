"""Demo worker processes: a rollout worker (replicas + stand-in engines) and a trainer worker (ranks).

Both are `multiprocessing` spawn targets talking to the driver over a Pipe. They use the training
API exactly as verl's workers do: bare `init()` (identity from RL_INSIGHT_PROJECT /
RL_INSIGHT_EXPERIMENT_NAME), `trace_state` per lane, `update_prometheus_config` with `replica` labels.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import rl_insight

from .agent import Generated
from .engines import ENGINES, Request
from .hardware import DcgmStandIn, NpuStandIn

# Engine latencies are the demo's own seconds, unscaled: the engine panels' p99 and the timeline's generate spans
# then tell the same story (a scaled latency made p99 ≈ 35 s next to a 1.5 s generate).
ENGINE_TIME_SCALE = 1.0
KV_HEALTHY_MAX = 0.9  # a healthy replica at full concurrency: below RLInsightKVCacheSaturated's 0.95


def _quiet_sigint() -> None:
    # Ctrl+C reaches the whole process group; the driver stops the workers in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# ---------------------------------------------------------------------------- rollout
class _Replica:
    def __init__(self, index: int, engine_cls: Any, max_concurrency: int, rng: random.Random) -> None:
        self.index = index
        self.max_concurrency = max_concurrency
        self.engine = engine_cls(engine_index=0)
        self.lane = f"replica_{index}"
        self.sem = asyncio.Semaphore(max_concurrency)
        self.running = 0
        self.waiting = 0
        self.rng = rng
        self.kv_pressure = False  # `--fault kv-pressure`: this replica's KV cache stays nearly full

    def _load(self) -> None:
        # KV usage grows with the running requests up to KV_HEALTHY_MAX at full concurrency (waiting ones hold none):
        # the demo is a healthy job, so it never raises the saturation alert by itself (unless told to)
        share = min(1.0, self.running / max(1, self.max_concurrency))
        self.engine.set_load(self.running, self.waiting, 0.97 + 0.02 * share if self.kv_pressure
                             else 0.08 + (KV_HEALTHY_MAX - 0.08) * share)

    async def request(self, base_s: float, tail: float) -> tuple[int, int, str, dict[str, float]]:
        """One generation on this replica: prompt tokens, generated tokens, finish reason, engine timings (s)."""
        rng = self.rng
        queued = time.monotonic()
        self.waiting += 1
        self._load()
        async with self.sem:
            self.waiting -= 1
            self.running += 1
            self._load()
            started = time.monotonic()
            with rl_insight.trace_state(self.engine.state_name, state_lane_id=self.lane):
                await asyncio.sleep(base_s * tail * rng.uniform(0.35, 1.0))
            self.running -= 1
            self._load()
        run_s = (time.monotonic() - started) * ENGINE_TIME_SCALE
        queue_s = (started - queued) * ENGINE_TIME_SCALE
        gen_tokens = int(min(1024, rng.lognormvariate(5.5, 0.5)))
        prompt = int(rng.gauss(105, 25)) + 40
        ttft = min(run_s * 0.2, rng.uniform(0.04, 0.25) * (1 + self.running))
        reason = "length" if gen_tokens >= 1024 else ("abort" if rng.random() < 0.005 else "stop")
        self.engine.record(Request(prompt_tokens=prompt, generation_tokens=gen_tokens, ttft_s=ttft,
                                   itl_s=max(0.005, (run_s - ttft) / max(gen_tokens, 1)), e2e_s=run_s + queue_s,
                                   queue_s=queue_s, prefill_s=ttft, decode_s=max(0.0, run_s - ttft),
                                   cached_tokens=int(prompt * rng.uniform(0.3, 0.6)), finished_reason=reason),
                           rng_preempt=rng.random() < 0.01)
        return prompt, gen_tokens, reason, {"queue_s": queue_s, "ttft_s": ttft, "decode_s": max(0.0, run_s - ttft)}


async def _generate(replicas: list[_Replica], requests: int, budget_s: float, tail_replica: int, step: int = 0,
                    agent: Any = None, slow_replica: int = -1) -> dict[str, Any]:
    t0 = time.monotonic()
    per_replica: list[float] = []

    async def run(rep: _Replica) -> None:
        start = time.monotonic()
        # two waves of `max_concurrency` requests fill the budget
        tail = 3.0 if rep.index == slow_replica else 2.5 if rep.index == tail_replica else 1.0
        if agent is None:
            await asyncio.gather(*(rep.request(budget_s / 2, tail) for _ in range(requests)))
        else:  # --agent: each request is a multi-turn trajectory (demo/agent.py)
            counter = iter(range(10**9))

            async def generate(share_s: float) -> Generated:
                prompt, tokens, reason, timings = await rep.request(share_s, tail)
                return Generated(prompt, tokens, reason, f"{rep.lane}-s{step}-{next(counter)}", **timings)

            await asyncio.gather(*(agent.trajectory(step, rep.lane, rep.index * requests + i, generate, budget_s / 2)
                                   for i in range(requests)))
        per_replica.append(time.monotonic() - start)

    await asyncio.gather(*(run(r) for r in replicas))
    return {"gen": time.monotonic() - t0, "per_replica": per_replica}


def _update_weights(reps: list[_Replica], seconds: float) -> float:
    """Every replica in `update_weights` for `seconds`, its engine asleep meanwhile (as verl does); the time taken."""
    t0 = time.monotonic()
    blocks = [rl_insight.trace_state("update_weights", state_lane_id=r.lane) for r in reps]
    for r, b in zip(reps, blocks):
        b.__enter__()
        getattr(r.engine, "sleep", lambda: None)()
    time.sleep(seconds)
    for r, b in zip(reps, blocks):
        getattr(r.engine, "wake", lambda: None)()
        b.__exit__(None, None, None)
    return time.monotonic() - t0


def rollout_worker(conn: Connection, engine: str, replicas: int, requests: int, max_concurrency: int, seed: int,
                   agent: bool = False) -> None:
    _quiet_sigint()
    rl_insight.init()
    rng = random.Random(seed)
    agent_loop = mlflow = engine_spans = None
    if agent:
        from .agent import AgentLoop, EngineSpans, mlflow_tracer

        where = (
            os.environ["RL_INSIGHT_SERVER_URL"],
            os.environ.get("RL_INSIGHT_TOKEN", ""),
            os.environ.get("RL_INSIGHT_PROJECT", ""),
            os.environ.get("RL_INSIGHT_EXPERIMENT_NAME", ""),
        )
        mlflow = mlflow_tracer(*where, lambda m: conn.send(("note", m)))
        engine_spans = EngineSpans(*where) if mlflow is not None else None
        agent_loop = AgentLoop(rng, mlflow, engine_spans)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    reps = [_Replica(i, ENGINES[engine], max_concurrency, rng) for i in range(replicas)]
    addresses = [r.engine.address for r in reps]
    # verl's LLMServerManager: job = rollout name, labels [{"replica": rank}]
    rl_insight.update_prometheus_config(addresses, engine, [{"replica": r.index} for r in reps])
    conn.send(("ready", addresses))
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "generate":
                _, step, budget_s, tail_replica, slow_replica = msg
                result = loop.run_until_complete(_generate(reps, requests, budget_s, tail_replica, step, agent_loop,
                                                           slow_replica))
                conn.send(("generated", step, result))
            elif msg[0] == "update_weights":
                conn.send(("weights_updated", _update_weights(reps, msg[1])))
            elif msg[0] == "fault":  # `--fault kv-pressure`: replica_0's KV cache stays above 95 %
                reps[0].kv_pressure = True
                reps[0]._load()
            else:
                break
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        for r in reps:
            r.engine.close()
        if mlflow is not None:
            from .agent import flush_mlflow

            flush_mlflow(mlflow, engine_spans)
        rl_insight.finish()


# ---------------------------------------------------------------------------- trainer
class _Busy:
    """Fraction of wall time the 'GPUs' computed, for the hardware stand-ins."""

    def __init__(self) -> None:
        self.active = 0
        self.lock = threading.Lock()


def _work(name: str, seconds: float) -> None:
    """A rank's share of a phase. Sleeps, unless a profile request made torch importable here (the client imports
    torch.profiler when one arrives): then the time is spent in small torch ops, so the profile shows what a real
    trainer's would (the client records the enclosing `trace_state` as a range in the trace)."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "profiler"):
        time.sleep(seconds)
        return
    end = time.monotonic() + seconds
    x = torch.ones(48, 48)
    while time.monotonic() < end:
        x = torch.tanh(x @ x)
        time.sleep(0.002)


def all_reduce(barrier: threading.Barrier) -> None:
    """The demo's collective: every rank waits here until all ranks arrived (as torch.distributed's does)."""
    barrier.wait()


def wedged_rank(stop: threading.Event) -> None:
    """`--fault hang`: this rank never reaches the collective (a stuck data loader, a dead-locked callback)."""
    while not stop.wait(1.0):
        pass


def _stop_listener(conn: Connection, stop: threading.Event, phase_done: threading.Event) -> threading.Thread:
    """While a hung phase holds the worker's main thread, the driver's next message can only be its stop: take it
    here, so Ctrl+C on a hung demo ends at once instead of after the driver's join timeout."""

    def listen() -> None:
        while not stop.is_set() and not phase_done.is_set():
            if conn.poll(0.2):
                try:
                    conn.recv()
                except (EOFError, OSError):
                    pass
                stop.set()

    t = threading.Thread(target=listen, name="demo-stop-listener", daemon=True)
    t.start()
    return t


def _phase(name: str, ranks: int, seconds: float, busy: _Busy, nested: str | None = None,
           hang_rank: int | None = None, stop: threading.Event | None = None, slow_rank: int | None = None) -> float:
    t0 = time.monotonic()
    barrier = threading.Barrier(ranks) if hang_rank is not None else None

    def rank_work(r: int) -> None:
        jitter = random.uniform(0.9, 1.1) * (1.5 if r == slow_rank else 1.0)  # --fault straggler: 50 % more work
        with rl_insight.trace_state(name, state_lane_id=f"rank_{r}"):
            if nested:
                _work(name, seconds * 0.05)
                with rl_insight.trace_state(nested, state_lane_id=f"rank_{r}"):
                    _work(nested, seconds * 0.9 * jitter)
                _work(name, seconds * 0.05)
            else:
                _work(name, seconds * jitter)
            if barrier is not None:
                if r == hang_rank and stop is not None:
                    wedged_rank(stop)
                try:
                    all_reduce(barrier)
                except threading.BrokenBarrierError:  # the demo is stopping
                    pass

    with busy.lock:
        busy.active += 1
    threads = [threading.Thread(target=rank_work, args=(r,), name=f"rank-{r}") for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with busy.lock:
        busy.active -= 1
    return time.monotonic() - t0


def _fault(kind: str, dcgm: DcgmStandIn, npu: NpuStandIn, ranks: int, hang_rank: int | None) -> int | None:
    """The demo's --fault: GPU 0 / NPU 0 goes bad (an alert fires), or a rank hangs (the rank returned)."""
    if kind == "xid":
        dcgm.inject_xid(0)
    elif kind == "hang":
        return ranks // 2
    else:
        npu.inject_unhealthy(0)
    return hang_rank


def trainer_worker(conn: Connection, ranks: int) -> None:
    _quiet_sigint()
    rl_insight.init()
    dcgm, npu = DcgmStandIn(gpus=ranks), NpuStandIn(chips=ranks)
    rl_insight.update_prometheus_config([dcgm.address], "dcgm-exporter", [{"node": "demo-node-0"}])
    rl_insight.update_prometheus_config([npu.address], "npu-exporter", [{"node": "demo-node-0"}])
    busy = _Busy()
    stop = threading.Event()
    hang_rank: int | None = None
    slow_rank: int | None = None

    def hardware_loop() -> None:
        while not stop.wait(1.0):
            b = 0.95 if busy.active else 0.05
            dcgm.tick(b, 1.0)
            npu.tick(b)

    threading.Thread(target=hardware_loop, name="demo-hardware", daemon=True).start()
    conn.send(("ready", [dcgm.address, npu.address]))
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "fault" and msg[1] == "straggler":
                slow_rank = ranks - 1  # (the fail-slow radar names it: docs/findings.md)
                continue
            if msg[0] == "fault":
                hang_rank = _fault(msg[1], dcgm, npu, ranks, hang_rank)
                continue
            if msg[0] != "train":
                break
            _, step, plan = msg
            took = {
                "old_log_prob": _phase("actor_compute_log_prob", ranks, plan["old_log_prob"], busy,
                                       slow_rank=slow_rank),
                "ref": _phase("ref_compute_log_prob", ranks, plan["ref"], busy, slow_rank=slow_rank),
            }
            phase_done = threading.Event()
            listener = _stop_listener(conn, stop, phase_done) if hang_rank is not None else None
            took["update_actor"] = _phase("train_batch", ranks, plan["update_actor"], busy, nested="actor_update",
                                          hang_rank=hang_rank, stop=stop, slow_rank=slow_rank)
            phase_done.set()
            if listener is not None:
                listener.join()
            if stop.is_set():  # the driver's stop arrived while a rank hung
                break
            conn.send(("trained", step, took))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        stop.set()
        dcgm.close()
        npu.close()
        rl_insight.finish()
