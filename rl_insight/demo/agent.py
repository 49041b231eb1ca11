"""`rl-insight demo --agent`: the rollout is a multi-turn, tool-calling agent loop.

Each replica runs `requests_per_replica` trajectories per step. A trajectory alternates generate (a request on
its replica, as the plain demo's) and tool calls, 1 to 6 rounds; the tools have their own latency
distributions (the browser's is heavy-tailed), a few calls fail or time out, and the trajectory gets a reward.
Half the trajectories are reported each way a real job would, into the same run:

* through `rl_insight.agent_loop_session` (upstream's protocol: the turn spans, the session span and the
  agent_loop_trajectory dashboard's gauges);
* through real MLflow tracing exported over OTLP, what verl's `trace.backend=mlflow` sends, in verl's span
  names (`ToolAgentLoop.run`, `AsyncLLMServerManager.generate`, `<Tool>.execute`) and with no step (MLflow
  drops verl's tags: the server takes the run's step clock), plus the engine's own `llm_request` span per
  generate, as vLLM's `--otlp-traces-endpoint` exports it (child of the generate span, the replica in its
  resource). Without MLflow installed every trajectory goes the first way.
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import rl_insight

# tool: (median seconds, lognormal sigma, failure probability, timeout seconds)
TOOLS: dict[str, tuple[float, float, float, float]] = {
    "search": (0.12, 0.5, 0.02, 1.5),
    "python": (0.05, 0.4, 0.05, 1.0),
    "browser": (0.25, 1.0, 0.04, 1.2),  # heavy tail: a few calls hit the timeout
    "calculator": (0.01, 0.3, 0.0, 0.5),
}
ROLLOUT_N = 4  # trajectories per sample (a rollout group)
# what the stand-in agent says (the trajectory view shows each turn's text, as a job's agent loop would send it)
QUESTIONS = ("How many primes are there below 1000?", "What is the boiling point of water at 3000 m altitude?",
             "Sum the digits of 2**100.", "Which city hosted the 1992 Summer Olympics, and what was its population?")
TOOL_ARGS = {"search": '{"query": "%s"}', "python": '{"code": "print(%r)"}', "browser": '{"url": "https://example.org/?q=%s"}',
             "calculator": '{"expression": "%s"}'}
TOOL_CLASSES = {
    "search": "SearchTool",
    "python": "SandboxFusionTool",
    "browser": "BrowserTool",
    "calculator": "CalculatorTool",
}


@dataclass
class Generated:
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    request_id: str
    queue_s: float = 0.0
    ttft_s: float = 0.0
    decode_s: float = 0.0


def mlflow_tracer(server_url: str, token: str, project: str, experiment: str, report: Callable[[str], None]) -> Any:
    """Real MLflow tracing exported over OTLP to this server (the env verl's Ray runtime env would carry), or None."""
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{server_url}/v1/traces"
    os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    if token:
        os.environ["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] = f"Authorization=Bearer%20{token}"
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = (
        f"service.name=verl-rollout-trace,project={project},experiment_name={experiment}"
    )
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tempfile.mkdtemp(prefix='rl-insight-demo-mlflow-')}/mlflow.db")
    import logging

    # MLflow logs its store set-up, and warns for every trajectory that its root span cannot take verl's trace tags
    # (the export bug docs/otlp.md describes): the demo's output stays the demo's
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    try:
        import mlflow
    except ImportError:
        report(
            "MLflow is not installed: the agent loop reports through agent_loop_session only (pip install mlflow to "
            "see "
            "verl's MLflow traces arrive over OTLP too)"
        )
        return None
    logging.getLogger("mlflow").setLevel(logging.ERROR)  # again: importing mlflow configures its loggers
    try:
        mlflow.set_experiment(experiment)
    except Exception as exc:  # the demo goes on without it
        report(f"MLflow tracing is off: {type(exc).__name__}: {exc}")
        return None
    return mlflow


class EngineSpans:
    """The stand-in engines' per-request spans, as vLLM exports them with `--otlp-traces-endpoint` (`llm_request`,
    `gen_ai.*` attributes), one tracer per replica (its resource names the replica), children of the caller's span."""

    def __init__(self, server_url: str, token: str, project: str, experiment: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self._providers: dict[str, Any] = {}
        self._make = lambda replica: TracerProvider(resource=Resource.create({
            "service.name": f"{project}/{experiment}", "service.instance.id": replica}))
        self._exporter = lambda: BatchSpanProcessor(OTLPSpanExporter(
            endpoint=f"{server_url}/v1/traces", headers={"Authorization": f"Bearer {token}"} if token else {}))

    def record(self, replica: str, parent: Any, start_ns: int, end_ns: int, out: "Generated") -> None:
        from opentelemetry import trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

        provider = self._providers.get(replica)
        if provider is None:
            provider = self._providers[replica] = self._make(replica)
            provider.add_span_processor(self._exporter())
        ctx = parent.get_span_context() if hasattr(parent, "get_span_context") else parent._span.get_span_context()
        link = trace.set_span_in_context(NonRecordingSpan(SpanContext(ctx.trace_id, ctx.span_id, is_remote=True,
                                                                      trace_flags=TraceFlags(TraceFlags.SAMPLED))))
        span = provider.get_tracer("vllm").start_span("llm_request", context=link, start_time=start_ns, attributes={
            "gen_ai.request.id": out.request_id, "gen_ai.usage.prompt_tokens": out.prompt_tokens,
            "gen_ai.usage.completion_tokens": out.completion_tokens, "gen_ai.latency.time_in_queue": out.queue_s,
            "gen_ai.latency.time_to_first_token": out.ttft_s, "gen_ai.latency.time_in_model_decode": out.decode_s})
        span.end(end_time=end_ns)

    def flush(self) -> None:
        for p in self._providers.values():
            p.force_flush()


class AgentLoop:
    """The trajectories of one rollout worker; `generate` is a request on a replica (it holds the replica's lane)."""

    def __init__(self, rng: random.Random, mlflow: Any = None, engine_spans: EngineSpans | None = None) -> None:
        self.rng = rng
        self.mlflow = mlflow
        self.engine_spans = engine_spans
        exp = os.environ.get("RL_INSIGHT_EXPERIMENT_NAME", "demo")
        self.identity = {"project": os.environ.get("RL_INSIGHT_PROJECT", "rl-insight-demo"), "experiment_name": exp}

    def _plan(self, rounds: int) -> list[tuple[str, float, str | None]]:
        out = []
        for _ in range(rounds - 1):
            tool = self.rng.choice(list(TOOLS))
            median, sigma, fail_p, timeout = TOOLS[tool]
            took = min(timeout, median * self.rng.lognormvariate(0, sigma))
            error = (
                "timeout" if took >= timeout else "tool error: bad arguments" if self.rng.random() < fail_p else None
            )
            out.append((tool, took, error))
        return out

    def _reward(self, errors: int) -> float:
        return round(max(0.0, min(1.0, self.rng.gauss(0.75 - 0.3 * errors, 0.2))), 3)

    async def trajectory(self, step: int, replica: str, sample: int, generate: Callable[[float], Awaitable[Generated]],
                         budget_s: float) -> None:
        rounds = min(6, 1 + int(self.rng.expovariate(0.6)))
        tools = self._plan(rounds)
        if self.mlflow is not None and (sample // ROLLOUT_N) % 2:  # a whole rollout group goes one way
            await self._traced_by_mlflow(step, replica, sample, generate, budget_s / rounds, tools)
        else:
            await self._agent_loop_session(step, replica, sample, generate, budget_s / rounds, tools)

    async def _agent_loop_session(
        self,
        step: int,
        replica: str,
        sample: int,
        generate: Callable[[float], Awaitable[Generated]],
        share_s: float,
        tools: list[tuple[str, float, str | None]],
    ) -> None:
        # GRPO-style groups: ROLLOUT_N trajectories answer the same sample (prompt), each its own session
        session = rl_insight.agent_loop_session(
            **self.identity, sample=sample // ROLLOUT_N, session=f"{replica}-{step}-{sample}", global_steps=step
        )
        errors, out = 0, None
        question = QUESTIONS[(sample // ROLLOUT_N) % len(QUESTIONS)]
        said = f"user: {question}"
        for turn in range(len(tools) + 1):
            t0 = time.time_ns()
            out = await generate(share_s)
            last = turn == len(tools)
            answer = (f"The answer is {self.rng.randint(2, 999)}." if last
                      else f"I will call {tools[turn][0]} to check.\n<tool_call>{tools[turn][0]}</tool_call>")
            session.generation(
                start_time_ns=t0,
                end_time_ns=time.time_ns(),
                prompt_tokens=out.prompt_tokens,
                completion_tokens=out.completion_tokens,
                finish_reason=out.finish_reason,
                replica=replica,
                request_id=out.request_id,
                tools=[] if last else [tools[turn][0]],
                prompt=said,
                response=answer,
            )
            if last:
                break
            tool, took, error = tools[turn]
            t0 = time.time_ns()
            await asyncio.sleep(took)
            result = error or f"[{tool}] {self.rng.randint(1, 5)} result(s) for the question"
            session.tool_call(tool, start_time_ns=t0, end_time_ns=time.time_ns(), error=error,
                              tool_args=TOOL_ARGS[tool] % question, tool_result=result)
            said = f"tool ({tool}): {result}"
            errors += error is not None
        status = "failure" if errors >= 2 else "truncated" if out and out.finish_reason == "length" else "success"
        session.finish(
            trajectories=[
                {"chain_id": 1, "reward_score": self._reward(errors), "num_turns": 2 * len(tools) + 1, "status": status}
            ],
            status=status,
            runner_name="demo_tool_agent",
            reward_source="demo_verifier",
            finished=True,
        )

    async def _traced_by_mlflow(
        self,
        step: int,
        replica: str,
        sample: int,
        generate: Callable[[float], Awaitable[Generated]],
        share_s: float,
        tools: list[tuple[str, float, str | None]],
    ) -> None:
        """What verl's rollout_trace_attr / rollout_trace_op write with trace.backend=mlflow
        (verl/utils/rollout_trace.py)."""
        mlflow, sticky = self.mlflow, f"s{step}-{sample}"
        errors = 0
        with mlflow.start_span(
            name="tool_agent"
        ) as root:  # rollout_trace_attr: its tags never reach OTLP (docs/otlp.md)
            mlflow.set_trace_tag(root.request_id, "step", str(step))
            with mlflow.start_span(name="ToolAgentLoop.run") as run:
                run.set_inputs({"sampling_params": {"temperature": 1.0}, "request_id": sticky})
                for turn in range(len(tools) + 1):
                    with mlflow.start_span(name="AsyncLLMServerManager.generate") as g:
                        t0 = time.time_ns()
                        out = await generate(share_s)
                        t1 = time.time_ns()
                        g.set_inputs(
                            {"request_id": sticky, "prompt_ids": [0] * out.prompt_tokens, "sampling_params": {}}
                        )
                        g.set_outputs({"token_ids": [0] * out.completion_tokens, "stop_reason": out.finish_reason})
                        if self.engine_spans is not None:
                            self.engine_spans.record(replica, g, t0, t1, out)
                    if turn == len(tools):
                        break
                    tool, took, error = tools[turn]
                    with mlflow.start_span(name=f"{TOOL_CLASSES[tool]}.execute") as t:
                        t.set_inputs({"instance_id": f"{sample}-{turn}", "parameters": {"q": "…"}})
                        await asyncio.sleep(took)
                        t.set_outputs({"text": error or "ok"})
                        if error:
                            t.set_attribute("error", error)
                    errors += error is not None
                run.set_outputs({"num_turns": 2 * len(tools) + 1, "reward_score": self._reward(errors)})


def flush_mlflow(mlflow: Any, engine_spans: EngineSpans | None = None) -> None:
    if engine_spans is not None:
        engine_spans.flush()
    if mlflow is None:
        return
    try:
        import mlflow.tracing.provider as provider

        provider.provider.get().force_flush()
    except Exception:
        pass
