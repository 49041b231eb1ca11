"""Upstream's module path `rl_insight.api`: the same functions as `rl_insight` (no second implementation)."""

from . import *  # noqa: F401,F403 - the package's public API, exactly
from . import __all__  # noqa: F401 - re-exported: `from rl_insight.api import *` takes the package's list
