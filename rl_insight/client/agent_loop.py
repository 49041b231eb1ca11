"""Agent-loop sessions: upstream RL-Insight 0.3.0's `agent_loop_session` protocol, as its
`agent_loop_trajectory` dashboard reads it.

`agent_loop_session(experiment_name=…, sample=…, session=…)` fixes a session's identity and start time;
`.finish(trajectories=…, status=…)` publishes the dashboard's hierarchy gauges (`agent_loop_run_info`,
`agent_loop_sample_info`, `agent_loop_session_info`, one `agent_loop_traj_info` per trajectory, the first
and last turn times) and one `agent_session` span (`monitor.trace_source="session"`), all through the
public API, so they reach /metrics, Tempo and the run store like everything else.

Differences from upstream, on purpose:
* the gauges are info series (value 1, identity in labels): upstream keeps one series per sample,
  session and trajectory on /metrics forever. The server drops `agent_loop_*` series after
  `agent_loop_series_ttl_s` (default 120 s: several scrapes, so Prometheus has them) instead of its
  hour-long default; the run store keeps everything;
* `finish` runs once (a second call is ignored), accepts trajectories as objects or dicts
  (`chain_id`, `reward_score`, `num_turns`), and never raises into the agent loop;
* the `agent_session` span is on the session's lane (`state_lane_id`), so the run's timeline shows it,
  and lists each trajectory's reward, turns and status (`trajectories`, JSON, at most 64) for the
  server's trajectory view;
* `generation(...)` and `tool_call(...)` emit the runtimes' turn spans (`gateway_generation` with
  upstream's attributes, and `agent_tool`, ours) on the trajectory's lane, so an agent loop need not
  spell the protocol out with `trace_span`.
"""

from __future__ import annotations

import json
import time

from ..protocol.limits import MAX_ATTRIBUTE_VALUE
from .api import _internal_error, metric_gauge, trace_span

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

STATUSES = ("success", "failure", "empty", "capacity_exhausted", "error")  # upstream's vocabulary
# the gauges `finish` publishes (the agent_loop_trajectory dashboard reads them; tests check both)
GAUGES = ("agent_loop_run_info", "agent_loop_sample_info", "agent_loop_session_info", "agent_loop_traj_info",
          "agent_loop_first_turn_unixtime", "agent_loop_last_turn_unixtime")


def _sess_key(sample: Any, session: Any) -> str:
    return f"sample={sample}/session={session}"


def agent_loop_lane_id(experiment_name: Any, sample: Any, session: Any, traj: Any) -> str:
    """The lane of one trajectory: `experiment=<exp>/sample=<s>/session=<sess>/traj=<t>` (upstream's)."""
    return f"experiment={experiment_name}/{_sess_key(sample, session)}/traj={traj}"


def _field(traj: Any, key: str, default: Any = None) -> Any:
    if isinstance(traj, dict):
        return traj.get(key, default)
    return getattr(traj, key, default)


