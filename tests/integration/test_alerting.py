"""Notifications delivered by a real Alertmanager (Debian's prometheus-alertmanager) to a webhook, a Slack-compatible
endpoint (local HTTP receivers that check the payload shapes those services accept) and email (a real SMTP server,
aiosmtpd): receivers added, refused and removed while it runs, secrets never answered back, the server's own stall
and hang events as one grouped notification with a link to the step, resolved when the run moves again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from rl_insight.server.rooms.alerting import am_config
from rl_insight.server.rooms.alerting.alertmanager import rfc3339
from rl_insight.server.rooms.alerting.am_config import Grouping
from rl_insight.server.rooms.alerting.notifications import write_config
from rl_insight.server.rooms.alerting.parts import alerting_of
from rl_insight.services.alertmanager import AlertmanagerSettings, command
from rl_insight.services.binaries import find_binary
from tests.conftest import RunningServer, free_port, start_server, wait_until
from tests.integration.conftest import Stack, cli

TOKEN = "alert-token"
H = {"Authorization": f"Bearer {TOKEN}"}
FAST = Grouping("1s", "1s", "1h")  # what the defaults (30s, 5m) do, in seconds


class Inbox:
    """A local HTTP endpoint standing in for a webhook and Slack: it records every JSON body by path."""

    def __init__(self) -> None:
        self.got: list[tuple[str, dict[str, Any]]] = []
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                inbox.got.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *a: object) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def at(self, path: str) -> list[dict[str, Any]]:
        return [b for p, b in self.got if p == path]


class Mailbox:
    def __init__(self) -> None:
        from aiosmtpd.controller import Controller

        self.messages: list[Any] = []
        box = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's
                box.messages.append(message_from_bytes(envelope.content))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()


class ManagedAlertmanager:
    """Debian's Alertmanager on a free port, as the supervisor runs it: its state under the server's data dir."""

    def __init__(self, data: Path) -> None:
        binary = find_binary("alertmanager", data / "none")
        # (the server, started next, writes the configuration with its own address at its first receiver change)
        config = write_config(data, FAST, am_config.Relay("http://127.0.0.1:9"))
        self.settings = AlertmanagerSettings("127.0.0.1", free_port(), data / "alertmanager", config)
        self.settings.data_dir.mkdir(parents=True)
        self.argv = command(binary.path, self.settings)
        self.log = data / "alertmanager.log"
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: _answers(self.settings.url + "/-/ready"), timeout=30, what="alertmanager ready")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[RunningServer, Inbox, Mailbox, ManagedAlertmanager]]:
    am = ManagedAlertmanager(tmp_path / "data")
    srv = start_server(tmp_path, token=TOKEN, alertmanager_url=am.settings.url, public_url="http://rl.example:18080",
                       alert_group_wait=FAST.wait, alert_group_interval=FAST.interval,
                       alert_repeat_interval=FAST.repeat)
    inbox, mail = Inbox(), Mailbox()
    yield srv, inbox, mail, am
    srv.stop()
    am.stop()
    inbox.srv.shutdown()
    mail.controller.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.HTTPError:
        return False


def _add(srv: RunningServer, body: dict[str, Any], **params: Any) -> httpx.Response:
    return httpx.post(srv.url + "/api/v1/alerting/receivers", json=body, params=params, headers=H)


def _run(srv: RunningServer, project: str = "math", experiment: str = "grpo", step: int = 7) -> int:
    run = {"project": project, "experiment_name": experiment}
    batch = {"v": 1, "client": {"id": f"trainer-{experiment}", **run}, "samples": [[0, time.time(), step, float(step)]],
             "series": [{"k": "g", "n": "training/global_step", "l": run}]}
    assert httpx.post(srv.url + "/api/v1/ingest", json=batch, headers=H).status_code == 200
    srv.app.state.st.writer.flush(10)
    runs = httpx.get(srv.url + "/api/v1/runs", headers=H).json()["runs"]
    return next(r["id"] for r in runs if (r["project"], r["experiment_name"]) == (project, experiment))


def test_receivers_added_refused_tested_and_removed_without_a_restart(rig, monkeypatch: pytest.MonkeyPatch) -> None:
    srv, inbox, mail, _ = rig
    secret_path = "/hooks/T000/B000/s3cr3t-webhook-key"
    assert httpx.get(srv.url + "/api/v1/alerting", headers=H).json()["message"].startswith("on, but no receiver")
    r = _add(srv, {"name": "team", "kind": "webhook", "url": inbox.url + secret_path})
    assert r.status_code == 201 and r.json()["applied"], r.text
    assert _add(srv, {"name": "chat", "kind": "slack", "url": inbox.url + "/slack/xoxb-secret",
                      "channel": "#rl"}).status_code == 201
    assert _add(srv, {"name": "oncall", "kind": "email", "to": "oncall@example.com", "sender": "rl@example.com",
                      "smarthost": f"127.0.0.1:{mail.port}", "require_tls": False,
                      "password": "smtp-pa55word"}).status_code == 201

    # secrets: on disk 0600, never in an answer
    data = Path(srv.config.data_dir) / "alerting"
    assert {p.name: p.stat().st_mode & 0o777 for p in data.iterdir()} == {"receivers.json": 0o600,
                                                                         "alertmanager.yml": 0o600,
                                                                         "relay_token": 0o600}
    assert "s3cr3t-webhook-key" not in (data / "alertmanager.yml").read_text()  # Alertmanager posts to this server
    shown = httpx.get(srv.url + "/api/v1/alerting/receivers", headers=H)
    everything = shown.text + httpx.get(srv.url + "/healthz").text + httpx.get(srv.url + "/api/v1/alerting",
                                                                               headers=H).text
    for secret in ("s3cr3t-webhook-key", "xoxb-secret", "smtp-pa55word"):
        assert secret not in everything
    assert {r["name"]: r["target"] for r in shown.json()["receivers"]} == {
        "team": inbox.url + "/…", "chat": inbox.url + "/… (#rl)",
        "oncall": f"oncall@example.com via 127.0.0.1:{mail.port}"}
    assert httpx.post(srv.url + "/api/v1/alerting/receivers", json={"name": "x", "kind": "webhook"}).status_code \
        == 401  # no token, no change

    # refused whole: a name taken, a bad field, and a configuration Alertmanager itself refuses (amtool, then reload)
    assert _add(srv, {"name": "team", "kind": "webhook", "url": inbox.url + "/other"}).status_code == 409
    bad = _add(srv, {"name": "ftp", "kind": "webhook", "url": "ftp://example.com/x"})
    assert bad.status_code == 422 and "is not an http(s)://host/… URL" in bad.json()["detail"]
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    broken = lambda *_: "route:\n  receiver: nobody\nreceivers:\n  - name: somebody\n"  # noqa: E731
    monkeypatch.setattr(am_config, "render", broken)
    refused = _add(srv, {"name": "new", "kind": "webhook", "url": inbox.url + "/new"})
    assert refused.status_code == 422 and 'undefined receiver "nobody"' in refused.json()["detail"]
    # no amtool: Alertmanager's reload decides
    monkeypatch.setattr(alerting_of(srv.app.state.st).notifications, "amtool", None)
    refused = _add(srv, {"name": "new", "kind": "webhook", "url": inbox.url + "/new"})
    assert refused.status_code == 422 and "Alertmanager refused POST /-/reload" in refused.json()["detail"]
    assert 'undefined receiver "nobody"' in refused.json()["detail"]
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before  # nothing changed
    monkeypatch.undo()

    # a test goes to the one receiver, at once, and still works after the refusals (the running config was kept)
    t = httpx.post(srv.url + "/api/v1/alerting/receivers/team/test", headers=H)
    assert t.status_code == 200, t.text
    wait_until(lambda: inbox.at(secret_path), timeout=20, what="the test notification")
    msg = inbox.at(secret_path)[0]
    assert msg["version"] == "4" and msg["status"] == "firing" and msg["receiver"] == "rl-insight-test-team"
    assert msg["alerts"][0]["labels"]["alertname"] == "RLInsightTestNotification"
    time.sleep(2)
    assert inbox.at("/slack/xoxb-secret") == [] and mail.messages == []  # nobody else got it

    gone = httpx.delete(srv.url + "/api/v1/alerting/receivers/chat", headers=H)
    assert gone.status_code == 200 and [r["name"] for r in gone.json()["receivers"]] == ["team", "oncall"]
    assert httpx.delete(srv.url + "/api/v1/alerting/receivers/chat", headers=H).status_code == 404


def test_a_failed_webhook_delivery_logs_no_url(rig, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 64: Alertmanager 0.25 logs a failed webhook's whole URL (its secret path). Webhooks go through the server,
    which posts them on and says only the receiver's name; the failure is retried and counted."""
    srv, inbox, _, am = rig
    dead = f"http://127.0.0.1:{free_port()}/hooks/T000/dead-s3cr3t-path?key=q-s3cr3t"
    assert _add(srv, {"name": "gone", "kind": "webhook", "url": dead}).status_code == 201
    assert _add(srv, {"name": "alive", "kind": "webhook", "url": inbox.url + "/alive-s3cr3t"}).status_code == 201
    for name in ("gone", "alive"):
        assert httpx.post(srv.url + f"/api/v1/alerting/receivers/{name}/test", headers=H).status_code == 200
    wait_until(lambda: inbox.at("/alive-s3cr3t"), timeout=20, what="the working receiver's notification")
    webhooks = alerting_of(srv.app.state.st).webhooks
    wait_until(lambda: webhooks.failures["gone"] >= 1, timeout=20, what="the failed delivery")
    wait_until(lambda: "Notify attempt failed" in am.log.read_text(), timeout=20, what="Alertmanager's retry")
    said = am.log.read_text() + caplog.text
    assert "s3cr3t" not in said and "gone" in caplog.text
    # Alertmanager's relay needs the server's token: nobody else has the server post to a receiver
    assert httpx.post(srv.url + "/api/v1/alerting/deliver/alive", json={}).status_code == 401
    viewer = httpx.post(srv.url + "/api/v1/tokens", json={"name": "v", "role": "viewer"}, headers=H).json()["token"]
    assert httpx.post(srv.url + "/api/v1/alerting/deliver/alive", json={},
                      headers={"Authorization": f"Bearer {viewer}"}).status_code == 403


