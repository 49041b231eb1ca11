"""rl-insight: live observability for RL post-training jobs.

`import rl_insight` loads only the stdlib training client (no web, OpenTelemetry or analysis
stack), and only when a name of it is first used: the CLI, which imports this package too, does
not pay for the client. The public API is upstream RL-Insight's, which verl's `RLInsightLogger` calls.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
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
_WHERE = {name: ".client.api" for name in __all__ if name not in ("__version__", "agent_loop_session")}
_WHERE["agent_loop_session"] = ".client.agent_loop"


def __getattr__(name: str) -> Any:
    """The training API's names, imported on first use and then kept here (a second use is a plain attribute)."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
