"""Every import path upstream RL-Insight documents keeps working (issue 64: `from rl_insight import agent_loop`,
upstream 0.3.0's public module imported by its own tests, failed once the package root was emptied). Each is tried in
a fresh interpreter, as a training script would, and names the same objects as `rl_insight`."""

from __future__ import annotations

import subprocess
import sys

import pytest

PATHS = [
    "import rl_insight; rl_insight.init, rl_insight.finish, rl_insight.metric_gauge, rl_insight.metric_count, "
    "rl_insight.metric_histogram, rl_insight.trace_state, rl_insight.trace_op, rl_insight.trace_span, "
    "rl_insight.update_prometheus_config, rl_insight.agent_loop_session, rl_insight.__version__",
    "from rl_insight import agent_loop; assert agent_loop.agent_loop_session is __import__('rl_insight')"
    ".agent_loop_session",
    "import rl_insight.agent_loop as m; m.agent_loop_lane_id('e', 1, 2, 0)",
    "from rl_insight.agent_loop import agent_loop_session, agent_loop_lane_id",
    "from rl_insight.api import *; init, finish, metric_gauge, trace_state, update_prometheus_config",
    "import rl_insight.api as a, rl_insight; assert a.trace_state is rl_insight.trace_state",
    "from rl_insight.utils import update_prometheus_config; import rl_insight; "
    "assert update_prometheus_config is rl_insight.update_prometheus_config",
    "from rl_insight import init, finish, metric_gauge, metric_count, metric_histogram, trace_state, trace_op, "
    "trace_span, update_prometheus_config, agent_loop_session",
]


@pytest.mark.parametrize("code", PATHS)
def test_an_upstream_import_path_works_in_a_fresh_process(code: str) -> None:
    # and stays light: none of them loads the server, OpenTelemetry or the analysis stack
    check = code + "; import sys; heavy = [m for m in ('fastapi', 'opentelemetry', 'numpy', 'rl_insight.server') " \
                   "if m in sys.modules]; assert not heavy, heavy"
    r = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