def test_a_thousand_lane_stall_is_one_notification_then_hung_then_resolved(rig) -> None:
    srv, inbox, mail, _ = rig
    for body in ({"name": "team", "kind": "webhook", "url": inbox.url + "/hook"},
                 {"name": "chat", "kind": "slack", "url": inbox.url + "/slack"},
                 {"name": "oncall", "kind": "email", "to": "oncall@example.com", "sender": "rl@example.com",
                  "smarthost": f"127.0.0.1:{mail.port}", "require_tls": False}):
        assert _add(srv, body).status_code == 201
    run_id, st = _run(srv), srv.app.state.st

    lanes = [{"lane": f"rank_{i}", "state": "train_batch", "open_s": 226.0, "usual_p95_s": 1.2} for i in range(1000)]
    st.conditions.on_insights({("math", "grpo"): {"stalled": lanes}})
    assert _events(st).tick() == 1  # one alert for the run, not one per lane
    # the run page lists what was delivered (issue 64: it showed Prometheus' lane alert, never the run's one)
    shown = httpx.get(f"{srv.url}/api/v1/runs/{run_id}/alerts", headers=H).json()["active"]
    assert [a["alertname"] for a in shown] == ["RLInsightRunStalled"] and shown[0]["summary"].startswith(
        "math/grpo is stalled")
    wait_until(lambda: inbox.at("/hook") and inbox.at("/slack") and mail.messages, timeout=30,
               what="the stall delivered to every receiver")
    st.conditions.mark_hung(("math", "grpo"), "a rank never reached the collective: rank_2; all_reduce #3")
    _events(st).tick()
    time.sleep(3)  # (group_interval 1 s: an extra message would be here by now)
    hook = inbox.at("/hook")
    assert len(hook) == 1 and len(hook[0]["alerts"]) == 1
    alert = hook[0]["alerts"][0]
    assert alert["labels"] == {"alertname": "RLInsightRunStalled", "severity": "critical", "project": "math",
                               "experiment_name": "grpo", "run_id": str(run_id)}
    assert alert["annotations"]["summary"] == ("math/grpo is stalled: 1000 lanes stalled in train_batch, the longest "
                                               "for 226 s (usually 1.2 s at most)")  # nobody named first
    assert alert["annotations"]["url"] == f"http://rl.example:18080/#/run/{run_id}?step=8"
    assert alert["annotations"]["lanes"].endswith("rank_19 and 980 more")
    slack = inbox.at("/slack")[0]
    assert slack["attachments"][0]["title"] == "[FIRING] RLInsightRunStalled: math/grpo"
    assert "1000 lanes stalled in train_batch" in slack["attachments"][0]["text"]
    assert f"#/run/{run_id}?step=8" in slack["attachments"][0]["text"]
    assert mail.messages[0]["Subject"] == "[FIRING] RLInsightRunStalled: math/grpo"

    st.conditions.on_insights({("math", "grpo"): {"stalled": []}})  # it moves again
    assert _events(st).tick() == 1  # the resolve
    wait_until(lambda: len(inbox.at("/hook")) == 2, timeout=30, what="the resolved message")
    resolved = inbox.at("/hook")[1]
    assert resolved["status"] == "resolved" and resolved["alerts"][0]["annotations"]["summary"].startswith(
        "math/grpo is hung: a rank never reached the collective: rank_2")
    assert _events(st).tick() == 0  # nothing holds: nothing posted
    assert httpx.get(srv.url + "/healthz").json()["notifications"]["alerts_posted"] == 3

    # its processes went silent without finish(): lost, told once, with why and the lanes they held
    st.mark_finished("math", "grpo", {"reason": "no server heard from its processes for 30 s", "lanes": ["rank_0"],
                                       "at": time.time()})
    _run(srv, experiment="done")  # a run that finishes cleanly: nobody is told (alert_on_finish is off)
    st.mark_finished("math", "done")
    st.writer.flush(10)
    assert _events(st).tick() == 1
    wait_until(lambda: len(inbox.at("/hook")) == 3, timeout=30, what="the lost run's notification")
    lost = inbox.at("/hook")[2]["alerts"][0]
    assert lost["labels"]["alertname"] == "RLInsightRunLost" and lost["labels"]["run_id"] == str(run_id)
    assert lost["annotations"]["summary"] == ("math/grpo was lost: no server heard from its processes for 30 s")
    assert lost["annotations"]["lanes"] == "rank_0"


