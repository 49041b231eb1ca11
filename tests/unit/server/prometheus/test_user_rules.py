"""User alert rules (server/prometheus/user_rules.py): every field checked, steps turned into seconds from the run's
own step time (and said so), the PromQL each kind becomes, and promtool's refusal keeping the last good file.
Prometheus loading and firing them: tests/integration/test_alerting.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_insight.errors import ConflictError, InvalidInputError
from rl_insight.server.prometheus import user_rules
from rl_insight.server.prometheus.user_rules import UserRules, describe, expression, render, user_text, validate

LOW = {"name": "RewardLow", "metric": "reward/mean", "kind": "threshold", "op": "below", "value": 0.2,
       "for_steps": 10, "project": "math", "experiment_name": "grpo"}


def test_steps_become_seconds_from_the_runs_step_time_and_the_rule_says_so() -> None:
    r = validate(LOW, step_s=40.0)
    assert (r["for_s"], r["steps_note"]) == (400.0, "10 steps ≈ 400s at 40 s per step")
    live = ' and on(project, experiment_name) rl_insight_insight_stalled_lanes{project="math", experiment_name="grpo"}'
    assert expression(r) == '(rl_insight_monitor_reward_mean{project="math", experiment_name="grpo"} < 0.2)' + live
    assert describe(r) == "reward/mean below 0.2 for 400s (math/grpo) — 10 steps ≈ 400s at 40 s per step"
    jump = validate({"name": "LossJump", "metric": "actor/pg_loss", "kind": "change", "sigma": 3, "window_steps": 50,
                     "project": "math"}, step_s=2.0)
    assert expression(jump) == ('(abs(rl_insight_monitor_actor_pg_loss{project="math"} - avg_over_time('
                                'rl_insight_monitor_actor_pg_loss{project="math"}[100s])) > 3.0 * stddev_over_time('
                                'rl_insight_monitor_actor_pg_loss{project="math"}[100s])) and on(project, '
                                'experiment_name) rl_insight_insight_stalled_lanes{project="math"}')
    seconds = validate({**LOW, "for_steps": None, "for_s": 90}, step_s=None)  # no steps needed when seconds given
    assert (seconds["for_s"], seconds["steps_note"]) == (90.0, "")


@pytest.mark.parametrize("body, says", [
    ({**LOW, "name": "has space"}, "must be a Prometheus alert name"),
    ({**LOW, "name": "RLInsightRunStalled"}, "the shipped alerts'"),
    ({**LOW, "metric": ""}, "needs the metric"),
    ({**LOW, "kind": "trend"}, "kind must be threshold"),
    ({**LOW, "op": "equals"}, "needs op: below or above"),
    ({**LOW, "value": float("nan")}, "value must be a number"),
    ({**LOW, "value": True}, "value must be a number"),
    ({**LOW, "severity": "page"}, "severity must be"),
    ({**LOW, "project": None}, "needs its project too"),
    ({**LOW, "what_to_check": "x" * 1001}, "at most 1000 characters"),
    ({**LOW, "for_steps": 0}, "for_steps must be a number from 1"),
    ({**LOW, "kind": "change", "sigma": 0}, "sigma must be a number from 0.1"),
])
def test_a_bad_rule_is_refused_naming_the_field(body: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        validate(body, step_s=10.0)


def test_steps_without_a_step_time_ask_for_seconds() -> None:
    with pytest.raises(InvalidInputError, match="give for_s instead"):
        validate(LOW, step_s=None)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) is not installed")
@pytest.mark.socket  # (promtool is a process)
def test_promtool_refuses_a_rule_that_does_not_compile_and_the_last_good_file_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rules = UserRules(tmp_path)
    rules.add(LOW, step_s=1.0)
    good = rules.rule_path.read_text()
    assert [r["alert"] for r in yaml.safe_load(good)["groups"][0]["rules"]] == ["RewardLow"]
    broken = user_rules.expression
    monkeypatch.setattr(user_rules, "expression", lambda r: "rate(" if r["name"] == "Broken" else broken(r))
    with pytest.raises(InvalidInputError, match="promtool refused the rule") as err:
        rules.add({**LOW, "name": "Broken"}, step_s=1.0)
    assert "user_rules.yml" in err.value.message and str(tmp_path) not in err.value.message
    assert rules.rule_path.read_text() == good and [r["name"] for r in rules.rules()] == ["RewardLow"]
    with pytest.raises(ConflictError, match="exists"):
        rules.add(LOW, step_s=1.0)
    odd = rules.add({**LOW, "name": "Odd", "metric": "score/{{ query \"up\" }}"}, step_s=1.0)  # shown, never run
    summary = yaml.safe_load(rules.rule_path.read_text())["groups"][0]["rules"][1]["annotations"]["summary"]
    assert odd["metric"] in describe(odd) and "{{ `{{` }} query" in summary
    rules.remove("Odd")
    rules.remove("RewardLow")
    assert yaml.safe_load(rules.rule_path.read_text()) == {"groups": []}
    assert render([]).startswith("# Written by rl-insight")
    off = UserRules(tmp_path / "other", enabled=False)
    with pytest.raises(ConflictError, match="no managed Prometheus"):
        off.add(LOW, step_s=1.0)


def test_what_to_check_is_literal_text_but_for_value_and_label_references() -> None:
    """A user's text never runs as a template (`{{ query … }}` would read every project's data, issue 64): only the
    firing series' own `$value` and `$labels.<name>` are filled in."""
    said = user_text('{{ query "rl_insight_monitor_reward_mean" | first | value }} on $labels.project: $value')
    assert said == ('{{ `{{` }} query "rl_insight_monitor_reward_mean" | first | value }} on {{ $labels.project }}: '
                    '{{ $value }}')
    assert user_text("$valued ${x} $labels. cost: 5$") == "$valued ${x} $labels. cost: 5$"
    rule = validate({**LOW, "what_to_check": "{{ range query \"up\" }}{{ .Labels }}{{ end }}"}, step_s=1.0)
    annotation = yaml.safe_load(render([rule]))["groups"][0]["rules"][0]["annotations"]["what_to_check"]
    assert "{{ range" not in annotation.replace("{{ `{{` }} range", "")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) is not installed")
@pytest.mark.socket  # (promtool is a process)
def test_a_project_outside_the_bmp_is_written_as_promql_reads_it(tmp_path: Path) -> None:
    rules = UserRules(tmp_path)
    rule = rules.add({**LOW, "project": "rocket-\U0001f680", "experiment_name": 'q"\\x'}, step_s=1.0)
    assert '{project="rocket-\U0001f680", experiment_name="q\\"\\\\x"}' in expression(rule)
    with pytest.raises(InvalidInputError, match="not Unicode text"):
        validate({**LOW, "project": "bad-\ud800"}, step_s=1.0)
