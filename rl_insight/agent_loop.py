"""Upstream's module path `rl_insight.agent_loop` (0.3.0's public module, imported by its tests and documented in
docs/compat.md): `from rl_insight import agent_loop`, `from rl_insight.agent_loop import agent_loop_session`. The same
functions as `rl_insight.client.agent_loop` (no second implementation)."""

from .client.agent_loop import agent_loop_lane_id, agent_loop_session  # noqa: F401 - re-exported: upstream's path

__all__ = ["agent_loop_lane_id", "agent_loop_session"]