def test_a_receiver_added_while_a_stall_fires_gets_one_message(rig) -> None:
    """Issue 64: a receiver added while a stall fired got two messages, the server's run alert and Prometheus' lane
    alert: Alertmanager, reloaded, flushes groups whose wait is long past at once, before its new inhibitor has read
    the server's alert. Prometheus' lane alert (posted here as Prometheus posts it, firing for minutes) never goes
    out through the managed Alertmanager."""
    srv, inbox, _, am = rig
    run_id, st = _run(srv), srv.app.state.st
    st.conditions.on_insights({("math", "grpo"): {"stalled": [
        {"lane": "rank_0", "state": "train_batch", "open_s": 300.0, "usual_p95_s": 1.2}]}})
    assert _events(st).tick() == 1
    now = time.time()
    prometheus_alert = {"labels": {"alertname": "RLInsightLaneStalled", "severity": "critical", "project": "math",
                                   "experiment_name": "grpo"},
                        "annotations": {"summary": "math/grpo: 1 lane(s) stalled in one state far past their usual "
                                                   "time"},
                        "startsAt": rfc3339(now - 240), "endsAt": rfc3339(now + 240),
                        "generatorURL": "http://127.0.0.1:9090/graph"}
    assert httpx.post(am.settings.url + "/api/v2/alerts", json=[prometheus_alert]).status_code == 200
    time.sleep(1.5)  # both held by Alertmanager, nobody to tell yet
    assert _add(srv, {"name": "team", "kind": "webhook", "url": inbox.url + "/hook"}).status_code == 201
    wait_until(lambda: inbox.at("/hook"), timeout=30, what="the stall delivered to the new receiver")
    time.sleep(3)  # (group_interval 1 s: a second message would be here by now)
    told = [a["labels"]["alertname"] for body in inbox.at("/hook") for a in body["alerts"]]
    assert told == ["RLInsightRunStalled"], told
    assert inbox.at("/hook")[0]["alerts"][0]["labels"]["run_id"] == str(run_id)


