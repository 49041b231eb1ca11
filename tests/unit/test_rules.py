"""Prometheus rules: promtool accepts them, and its unit tests cover every alert firing and not firing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = sorted((ROOT / "provisioning" / "rules").glob("*.yml"))
TESTS = ROOT / "tests" / "promtool" / "alerts.test.yml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        import os

        if os.environ.get("CI"):
            pytest.fail("promtool missing in CI (Debian's prometheus package provides it)")
        pytest.skip("promtool not installed")
    return path


def test_promtool_check_rules() -> None:
    out = subprocess.run([promtool(), "check", "rules", *map(str, RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests_pass() -> None:
    out = subprocess.run([promtool(), "test", "rules", str(TESTS)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_unit_test_and_documentation() -> None:
    alerts = {
        r["alert"]: r
        for f in RULES
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests for t in case.get("alert_rule_test", [])}
    assert set(alerts) <= fired, f"alerts without a firing test: {set(alerts) - fired}"
    assert set(alerts) <= quiet
    for name, rule in alerts.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
    docs = (ROOT / "docs" / "dashboards.md").read_text()
    for name in alerts:
        assert name in docs, f"{name} is not documented in docs/dashboards.md"
