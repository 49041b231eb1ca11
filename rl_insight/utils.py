"""Upstream's module path `rl_insight.utils` (`from rl_insight.utils import update_prometheus_config`)."""

from .client.api import update_prometheus_config  # noqa: F401 - re-exported: upstream's import path

__all__ = ["update_prometheus_config"]