def test_a_silence_holds_a_run_back_survives_a_killed_alertmanager_and_ends(rig) -> None:
    srv, inbox, _, am = rig
    assert _add(srv, {"name": "team", "kind": "webhook", "url": inbox.url + "/hook"}).status_code == 201
    run_id, other, st = _run(srv), _run(srv, experiment="ppo"), srv.app.state.st
    r = httpx.post(srv.url + "/api/v1/alerting/silences", headers=H, json={
        "run_id": run_id, "duration_s": 7200, "comment": "restarting the rollout nodes", "created_by": "ana@login1"})
    assert r.status_code == 201, r.text
    made = r.json()
    # who set it is the token that sent it, not what the body claims (issue 64); the claim stays in the comment
    assert made["matchers"] == {"project": "math", "experiment_name": "grpo"}
    assert made["created_by"] == "admin (the server's token)" and made["comment"] == \
        "restarting the rollout nodes (sent as ana@login1)"
    listed = httpx.get(srv.url + "/api/v1/alerting/silences", params={"run_id": run_id}, headers=H).json()
    assert [s["comment"] for s in listed["silences"]] == ["restarting the rollout nodes (sent as ana@login1)"]
    assert httpx.get(srv.url + "/api/v1/alerting/silences", params={"run_id": other}, headers=H).json() == {
        "silences": []}
    too_long = httpx.post(srv.url + "/api/v1/alerting/silences", headers=H, json={"run_id": run_id,
                                                                                  "duration_s": 10**9})
    assert too_long.status_code == 422

    # killed before it wrote its state: the server puts the silence back at its next round, before it posts
    am.proc.kill()
    am.proc.wait(10)
    am.start()
    stalled = {"stalled": [{"lane": "rank_0", "state": "train_batch", "open_s": 99.0, "usual_p95_s": 1.0}]}
    st.conditions.on_insights({("math", "grpo"): stalled, ("math", "ppo"): stalled})
    assert _events(st).tick() == 2
    wait_until(lambda: inbox.at("/hook"), timeout=20, what="the other run's notification")
    time.sleep(2)
    got = [a["labels"]["experiment_name"] for m in inbox.at("/hook") for a in m["alerts"]]
    assert got == ["ppo"]  # the silenced run told nobody
    back = httpx.get(srv.url + "/api/v1/alerting/silences", params={"run_id": run_id}, headers=H).json()["silences"]
    assert [(s["comment"], s["created_by"]) for s in back] == [("restarting the rollout nodes (sent as ana@login1)",
                                                                 "admin (the server's token)")]

    # ended: the run's stall is told at once
    assert httpx.delete(srv.url + f"/api/v1/alerting/silences/{back[0]['id']}", headers=H).status_code == 200
    unknown = httpx.delete(srv.url + "/api/v1/alerting/silences/0000aaaa-0000-0000-0000-000000000000", headers=H)
    assert unknown.status_code == 404, unknown.text
    _events(st).tick()
    wait_until(lambda: any(a["labels"]["experiment_name"] == "grpo" for m in inbox.at("/hook") for a in m["alerts"]),
               timeout=20, what="the run's notification once its silence ended")


