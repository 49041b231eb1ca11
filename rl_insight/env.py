"""Every `RL_INSIGHT_*` environment variable, named once (stdlib only: the training client imports it).

The client reads them in `client/config.py`, the server side in `services/home.py` and the CLI's
option declarations (cli/start_flags.py); nothing else looks at the environment by these names.
"""

from __future__ import annotations

import os

SERVER_URL = "RL_INSIGHT_SERVER_URL"  # where the client sends (wins over config["server"]["url"])
TOKEN = "RL_INSIGHT_TOKEN"  # bearer token (client and CLI)
METRICS_TOKEN = "RL_INSIGHT_METRICS_TOKEN"  # the bearer token /metrics needs (`server start --metrics-token`)
PROJECT = "RL_INSIGHT_PROJECT"  # run identity for bare init() (verl's workers)
EXPERIMENT_NAME = "RL_INSIGHT_EXPERIMENT_NAME"
STEP_METRIC = "RL_INSIGHT_STEP_METRIC"
TAGS = "RL_INSIGHT_TAGS"  # comma-separated run tags, added to config["tags"]
QUEUE_SIZE = "RL_INSIGHT_QUEUE_SIZE"
FLUSH_INTERVAL = "RL_INSIGHT_FLUSH_INTERVAL"  # linger: how long events wait before being sent (s)
EXIT_TIMEOUT = "RL_INSIGHT_EXIT_TIMEOUT"
SPAN_BUDGET = "RL_INSIGHT_SPAN_BUDGET"  # agent-loop turn spans per step and process (client/span_budget.py)
STORE_URL = "RL_INSIGHT_STORE_URL"  # server side: the run store (postgresql://…; server/runstore/backend/location.py)
STORE_PASSWORD = "RL_INSIGHT_STORE_PASSWORD"  # server side: the store's password (never in the URL)
HOME = "RL_INSIGHT_HOME"  # server side: ~/.rl-insight by default
DOWNLOAD_MIRROR = "RL_INSIGHT_DOWNLOAD_MIRROR"
LOG_LEVEL = "RL_INSIGHT_LOG_LEVEL"  # the CLI's --log-level
SERVER_OPTION_PREFIX = "RL_INSIGHT_SERVER_"  # + an option's field name, upper case: every `server start` option


def get(name: str) -> str:
    """The variable's value, stripped; "" when unset."""
    return os.environ.get(name, "").strip()
