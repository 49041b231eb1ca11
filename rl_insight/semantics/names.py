"""Prometheus name rules, shared by the client (step-metric matching) and the server (exposition).

Stdlib-only and free of `re`, so the training client can import it without paying for the regex
module at start-up.
"""

from __future__ import annotations

from functools import lru_cache

METRIC_PREFIX = "rl_insight_monitor_"
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = "0123456789"
_METRIC_FIRST = frozenset(_LETTERS + "_:")
_METRIC_REST = frozenset(_LETTERS + _DIGITS + "_:")
_LABEL_FIRST = frozenset(_LETTERS + "_")
_LABEL_REST = frozenset(_LETTERS + _DIGITS + "_")


class InvalidNameError(ValueError):
    """A metric or label name that cannot be turned into a valid Prometheus name."""


def sanitize_metric_name(name: str) -> str:
    """Map any non-empty string onto `[a-zA-Z_:][a-zA-Z0-9_:]*`.

    `val-core/openai/gsm8k/acc/mean@1` -> `val_core_openai_gsm8k_acc_mean_1`. Characters outside the
    alphabet become `_`; a leading digit gets a `_` prefix.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidNameError(f"metric name must be a non-empty string, got {name!r:.100}")
    return _sanitize_metric(name)


@lru_cache(maxsize=65536)
def _sanitize_metric(name: str) -> str:
    out = "".join(c if c in _METRIC_REST else "_" for c in name.strip())
    return out if out[0] in _METRIC_FIRST else "_" + out


def sanitize_label_name(name: str) -> str:
    """Map a label name onto `[a-zA-Z_][a-zA-Z0-9_]*`; names starting with `__` stay reserved."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidNameError(f"label name must be a non-empty string, got {name!r:.100}")
    return _sanitize_label(name)


@lru_cache(maxsize=65536)
def _sanitize_label(name: str) -> str:
    out = "".join(c if c in _LABEL_REST else "_" for c in name.strip())
    out = out if out[0] in _LABEL_FIRST else "_" + out
    if out.startswith("__"):
        raise InvalidNameError(f"label name {name!r} is reserved: names starting with '__' belong to Prometheus")
    return out


def is_valid_label_name(name: object) -> bool:
    """Strict check (no sanitizing), for places where we must refuse rather than rewrite."""
    return (
        isinstance(name, str)
        and bool(name)
        and name[0] in _LABEL_FIRST
        and all(c in _LABEL_REST for c in name)
        and not name.startswith("__")
    )


def exposed_name(name: str) -> str:
    """The series name a trainer scalar gets on /metrics: `rl_insight_monitor_<sanitized>`."""
    return METRIC_PREFIX + sanitize_metric_name(name)