def _prom(stack: Stack, path: str) -> dict[str, Any]:
    return httpx.get(stack.prometheus_url + path, timeout=10).json()["data"]


def test_a_user_rule_fires_in_prometheus_with_its_text_literal(stack: Stack) -> None:
    """`rl-insight alerts rules add` from the CLI: steps become seconds from the run's own step time, the rule is
    loaded by the managed Prometheus without a restart and fires on the run's data; what to check is the user's text
    as written (no template: another project's series never shows), with $labels / $value filled in (issue 64)."""
    h = {"Authorization": f"Bearer {stack.token}"}
    run = {"project": "math", "experiment_name": "grpo"}
    now = time.time()
    batch = {"v": 1, "client": {"id": "trainer", **run},
             "series": [{"k": "g", "n": "training/global_step", "l": run}, {"k": "g", "n": "reward/mean", "l": run}],
             "samples": [[0, now - 10 + s, s, float(s)] for s in range(1, 11)] + [[1, now, 10, 0.1]]}
    assert httpx.post(stack.ingest_url + "/api/v1/ingest", json=batch, headers=h).status_code == 200
    env = {"RL_INSIGHT_TOKEN": stack.token}
    secret = {"project": "secret-proj", "experiment_name": "secret-exp"}
    other = {"v": 1, "client": {"id": "other", **secret}, "series": [{"k": "g", "n": "reward/mean", "l": secret}],
             "samples": [[0, now, 10, 0.05]]}
    assert httpx.post(stack.ingest_url + "/api/v1/ingest", json=other, headers=h).status_code == 200
    # the user's text is literal (a template would read every project's series): only $labels / $value are filled
    check = '{{ range query "rl_insight_monitor_reward_mean" }}{{ .Labels }}{{ end }} on $labels.project at $value'
    added = cli(stack.home, "alerts", "rules", "add", "RewardLow", "--metric", "reward/mean", "--below", "0.2",
                "--for-steps", "2", "--run", "math/grpo", "--what-to-check", check, env=env)
    assert added.returncode == 0, added.stderr
    assert "reward/mean below 0.2 for 2s (math/grpo) — 2 steps ≈ 2s at 1 s per step" in added.stdout

    def firing() -> bool:
        alerts = [a for a in _prom(stack, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "RewardLow"]
        return bool(alerts) and alerts[0]["state"] == "firing"

    wait_until(firing, timeout=60, what="the user rule firing in Prometheus")
    alert = next(a for a in _prom(stack, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "RewardLow")
    assert alert["labels"] | {"project": "math", "experiment_name": "grpo", "rl_insight_rule": "user"} == \
        alert["labels"]
    assert alert["annotations"]["summary"].startswith("math/grpo: reward/mean below 0.2 for 2s") and \
        alert["annotations"]["summary"].endswith("now 0.1")
    assert alert["annotations"]["what_to_check"] == \
        '{{ range query "rl_insight_monitor_reward_mean" }}{{ .Labels }}{{ end }} on math at 0.1'
    assert "secret" not in json.dumps(alert)
    run_id = next(r["id"] for r in httpx.get(stack.ingest_url + "/api/v1/runs", headers=h).json()["runs"]
                  if r["project"] == "math")
    assert alert["annotations"]["url"].endswith(f"/#/run/{run_id}")  # the notification links to the run (issue 64)
    # an alert's generatorURL: where Prometheus is reached (on loopback, not this host's name)
    flags = httpx.get(stack.prometheus_url + "/api/v1/status/flags", timeout=10).json()["data"]
    assert flags["web.external-url"] == stack.prometheus_url
    # the run finishes: its last value stays on /metrics, but the rule is for live runs (issue 64: it kept firing)
    done = {"v": 1, "client": {"id": "trainer", **run}, "series": [], "samples": [], "final": True}
    assert httpx.post(stack.ingest_url + "/api/v1/ingest", json=done, headers=h).status_code == 200
    wait_until(lambda: not any(a["labels"]["alertname"] == "RewardLow" for a in
                               _prom(stack, "/api/v1/alerts")["alerts"]), timeout=90,
               what="the rule to stop firing on the finished run")

    assert cli(stack.home, "alerts", "rules", "remove", "RewardLow", env=env).returncode == 0
    wait_until(lambda: not any(r.get("name") == "RewardLow" for g in _prom(stack, "/api/v1/rules")["groups"]
                               for r in g["rules"]), timeout=30, what="the rule gone from Prometheus")


def test_the_demos_nan_and_precision_drift_faults_fire_their_rules(stack: Stack) -> None:
    """`demo --fault nan` makes RLInsightNonFiniteMetric fire for that run and metric, and nothing else for it;
    `demo --fault precision-drift` crosses RLInsightPrecisionMismatch's threshold (its expression over a shorter window:
    the rule itself waits 15 minutes), which the other runs do not; `demo --fault kv-pressure` makes
    RLInsightKVCacheSaturated pending (it fires after its 5 minutes) for replica 0 of that run alone."""
    env = {**os.environ, "RL_INSIGHT_HOME": str(stack.home), "RL_INSIGHT_TOKEN": stack.token}
    demos = {fault: subprocess.Popen(
        [sys.executable, "-m", "rl_insight", "demo", "--server-url", stack.ingest_url, "--steps", "0", "--step-seconds",
         "1", "--replicas", "1", "--ranks", "1", "--fault", fault, "--experiment-name", fault, "--project", "faults"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for fault in ("nan", "precision-drift", "kv-pressure")}
    try:
        def alerts() -> list[dict[str, Any]]:
            return [a for a in _prom(stack, "/api/v1/alerts")["alerts"] if a["labels"].get("project") == "faults"]

        wait_until(lambda: any(a["labels"]["alertname"] == "RLInsightNonFiniteMetric" and a["state"] == "firing"
                               for a in alerts()), timeout=90, what="the NaN loss alert")
        fired = {(a["labels"]["alertname"], a["labels"]["experiment_name"], a["labels"].get("metric"))
                 for a in alerts()}
        assert {f for f in fired if f[1] == "nan"} == {("RLInsightNonFiniteMetric", "nan", "actor_pg_loss"),
                                                       ("RLInsightNonFiniteMetric", "nan", "actor_loss")}, fired
        assert {f[0] for f in fired if f[1] == "precision-drift"} <= {"RLInsightPrecisionMismatch"}, fired
        assert {f[0] for f in fired if f[1] == "kv-pressure"} <= {"RLInsightKVCacheSaturated"}, fired
        gap = 'min_over_time(rl_insight_monitor_training_rollout_probs_diff_mean{project="faults"}[5s]) > 0.01'
        wait_until(lambda: _prom(stack, f"/api/v1/query?query={gap}")["result"], timeout=60,
                   what="the probability gap past 0.01")
        assert {r["metric"]["experiment_name"] for r in _prom(stack, f"/api/v1/query?query={gap}")["result"]} == {
            "precision-drift"}

        def saturated() -> list[dict[str, Any]]:  # RLInsightKVCacheSaturated pending (it fires after 5 minutes)
            return [a["labels"] for a in alerts() if a["labels"]["alertname"] == "RLInsightKVCacheSaturated"]

        wait_until(saturated, timeout=60, what="the KV cache saturation alert pending")
        assert [(a["experiment_name"], a["replica"]) for a in saturated()] == [("kv-pressure", "0")]
    finally:
        for p in demos.values():
            p.send_signal(signal.SIGINT)
        outs = {fault: p.communicate(timeout=60)[0] for fault, p in demos.items()}
    assert "fault injected: nan — actor/pg_loss is NaN from step 2 on" in outs["nan"], outs["nan"][-2000:]
    assert "training/rollout_probs_diff_mean climbs past 0.01" in outs["precision-drift"]
    assert "replica_0's KV cache stays above 95%" in outs["kv-pressure"]


def test_a_restarted_server_with_a_receiver_does_not_ask_for_one(tmp_path: Path, stop_home: list) -> None:
    """Issue 64: `server start` said to add a receiver to a server that kept one."""
    from tests.integration.conftest import start_stack

    home = tmp_path / "home"
    stop_home.append(home)
    stack = start_stack(home, alertmanager=True)
    env = {"RL_INSIGHT_TOKEN": stack.token}
    added = cli(home, "alerts", "receivers", "add", "team", "--webhook", "http://127.0.0.1:9/hook", env=env)
    assert added.returncode == 0, added.stderr
    assert cli(home, "server", "stop").returncode == 0
    port = stack.ingest_url.rsplit(":", 1)[1]
    again = cli(home, "server", "start", "--detach", "--host", "127.0.0.1", "--port", port, "--no-prometheus",
                "--token", stack.token, "--alertmanager-port", str(free_port()))
    said = again.stdout + again.stderr
    assert again.returncode == 0, said
    assert "through Alertmanager to 1 receiver" in said and "receivers add" not in said, said


def test_a_firing_alerts_since_survives_a_prometheus_restart(tmp_path: Path) -> None:
    """Issue 64: a user rule's "since" reset when the server (and with it the managed Prometheus) restarted: Prometheus
    restores an alert's activeAt only for rules whose `for` is longer than its grace period. The managed one is started
    so that every rule's is restored (rules without `for`, as most user rules are, included)."""
    from rl_insight.services.prometheus import PrometheusSettings, render_config
    from rl_insight.services.prometheus import command as prometheus_command

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "user_rules.yml").write_text(
        "groups:\n- name: g\n  interval: 1s\n  rules:\n  - alert: RewardCollapse\n    expr: vector(0.1) < 0.2\n")
    settings = PrometheusSettings("127.0.0.1", free_port(), tmp_path / "tsdb", tmp_path / "prometheus.yml",
                                  tmp_path / "targets.json", "127.0.0.1:9", rules_dir=rules)
    settings.config_file.write_text(render_config(settings))
    argv = prometheus_command(find_binary("prometheus", tmp_path / "none").path, settings)

    def firing_since() -> str | None:
        try:
            alerts = httpx.get(settings.url + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None
        return next((a["activeAt"] for a in alerts if a["state"] == "firing"), None)

    seen: list[str] = []
    for _ in range(2):
        with (tmp_path / "prometheus.log").open("ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: firing_since() is not None, timeout=60, what="the rule firing")
            time.sleep(2.5)  # a few evaluations: the state is written to the TSDB
            seen.append(str(firing_since()))
        finally:
            proc.terminate()
            proc.wait(20)
        time.sleep(1.5)  # (the restart is an outage that "since" must span)
    assert seen[0][:19] == seen[1][:19], seen  # the same second (restored values are whole seconds)


def _events(st: Any) -> Any:
    events = alerting_of(st).events
    assert events is not None
    return events
