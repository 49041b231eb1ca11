"""Receivers (server/rooms/alerting/receivers.py) and the Alertmanager configuration made from them (am_config.py):
every field checked before anything is written, secrets kept 0600 and never shown, routes and grouping as documented.
Alertmanager's own check of the result runs in tests/integration/test_alerting.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_insight.errors import ConfigError, InvalidInputError
from rl_insight.server.rooms.alerting import am_config
from rl_insight.server.rooms.alerting.receivers import ReceiverFile, shown, validate

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


PAGERDUTY = '''
"""A throwaway kind for the test: PagerDuty's Events API v2, by its routing key."""
from .base import Field, ReceiverKind, required_text

KIND = ReceiverKind(
    "pagerduty", 40, (Field("routing_key", lambda body, key: required_text(body, key), "pagerduty: the routing key",
                            flag="--pagerduty-key", from_file=True, cli_help="PagerDuty's routing key."),),
    lambda r, relay, resolved: {"pagerduty_configs": [{"routing_key": r["routing_key"], "send_resolved": resolved}]},
    lambda r: "PagerDuty")
'''


def test_a_receiver_kind_is_one_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 65: receiver kinds were written three times (a Literal, the API's model, the CLI's branches). A module
    in kinds/ is a kind: found there, checked, rendered for Alertmanager, shown and offered by the CLI."""
    import sys

    from rl_insight.cli import alerts as cli_alerts
    from rl_insight.server.rooms.alerting import kinds

    (tmp_path / "pagerduty.py").write_text(PAGERDUTY)
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, f"{kinds.__name__}.pagerduty", raising=False)
    found = kinds._found()
    assert list(found) == ["webhook", "slack", "email", "pagerduty"]
    monkeypatch.setitem(kinds.KINDS, "pagerduty", found["pagerduty"])

    r = validate({"name": "pager", "kind": "pagerduty", "routing_key": "R0UT1NG"})
    assert r == {"name": "pager", "kind": "pagerduty", "project": None, "routing_key": "R0UT1NG"}
    with pytest.raises(InvalidInputError, match="needs 'routing_key'"):
        validate({"name": "pager", "kind": "pagerduty"})
    doc = yaml.safe_load(am_config.render([r]))
    assert {x["name"]: x for x in doc["receivers"]}["pager"]["pagerduty_configs"] == [
        {"routing_key": "R0UT1NG", "send_resolved": True}]
    assert shown(r)["target"] == "PagerDuty"
    assert "pagerduty_key_file" in [p.name for p in cli_alerts._add_parameters()]
