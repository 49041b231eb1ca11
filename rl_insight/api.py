"""Upstream's module path `rl_insight.api`: the same functions as `rl_insight` (no second implementation)."""

from .client.api import (  # noqa: F401
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
