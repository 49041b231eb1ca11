"""rl-insight: live observability for RL post-training jobs.

`import rl_insight` loads only the stdlib training client (no web, OpenTelemetry or analysis
stack). The public API is upstream RL-Insight's, which verl's `RLInsightLogger` calls.
"""

from ._version import __version__
from .client.agent_loop import agent_loop_session
from .client.api import (
    finish,
    flush,
    init,
    is_enabled,
    metric_count,
    metric_gauge,
    metric_histogram,
    stats,
    trace_op,
    trace_span,
    trace_state,
    update_prometheus_config,
)

__all__ = [
    "__version__",
    "agent_loop_session",
    "finish",
    "flush",
    "init",
    "is_enabled",
    "metric_count",
    "metric_gauge",
    "metric_histogram",
    "stats",
    "trace_op",
    "trace_span",
    "trace_state",
    "update_prometheus_config",
]
