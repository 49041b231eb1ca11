"""Agent-loop trajectories from finished spans: what each span says about a trajectory (pure functions).

Three sources describe the same thing, step → sample → trajectory → turns:

* **upstream's agent-loop protocol** (`rl_insight.agent_loop_session` and the runtimes' spans on the
  trajectory's lane `experiment=<e>/sample=<s>/session=<sess>/traj=<t>`): `gateway_generation` spans
  (`monitor.trace_source="gateway"`) are generate turns, `agent_task` (`"task"`) carries the reward and
  status, `agent_session` (`"session"`) the session's status and, from our client, every trajectory's
  reward and turn count; tool calls are `agent_tool` spans (`"tool"`, our addition: `tool`, `error`).
* **verl's rollout traces through MLflow over OTLP** (server/intake/otlp.py): one OTLP trace per
  trajectory. `*.generate` (or `mlflow.spanType` LLM/CHAT_MODEL) is a generate turn, `<Tool>.execute`
  (or TOOL) a tool call, `*AgentLoop.run` (or AGENT) the trajectory itself. The step is the span's, or
  the run's step clock at its start (MLflow loses verl's trace tags on export).
* **vLLM's per-request spans** (`--otlp-traces-endpoint`, `gen_ai.*` attributes): queue, prefill and
  decode time and tokens of one request, joined to the generate turn whose span is the request span's
  parent (trace context propagated into the engine), else whose `request_id` is the engine's request id
  (verl's own `request_id` is a sticky-session id shared by a trajectory's turns: kept, never joined).

`facts(span)` returns what one span contributes; runstore/trajectories/index.py merges them, so turns
arriving out of order or twice make the same trajectory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ....protocol import SpanRecord

LANE_PREFIX = "experiment="  # upstream's agent-loop lanes
GENERATE_TYPES = {"LLM", "CHAT_MODEL"}
TOOL_TYPES = {"TOOL"}
AGENT_TYPES = {"AGENT"}
MAX_SESSION_TRAJECTORIES = 64  # trajectories an `agent_session` span may describe


@dataclass(slots=True)
class Turn:
    """One generate or tool call of a trajectory."""
    traj_key: str
    span_id: str
    kind: str  # "generate" | "tool"
    name: str  # the tool for tool calls, the span name for generates
    start_ns: int
    end_ns: int
    step: int | None = None
    replica: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    error: str | None = None
    request_id: str | None = None
    # finish_reason, turn, type (shown in the waterfall); the turn's text when the job sent it: prompt / response
    # (a generate), tool_args / tool_result (a tool), input / output (verl's MLflow spans)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class TrajectoryInfo:
    """What a trajectory-level record says (a session, a task, an agent-loop root span)."""
    traj_key: str
    source: str
    step: int | None = None
    sample: str | None = None
    rollout_n: int | None = None
    validate: bool | None = None
    status: str | None = None
    reward: float | None = None
    reported_turns: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None


@dataclass(slots=True)
class LlmRequest:
    """One inference request as the engine traced it (vLLM's `llm_request` span)."""
    request_id: str
    parent_id: str | None
    trace_id: str
    start_ns: int
    end_ns: int
    replica: str | None
    tokens_in: int | None
    tokens_out: int | None
    queue_s: float | None
    ttft_s: float | None
    prefill_s: float | None
    decode_s: float | None


Fact = Turn | TrajectoryInfo | LlmRequest


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if -2**62 < v < 2**62 else None
    if isinstance(v, float) and v == v and abs(v) < 2**62:
        return int(v)
    if isinstance(v, str):
        try:
            return _int(float(v))
        except ValueError:
            return None
    return None


def _float(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if f - f == 0.0 else None


def _str(v: Any, limit: int = 256) -> str | None:
    return None if v is None or v == "" else str(v)[:limit]


def _bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    return None


def _step(a: dict[str, Any]) -> int | None:
    for key in ("step", "global_steps", "global_step"):
        s = _int(a.get(key))
        if s is not None:
            return s
    return None


def _replica(a: dict[str, Any], engine: bool = False) -> str | None:
    """A turn's replica is what its span says; an engine request's is also its process (resource) identity."""
    keys = ("replica", "rollout_replica", "server_address") + (
        ("resource.service.instance.id", "resource.host.name") if engine else ()
    )
    for key in keys:
        if a.get(key) not in (None, ""):
            return _str(a[key])
    return None


def _error(a: dict[str, Any]) -> str | None:
    err = a.get("error")
    if err not in (None, "", False, "false", "False", "None"):
        return str(err)[:512]
    if str(a.get("status", "")).lower() in ("error", "failure", "failed", "timeout"):
        return str(a["status"])
    if a.get("otel.status_code") == "ERROR":
        return str(a.get("otel.status_description") or "error")[:512]
    return None


def _lane_key(lane: str, step: int | None) -> str:
    """Upstream's lane names the sample, session and trajectory but not the step; a runtime that numbers its
    samples per step would merge step 1's trajectory with step 2's, so the step is part of the key."""
    return (lane if step is None else f"{lane}#step={step}")[:512]


def _session_trajectories(span: SpanRecord, a: dict[str, Any]) -> list[Turn | TrajectoryInfo | LlmRequest]:
    """An `agent_session` span: the session's status for each trajectory it names (our client lists them
    in `trajectories`; upstream's span names only its own `traj`)."""
    lane = span.lane or ""
    base = lane.rsplit("/traj=", 1)[0] if "/traj=" in lane else lane
    status, step, sample = _str(a.get("status")), _step(a), _str(a.get("sample"))
    out: list[Turn | TrajectoryInfo | LlmRequest] = []
    listed = a.get("trajectories")
    if isinstance(listed, str):
        try:
            listed = json.loads(listed)
        except ValueError:
            listed = None
    if isinstance(listed, list):
        for t in listed[:MAX_SESSION_TRAJECTORIES]:
            if isinstance(t, dict) and t.get("traj") is not None:
                out.append(
                    TrajectoryInfo(
                        _lane_key(f"{base}/traj={t['traj']}", step),
                        "session",
                        step,
                        sample,
                        status=_str(t.get("status")) or status,
                        reward=_float(t.get("reward")),
                        reported_turns=_int(t.get("turns")),
                    )
                )
    if not out and lane.startswith(LANE_PREFIX):
        out.append(TrajectoryInfo(_lane_key(lane, step), "session", step, sample, status=status))
    return out


def _mlflow_kind(span: SpanRecord, a: dict[str, Any]) -> str | None:
    kind = a.get("mlflow.spanType")
    name = span.name
    if kind in GENERATE_TYPES or name.endswith(".generate"):
        return "generate"
    if kind in TOOL_TYPES or name.endswith(".execute"):
        return "tool"
    if kind in AGENT_TYPES or name.endswith("AgentLoop.run"):
        return "agent"
    return None


_MLFLOW_TEXTS = (("mlflow.spanInputs", "input"), ("mlflow.spanOutputs", "output"))


def facts(span: SpanRecord) -> list[Fact]:
    """What one finished span says about trajectories; [] for spans that are not about them."""
    if span.end_ns is None:
        return []
    a = span.attributes
    source = a.get("monitor.trace_source")
    lane = span.lane or ""
    if isinstance(a.get("gen_ai.request.id"), str) and (
        "gen_ai.latency.time_in_queue" in a or span.name == "llm_request"
    ):
        return [
            LlmRequest(
                a["gen_ai.request.id"][:256],
                span.parent_id,
                span.trace_id,
                span.start_ns,
                span.end_ns,
                _replica(a, engine=True) or _str(a.get("resource.service.name")),
                _int(a.get("gen_ai.usage.prompt_tokens")),
                _int(a.get("gen_ai.usage.completion_tokens")),
                _float(a.get("gen_ai.latency.time_in_queue")),
                _float(a.get("gen_ai.latency.time_to_first_token")),
                _float(a.get("gen_ai.latency.time_in_model_prefill")),
                _float(a.get("gen_ai.latency.time_in_model_decode")),
            )
        ]
    if source in ("gateway", "tool", "task", "session") and lane.startswith(LANE_PREFIX):
        if source == "session":
            return _session_trajectories(span, a)
        step = _step(a)
        key = _lane_key(lane, step)
        if source == "task":
            return [TrajectoryInfo(key, "task", step, _str(a.get("sample")), status=_str(a.get("status")),
                                   reward=_float(a.get("reward")), start_ns=span.start_ns, end_ns=span.end_ns)]
        if source == "tool":
            return [
                Turn(
                    key,
                    span.id,
                    "tool",
                    _str(a.get("tool")) or span.name,
                    span.start_ns,
                    span.end_ns,
                    step,
                    _replica(a),
                    error=_error(a),
                    detail={k: a[k] for k in ("turn", "tool_args", "tool_result") if k in a},
                )
            ]
        return [
            Turn(
                key,
                span.id,
                "generate",
                span.name,
                span.start_ns,
                span.end_ns,
                step,
                _replica(a),
                _int(a.get("prompt_tokens")),
                _int(a.get("completion_tokens")),
                _error(a),
                _str(a.get("request_id")),
                {k: a[k] for k in ("turn", "type", "tools", "finish_reason", "prompt", "response") if k in a},
            )
        ]
    if "mlflow.traceRequestId" in a or "mlflow.spanType" in a:
        kind = _mlflow_kind(span, a)
        if kind is None or not span.trace_id:
            return []
        key = f"trace:{span.trace_id}"
        if kind == "agent":
            return [TrajectoryInfo(key, "mlflow", _step(a), _str(a.get("sample_index")), _int(a.get("rollout_n")),
                                   _bool(a.get("validate")), "error" if _error(a) else None,
                                   _float(a.get("reward_score")), _int(a.get("num_turns")), span.start_ns, span.end_ns)]
        name = span.name.split(".", 1)[0] if kind == "tool" else span.name
        return [
            Turn(
                key,
                span.id,
                kind,
                name[:256],
                span.start_ns,
                span.end_ns,
                _step(a),
                _replica(a),
                _int(a.get("gen_ai.usage.prompt_tokens")),
                _int(a.get("gen_ai.usage.completion_tokens")),
                _error(a),
                _str(a.get("gen_ai.request.id")),
                # (verl's rollout_trace_op: its inputs and outputs, JSON text, are the turn's prompt and response
                # or the tool's arguments and result)
                {**{k: a[k] for k in ("finish_reason", "verl.request_id") if k in a},
                 **{mine: a[theirs] for theirs, mine in _MLFLOW_TEXTS if theirs in a}},
            )
        ]
    return []