def _text(value: Any) -> str:
    """A prompt, response or tool payload as a span attribute: cut here, not only by the server, so a 1 MB prompt is
    never held in the process's queue (the cut is marked, as the server marks its own)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_ATTRIBUTE_VALUE else text[: MAX_ATTRIBUTE_VALUE - 1] + "…"


def _number(value: Any, default: float = 0.0) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        return default
    return v if v - v == 0.0 else default  # finite


class AgentLoopSession:
    """One agent-loop session (one sample's rollout, its trajectories); `identity` is fixed at creation."""

    __slots__ = ("identity", "start_ns", "_finished", "_turns")

    def __init__(self, identity: dict[str, Any], start_ns: int) -> None:
        self.identity = identity
        self.start_ns = start_ns
        self._finished = False
        self._turns: dict[str, int] = {}

    def _turn_attrs(self, traj: Any, turn: Any, source: str) -> dict[str, Any]:
        ident = self.identity
        traj = str(ident["traj"] if traj is None else traj)
        if turn is None:  # numbered per trajectory in call order
            turn = self._turns.get(traj, 0)
            self._turns[traj] = turn + 1
        return {
            **ident,
            "traj": traj,
            "state_lane_id": agent_loop_lane_id(ident["experiment_name"], ident["sample"], ident["session"], traj),
            "monitor.trace_source": source,
            "turn": int(_number(turn)),
        }

    def generation(
        self,
        *,
        start_time_ns: int,
        end_time_ns: int,
        traj: Any = None,
        turn: Any = None,
        prompt_tokens: Any = None,
        completion_tokens: Any = None,
        finish_reason: str | None = None,
        tools: Any = None,
        replica: str | None = None,
        request_id: str | None = None,
        status: str = "success",
        error: str | None = None,
        type: str = "generate",
        prompt: Any = None,
        response: Any = None,
    ) -> None:
        """One model call of a trajectory (upstream's `gateway_generation` span). Never raises. `prompt` and
        `response` (text, or messages: JSON): shown with the turn in the trajectory view, each cut at 4,096
        characters."""
        try:
            attrs = {
                **self._turn_attrs(traj, turn, "gateway"),
                "type": type,
                "status": status,
                "prompt_tokens": int(_number(prompt_tokens)),
                "completion_tokens": int(_number(completion_tokens)),
                "finish_reason": finish_reason or "",
                "tools": ",".join(map(str, tools)) if isinstance(tools, (list, tuple)) else str(tools or ""),
            }
            for key, value in (("replica", replica), ("request_id", request_id), ("error", error)):
                if value:
                    attrs[key] = str(value)
            for key, value in (("prompt", prompt), ("response", response)):
                if value is not None and value != "":
                    attrs[key] = _text(value)
            trace_span(
                name="gateway_generation",
                start_time_ns=int(start_time_ns),
                end_time_ns=int(end_time_ns),
                attributes=attrs,
            )
        except Exception as exc:
            _internal_error("agent_loop_session.generation", exc)

    def tool_call(self, tool: str, *, start_time_ns: int, end_time_ns: int, traj: Any = None, turn: Any = None,
                  error: str | None = None, tool_args: Any = None, tool_result: Any = None) -> None:
        """One tool call of a trajectory (`agent_tool` span: `tool`, `error`). Never raises. `tool_args` and
        `tool_result` (text, or JSON): shown with the turn, each cut at 4,096 characters."""
        try:
            attrs = {
                **self._turn_attrs(traj, turn, "tool"),
                "tool": str(tool),
                "status": "error" if error else "success",
            }
            if error:
                attrs["error"] = str(error)
            for key, value in (("tool_args", tool_args), ("tool_result", tool_result)):
                if value is not None and value != "":
                    attrs[key] = _text(value)
            trace_span(
                name="agent_tool", start_time_ns=int(start_time_ns), end_time_ns=int(end_time_ns), attributes=attrs
            )
        except Exception as exc:
            _internal_error("agent_loop_session.tool_call", exc)

    def finish(self, *, trajectories: list[Any], status: str, runner_name: str | None = None,
               reward_source: str | None = None, finished: bool | None = None) -> None:
        """Publish the dashboard's gauges and the `agent_session` span. Once; never raises."""
        if self._finished:
            return
        self._finished = True
        try:
            end_ns = time.time_ns()
            trajectories = list(trajectories or [])
            ident = self.identity
            _publish_agent_loop_session(
                experiment_name=ident["experiment_name"],
                sample=ident["sample"],
                session=ident["session"],
                trajectories=trajectories,
                global_steps=ident["global_steps"],
                start_time_ns=self.start_ns,
                end_time_ns=end_ns,
            )
            listed = _trajectory_items(trajectories)
            trace_span(name="agent_session", start_time_ns=self.start_ns, end_time_ns=end_ns, attributes={
                **self.identity, "monitor.trace_source": "session", "runner_name": runner_name or "",
                "status": str(status), "num_trajectories": len(trajectories), "reward_source": reward_source or "",
                "finished": finished if finished is not None else "", "trajectories": json.dumps(listed[:64])})
        except Exception as exc:  # the agent loop never pays for monitoring
            _internal_error("agent_loop_session.finish", exc)



def _trajectory_items(trajectories: list[Any]) -> list[dict[str, Any]]:
    """Each trajectory's id (`chain_id` - 1, else its index), reward, turns and status, whatever shape it has."""
    items = []
    for index, traj in enumerate(trajectories):
        chain_id = _field(traj, "chain_id")
        item = {"traj": str(int(_number(chain_id)) - 1) if chain_id is not None else str(index),
                "reward": _number(_field(traj, "reward_score", 0)), "turns": int(_number(_field(traj, "num_turns", 0)))}
        if _field(traj, "status") is not None:
            item["status"] = str(_field(traj, "status"))
        items.append(item)
    return items


def _publish_agent_loop_session(
    *,
    experiment_name: Any,
    sample: Any,
    session: Any,
    trajectories: list[Any] | None,
    global_steps: Any = None,
    start_time_ns: int | None = None,
    end_time_ns: int | None = None,
) -> None:
    """The agent_loop_trajectory dashboard's hierarchy gauges (upstream's name and keywords): run, sample, session,
    one per trajectory, the first and last turn times. Never raises."""
    try:
        exp, sample, session = str(experiment_name), str(sample), str(session)
        base = {"experiment_name": exp, "global_steps": "" if global_steps in (None, "") else str(global_steps)}
        metric_gauge("agent_loop_run_info", 1.0, **base, title=f"Experiment · {exp}")
        metric_gauge("agent_loop_sample_info", 1.0, **base, sample=sample, title=f"Sample {sample}")
        metric_gauge("agent_loop_session_info", 1.0, **base, sample=sample, session=session,
                     sess_key=_sess_key(sample, session), title=f"Session {session}")
        for t in _trajectory_items(list(trajectories or [])):
            metric_gauge("agent_loop_traj_info", 1.0, **base, sample=sample, session=session, traj=t["traj"],
                         leaf=f"{_sess_key(sample, session)}/traj={t['traj']}",
                         title=f"Trajectory #{t['traj']} · reward {t['reward']:g} · {t['turns']} turns")
        now = time.time_ns()
        metric_gauge(
            "agent_loop_first_turn_unixtime", (start_time_ns if start_time_ns is not None else now) / 1e9, **base
        )
        metric_gauge("agent_loop_last_turn_unixtime", (end_time_ns if end_time_ns is not None else now) / 1e9, **base)
    except Exception as exc:  # the agent loop never pays for monitoring
        _internal_error("agent_loop_session gauges", exc)


def agent_loop_session(*, project: Any = None, experiment_name: Any, sample: Any, session: Any, traj: Any = 0,
                       uid: Any = None, global_steps: Any = None, session_id: Any = None) -> AgentLoopSession:
    """The identity and start time of one agent-loop session (upstream 0.3.0's signature). `global_steps`
    stays a number in the span (the dashboard's TraceQL matches it exactly)."""
    exp, sample, session, traj = str(experiment_name), str(sample), str(session), str(traj)
    identity = {"project": "" if project is None else str(project), "experiment_name": exp, "sample": sample,
                "session": session, "traj": traj, "state_lane_id": agent_loop_lane_id(exp, sample, session, traj),
                "uid": "" if uid is None else str(uid), "global_steps": "" if global_steps is None else global_steps,
                "session_id": "" if session_id is None else str(session_id)}
    return AgentLoopSession(identity, time.time_ns())
