"""Real torch traces, made once per module that asks for them."""

from tests.unit.analysis.test_analysis import torch_traces  # noqa: F401 - a pytest fixture, found by name
