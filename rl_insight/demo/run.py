"""The demo driver: orchestrates the workers per step (sync or separate-async schedule) and logs
verl's trainer metrics, exactly as verl's RLInsightLogger does."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal

import rl_insight

from ..server.http.net import free_port
from .trainer_metrics import TrainerMetricModel, faulty_metrics, moe_metrics, omni_metrics, slime_metrics
from .transfer_queue import TransferQueueStandIn
from .workers import rollout_worker, trainer_worker

Mode = Literal["sync", "async"]
Engine = Literal["vllm", "sglang", "vllm-omni"]


@dataclass(frozen=True)
class DemoConfig:
    server_url: str
    token: str = ""
    project: str = "rl-insight-demo"
    experiment_name: str = "demo"
    mode: Mode = "sync"
    engine: Engine = "vllm"
    steps: int = 0  # 0 = until stopped
    replicas: int = 4
    ranks: int = 4
    step_seconds: float = 4.0
    requests_per_replica: int = 16
    max_concurrency: int = 8
    seed: int = 0
    fault: str | None = None  # "xid" | "npu": an alert fires; "hang": a trainer rank wedges; "slow-replica": the last
    # replica generates 3x slower; "nan": the policy loss is NaN; "precision-drift": the probability gap climbs;
    # "kv-pressure": replica_0's KV cache stays nearly full (cli/demo.py FAULTS; from fault_at on)
    fault_step: int = 0  # the step the fault is injected at; 0: step 2, or step 5 for a hang (three summarised steps
    #                      first, so the stalled-lane insight knows how long a state usually lasts)

    @property
    def fault_at(self) -> int:
        return self.fault_step or (5 if self.fault == "hang" else 2)
    agent: bool = False  # the rollout is a multi-turn tool-calling agent loop (demo/agent.py)
    framework: str = "verl"  # "slime": slime's metric keys (Megatron trainer + SGLang rollout lanes)
    moe: bool = False  # verl's rollout/moe/* expert-load metrics of a simulated MoE model (a hot expert in layer 7)
    filter_share: float = 0.0  # dynamic sampling: the share of the groups drawn that is filtered (token_batch.py)

    def plan(self, rng: random.Random) -> dict[str, float]:
        """Phase budgets (seconds) for one step; generation is the biggest, as in real RL jobs."""
        s = self.step_seconds
        return {"gen": 0.40 * s, "old_log_prob": 0.10 * s, "ref": 0.10 * s, "update_actor": 0.25 * s,
                "update_weights": 0.05 * s, "adv": 0.02 * s * rng.uniform(0.8, 1.2)}


class Demo:
    def __init__(self, cfg: DemoConfig, report: Callable[[str], None] = print) -> None:
        self.cfg = cfg
        self.report = report
        self.rng = random.Random(cfg.seed)
        self._stopping = False
        self._procs: list[Any] = []  # spawn-context processes (mp.Process is the fork type)
        self._node_exporter: subprocess.Popen | None = None
        self.steps_done = 0

    # ------------------------------------------------------------------ setup
    def _env(self) -> None:
        os.environ["RL_INSIGHT_SERVER_URL"] = self.cfg.server_url
        if self.cfg.token:
            os.environ["RL_INSIGHT_TOKEN"] = self.cfg.token
        # verl's workers call bare init(); the run identity reaches them through the environment.
        os.environ["RL_INSIGHT_PROJECT"] = self.cfg.project
        os.environ["RL_INSIGHT_EXPERIMENT_NAME"] = self.cfg.experiment_name

    def _start_workers(self) -> None:
        ctx = mp.get_context("spawn")
        c = self.cfg
        self.rollout, rollout_child = ctx.Pipe()
        self.trainer, trainer_child = ctx.Pipe()
        self._procs = [
            ctx.Process(
                target=rollout_worker,
                name="demo-rollout",
                args=(rollout_child, c.engine, c.replicas, c.requests_per_replica, c.max_concurrency, c.seed, c.agent),
            ),
            ctx.Process(target=trainer_worker, name="demo-trainer", args=(trainer_child, c.ranks)),
        ]
        for p in self._procs:
            p.start()
        for conn, what in ((self.rollout, "rollout"), (self.trainer, "trainer")):
            if not conn.poll(120):  # --agent: the rollout worker imports MLflow and prepares its store first
                raise RuntimeError(f"demo {what} worker did not start within 120 s")
            self._recv(conn, "ready")

    def _start_node_exporter(self) -> None:
        binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        if not binary:
            self.report("node exporter not installed (apt-get install prometheus-node-exporter); skipping host metrics")
            return
        port = free_port()
        self._node_exporter = subprocess.Popen(
            [binary, f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        rl_insight.update_prometheus_config([f"127.0.0.1:{port}"], "node-exporter", [{"node": "demo-node-0"}])

    # ------------------------------------------------------------------ steps
    def _recv(self, conn, kind: str) -> tuple:
        """The next message of `kind`; others are kept (at most one of each kind is outstanding)."""
        if kind in self._stash:
            return self._stash.pop(kind)
        while True:
            msg = conn.recv()
            if msg[0] == kind:
                return msg
            if msg[0] == "note":  # a worker's message for the user
                self.report(msg[1])
                continue
            self._stash[msg[0]] = msg

    def _slow(self, step: int) -> int:
        """--fault slow-replica: the last replica is 3x slower from the fault's step on (-1: none)."""
        return self.cfg.replicas - 1 if self.cfg.fault == "slow-replica" and step >= self.cfg.fault_at else -1

    def _tail(self, step: int) -> int:
        # Now and then one replica is the long tail (2.5x slower), as with skewed response lengths.
        return self.rng.randrange(self.cfg.replicas) if step % 4 == 0 else -1

    def _step(self, step: int, plan: dict[str, float]) -> tuple[dict, dict, float]:
        more = self.cfg.steps <= 0 or step < self.cfg.steps
        if self.cfg.mode == "sync":
            self.rollout.send(("generate", step, plan["gen"], self._tail(step), self._slow(step)))
            gen = self._recv(self.rollout, "generated")[2]
            self.trainer.send(("train", step, plan))
            return gen, self._recv(self.trainer, "trained")[2], 0.0
        # separate async (one step off-policy): batch step+1 generates while batch step trains
        if step == 1:
            self.rollout.send(("generate", step, plan["gen"], self._tail(step), self._slow(step)))
        gen = self._recv(self.rollout, "generated")[2]
        if more:
            self.rollout.send(("generate", step + 1, plan["gen"], self._tail(step + 1), self._slow(step + 1)))
        self.trainer.send(("train", step, plan))
        return gen, self._recv(self.trainer, "trained")[2], 1.0

    def _run_config(self) -> dict:
        """What verl passes to init(config=...): its trainer config (a verl-shaped subset) and run tags."""
        c = self.cfg
        return {
            "histogram_buckets": {"step_latency_ms": [250, 500, 1000, 2000, 4000, 8000, 16000, 32000]},
            "tags": ["demo", c.mode, c.engine],
            "trainer": {
                "project_name": c.project,
                "experiment_name": c.experiment_name,
                "total_training_steps": c.steps or None,
                "n_gpus_per_node": c.ranks,
                "nnodes": 1,
                "logger": ["console", "rl_insight"],
            },
            "data": {"train_batch_size": 256, "max_prompt_length": 1024, "max_response_length": 4096, "seed": c.seed},
            "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False},
            "actor_rollout_ref": {
                "model": {"path": "Qwen/Qwen2.5-7B-Instruct"},
                "actor": {"optim": {"lr": 1e-6}, "ppo_mini_batch_size": 64, "use_kl_loss": True, "kl_loss_coef": 0.001},
                "rollout": {
                    "name": c.engine,
                    "n": 5,
                    "tensor_model_parallel_size": 1,
                    "gpu_memory_utilization": 0.6,
                    "mode": "async" if c.mode == "async" else "sync",
                    "agent": {"num_workers": c.replicas},
                },
            },
        }

    def run(self) -> int:
        self._env()
        self._stash: dict[str, tuple] = {}
        if threading.current_thread() is threading.main_thread():
            # SIGTERM (kill, a scheduler) stops the demo exactly like Ctrl+C: workers stopped, targets removed
            signal.signal(signal.SIGTERM, _raise_interrupt)
        rl_insight.init(project=self.cfg.project, experiment_name=self.cfg.experiment_name, config=self._run_config())
        tq = TransferQueueStandIn()
        rl_insight.update_prometheus_config([tq.address], "transfer_queue", None)  # verl's TQ registration
        model = TrainerMetricModel(seed=self.cfg.seed, filter_share=self.cfg.filter_share)
        try:
            self._start_workers()
            self._start_node_exporter()
            self.report(f"demo running: mode={self.cfg.mode} engine={self.cfg.engine} replicas={self.cfg.replicas} "
                        f"ranks={self.cfg.ranks} project={self.cfg.project} experiment={self.cfg.experiment_name}")
            step = 0
            while not self._stopping and (self.cfg.steps <= 0 or step < self.cfg.steps):
                step += 1
                plan = self.cfg.plan(self.rng)
                t0 = time.monotonic()
                if step == self.cfg.fault_at and self.cfg.fault == "slow-replica":
                    self.report(f"fault injected: replica_{self.cfg.replicas - 1} generates 3x slower from step {step} "
                                "on; compare with a run without it: rl-insight runs diff A B")
                elif step == self.cfg.fault_at and self.cfg.fault == "kv-pressure":
                    self.rollout.send(("fault", "kv-pressure"))
                    self.report(f"fault injected: kv-pressure — replica_0's KV cache stays above 95% from step {step} "
                                "on")
                elif step == self.cfg.fault_at and self.cfg.fault in ("nan", "precision-drift"):
                    self.report(f"fault injected: {self.cfg.fault} — "
                                + ("actor/pg_loss is NaN" if self.cfg.fault == "nan" else
                                   "training/rollout_probs_diff_mean climbs past 0.01") + f" from step {step} on")
                elif step == self.cfg.fault_at and self.cfg.fault:
                    self.trainer.send(("fault", self.cfg.fault))
                    if self.cfg.fault == "hang":
                        self.report(f"fault injected: hang — rank_{self.cfg.ranks // 2} will never reach step {step}'s "
                                    f"collective; see where everyone is: rl-insight stacks --run "
                                    f"{self.cfg.project}/{self.cfg.experiment_name}")
                    elif self.cfg.fault == "straggler":
                        self.report(f"fault injected: straggler — rank_{self.cfg.ranks - 1} does 50% more work from "
                                    f"step {step} on; see it named: rl-insight findings --run "
                                    f"{self.cfg.project}/{self.cfg.experiment_name}")
                    else:
                        self.report(f"fault injected: {self.cfg.fault}")
                gen, trained, staleness = self._step(step, plan)
                time.sleep(plan["adv"])
                # weight sync waits for in-flight generation (async) before the rollout worker takes it
                self.rollout.send(("update_weights", plan["update_weights"]))
                weights = self._recv(self.rollout, "weights_updated")[1]
                timings = {"gen": gen["gen"], **trained, "update_weights": weights, "adv": plan["adv"]}
                if step % 10 == 0:
                    timings["testing"] = 0.1 * self.cfg.step_seconds
                timings["step"] = time.monotonic() - t0
                metrics = model.step_metrics(step, timings, staleness)
                if self.cfg.fault in ("nan", "precision-drift") and step >= self.cfg.fault_at:
                    metrics.update(faulty_metrics(self.cfg.fault, step - self.cfg.fault_at, metrics))
                if self.cfg.engine == "vllm-omni":
                    metrics.update(omni_metrics(step, metrics, self.rng))
                if self.cfg.moe:  # verl's rollout MoE load-balance metrics (moe_lb_metrics_interval=1)
                    metrics.update(moe_metrics(step, self.rng))
                if self.cfg.framework == "slime":  # slime's keys, with the role / rank labels its logger adds
                    for key, value in slime_metrics(metrics).items():
                        rl_insight.metric_gauge(key, float(value), role="actor", rank=0)
                    rl_insight.metric_gauge("training_global_step", float(step))  # the monitor's step clock
                else:
                    for key, value in metrics.items():
                        rl_insight.metric_gauge(key.replace("/", "_"), float(value))  # verl: "/" -> "_"
                # upstream's quick start example (its quick_start_demo dashboard): one of each metric kind
                rl_insight.metric_count("train_step", 1)
                rl_insight.metric_gauge("reward_mean", float(metrics["critic/score/mean"]))
                rl_insight.metric_histogram("step_latency_ms", timings["step"] * 1000)
                tq.step(step, batch=256)
                self.steps_done = step
                self.report(f"step {step}: {timings['step']:.2f}s (gen {gen['gen']:.2f}s, slowest replica "
                            f"{max(gen['per_replica']):.2f}s)")
                if step == 1:
                    self._announce_run_page()
        except KeyboardInterrupt:
            self.report("stopping the demo …")
        finally:
            self._shutdown(tq)
        return 0

    delivery_problem: str | None = None

    def request_stop(self) -> None:
        self._stopping = True

    def _shutdown(self, tq: TransferQueueStandIn) -> None:
        # A second Ctrl+C must not abandon the workers half-stopped; shutdown is bounded (joins time out).
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        for conn in (getattr(self, "rollout", None), getattr(self, "trainer", None)):
            try:
                if conn is not None:
                    conn.send(("stop",))
            except (OSError, BrokenPipeError):
                pass
        for p in self._procs:
            p.join(15)
            if p.is_alive():
                p.terminate()
                p.join(5)
        if self._node_exporter is not None:
            self._node_exporter.terminate()
            self._node_exporter.wait(5)
        tq.close()
        delivered = rl_insight.flush(3)
        st = rl_insight.stats()
        rl_insight.finish()
        self._unregister_targets()
        dropped = st.get("dropped", {}) if st.get("enabled") else {}
        if not st.get("enabled") or st.get("sent", 0) == 0 or dropped.get("unauthorized") or dropped.get("rejected"):
            self.delivery_problem = (f"the server at {self.cfg.server_url} did not store the demo's data "
                                     f"(sent {st.get('sent', 0)}, dropped {dropped or 'none'}, last flush "
                                     f"{'ok' if delivered else 'failed'})")

    def _announce_run_page(self) -> None:
        """Once the run exists on the server: the address of its page (not the runs list)."""
        import httpx

        headers = {"Authorization": f"Bearer {self.cfg.token}"} if self.cfg.token else {}
        try:
            rl_insight.flush(5)
            runs = httpx.get(self.cfg.server_url + "/api/v1/runs", params={"project": self.cfg.project},
                             headers=headers, timeout=5, trust_env=False).json().get("runs", [])
        except (httpx.HTTPError, ValueError):
            return
        run = next((r for r in runs if r.get("experiment_name") == self.cfg.experiment_name), None)
        if run is not None:
            self.report(f"run page: {self.cfg.server_url}/#/run/{run['id']}")

    def _unregister_targets(self) -> None:
        """The stand-in endpoints are gone: remove this run's targets so they do not linger as `down`."""
        import httpx

        headers = {"Authorization": f"Bearer {self.cfg.token}"} if self.cfg.token else {}
        try:
            httpx.delete(self.cfg.server_url + "/api/v1/targets", headers=headers, timeout=5, trust_env=False,
                         params={"project": self.cfg.project, "experiment_name": self.cfg.experiment_name})
        except httpx.HTTPError as exc:
            self.report(f"could not remove the demo's scrape targets: {exc}")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
