"""Receivers (server/outbound/alerting/receivers.py) and the Alertmanager configuration made from them (am_config.py):
every field checked before anything is written, secrets kept 0600 and never shown, routes and grouping as documented.
Alertmanager's own check of the result runs in tests/integration/test_alerting.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_insight.errors import ConfigError, InvalidInputError
from rl_insight.server.outbound.alerting import am_config
from rl_insight.server.outbound.alerting.receivers import ReceiverFile, shown, validate

HOOK = {"name": "team", "kind": "webhook", "url": "https://ci.example.com/hooks/KEY123"}
MAIL = {"name": "oncall", "kind": "email", "to": "oncall@example.com", "sender": "rl@example.com",
        "smarthost": "smtp.example.com:587", "username": "bot", "password": "pa55"}


@pytest.mark.parametrize("body, says", [
    ({**HOOK, "colour": "red"}, "unknown receiver field(s): 'colour'"),
    ({**HOOK, "name": "bad name"}, "must be 1-64 letters"),
    ({**HOOK, "name": "rl-insight-none"}, "not starting with 'rl-insight-'"),
    ({**HOOK, "name": "x" * 65}, "must be 1-64 letters"),
    ({**HOOK, "kind": "pager"}, "is not one of webhook, slack, email"),
    ({**HOOK, "url": "file:///etc/passwd"}, "is not an http(s)://host/… URL"),
    ({**HOOK, "url": "https://x.example/\nInjected: 1"}, "must be one line"),
    ({**HOOK, "url": 7}, "must be a string, found int"),
    # accepted by Alertmanager, delivered never (issue 64)
    ({**HOOK, "url": "http://127.0.0.1:99999/hook"}, "can never be reached"),
    ({**HOOK, "url": "http://127.0.0.1:0/hook"}, "can never be reached"),
    ({**HOOK, "url": "http://bad_host!/hook"}, "can never be reached"),
    ({"name": "chat", "kind": "slack", "url": "https://hooks.example/T/B/k", "channel": "#rl {{ .Oops"},
     "must be #name, @user or a channel id"),
    ({"name": "chat", "kind": "slack", "url": "https://hooks.example/T/B/k", "channel": "#rl-alerts {{"},
     "must be #name, @user or a channel id"),
    ({**HOOK, "project": "p" * 3000}, "at most 2048 characters"),
    ({"name": "n", "kind": "webhook"}, "a receiver needs 'url'"),
    ({**MAIL, "to": "not an address"}, "is not an email address"),
    ({**MAIL, "smarthost": "smtp.example.com"}, "must be host:port"),
    ({**MAIL, "smarthost": "smtp.example.com:70000"}, "must be host:port"),
    ({**MAIL, "require_tls": "no"}, "require_tls must be true or false"),
    ([HOOK], "must be a JSON object"),
])
def test_a_bad_receiver_is_refused_naming_the_field(body: Any, says: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        validate(body)
    assert says in err.value.message


def test_what_is_shown_carries_no_secret_and_the_file_is_private(tmp_path: Path) -> None:
    receivers = [validate(HOOK), validate(MAIL),
                 validate({"name": "chat", "kind": "slack", "url": "https://hooks.slack.com/services/T/B/XYZ",
                           "channel": "#rl", "project": "math"})]
    assert [shown(r) for r in receivers] == [
        {"name": "team", "kind": "webhook", "project": None, "target": "https://ci.example.com/…",
         "password_set": False},
        {"name": "oncall", "kind": "email", "project": None, "target": "oncall@example.com via smtp.example.com:587",
         "password_set": True},
        {"name": "chat", "kind": "slack", "project": "math", "target": "https://hooks.slack.com/… (#rl)",
         "password_set": False}]
    f = ReceiverFile(tmp_path / "alerting" / "receivers.json")
    assert f.load() == []
    f.save(receivers)
    assert f.path.stat().st_mode & 0o777 == 0o600 and f.load() == receivers
    f.path.write_text("{not json")
    with pytest.raises(InvalidInputError, match="is not a receivers file"):
        f.load()


def test_the_configuration_routes_groups_tests_and_inhibits_as_documented() -> None:
    receivers = [validate(HOOK), validate({**HOOK, "name": "quoted", "project": 'we"ird\\name'})]
    doc = yaml.safe_load(am_config.render(receivers, am_config.Grouping("10s", "2m", "12h")))
    route = doc["route"]
    assert (route["receiver"], route["group_by"], route["group_wait"], route["group_interval"],
            route["repeat_interval"]) == ("rl-insight-none", ["alertname", "project", "experiment_name"], "10s", "2m",
                                          "12h")
    # tests first, each to its receiver alone and at once; then every receiver, the project one only for its project
    assert route["routes"][:2] == [
        {"receiver": "rl-insight-test-team", "matchers": ['rl_insight_test="team"'], "group_wait": "0s",
         "group_by": ["..."]},
        {"receiver": "rl-insight-test-quoted", "matchers": ['rl_insight_test="quoted"'], "group_wait": "0s",
         "group_by": ["..."]}]
    # Prometheus' lane stall is the server's run stall, told once (issue 64): never delivered, whoever is added
    assert route["routes"][2] == {"receiver": "rl-insight-none", "matchers": ['alertname=~"RLInsightLaneStalled"']}
    assert route["routes"][3:] == [{"receiver": "team", "continue": True},
                                   {"receiver": "quoted", "continue": True,
                                    "matchers": ['project="we\\"ird\\\\name"']}]
    by_name = {r["name"]: r for r in doc["receivers"]}
    assert by_name["team"]["webhook_configs"][0]["send_resolved"] is True
    assert by_name["rl-insight-test-team"]["webhook_configs"][0]["send_resolved"] is False
    assert [r["source_matchers"] for r in doc["inhibit_rules"]] == [['alertname="RLInsightRunStalled"']]


@pytest.mark.parametrize("bad", ["", "30", "5 m", "1.5h", "-1s"])
def test_a_grouping_duration_alertmanager_cannot_read_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="is not a duration"):
        am_config.Grouping(wait=bad)
