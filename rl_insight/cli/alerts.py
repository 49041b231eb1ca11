"""`rl-insight alerts`: where notifications go (server/rooms/alerting/), through the running server's API.

    rl-insight alerts status
    rl-insight alerts receivers add team --webhook https://ci.example.com/hooks/rl
    rl-insight alerts receivers add chat --slack-url-file ~/.slack-hook --project math-rl
    rl-insight alerts receivers add oncall --email oncall@example.com --smtp smtp.example.com:587 \\
        --from rl-insight@example.com --smtp-user bot --smtp-password-file ~/.smtp-pass
    rl-insight alerts receivers list | remove NAME | test NAME
    rl-insight alerts silence math-rl/grpo-7b --for 2h --comment "restarting the rollout nodes"
    rl-insight alerts silences [--run RUN]  |  rl-insight alerts unsilence ID
    rl-insight alerts rules add RewardCollapse --metric reward/mean --below 0.2 --for-steps 10 --run math-rl/grpo-7b
    rl-insight alerts rules add LossJump --metric actor/pg_loss --change 3 --window-steps 50 --project math-rl
    rl-insight alerts rules list | remove NAME

Secrets (a webhook URL whose path is its key, an SMTP password) can come from a file or the environment instead of
the command line, which every user of the host sees in `ps`.
"""

from __future__ import annotations

import inspect
import keyword
import os
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import InvalidInputError
from .call_stacks import resolve_run
from .options import HomeOpt, ServerUrlOpt, TokenOpt, echo_table
from .reach import require_server

alerts_app = typer.Typer(help="Notifications: where alerts are delivered (Alertmanager receivers).",
                         no_args_is_help=True)
receivers_app = typer.Typer(help="Receivers: a webhook, a Slack incoming webhook, or email.", no_args_is_help=True)
rules_app = typer.Typer(help="Alert rules on any trainer metric, evaluated by the managed Prometheus.",
                        no_args_is_help=True)
alerts_app.add_typer(receivers_app, name="receivers")
alerts_app.add_typer(rules_app, name="rules")


def _secret(value: Optional[str], file: Optional[Path], what: str) -> Optional[str]:
    if value is not None and file is not None:
        raise InvalidInputError(f"give {what} or {what}-file, not both")
    if file is None:
        return value
    try:
        return Path(file).expanduser().read_text().strip()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {file}: {exc.strerror}") from None


@alerts_app.command("status")
def status(server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
           home: Optional[Path] = HomeOpt) -> int:
    """Whether notifications are delivered, through which Alertmanager, to how many receivers."""
    answer = require_server(home, server_url, token, None).request("GET", "/api/v1/alerting")
    typer.echo(f"Notifications {answer['message']}")
    return 0 if answer["enabled"] else 1


def _flag_param(flag: str) -> str:
    name = flag.lstrip("-").replace("-", "_")
    return name + "_" if keyword.iskeyword(name) else name  # (--from)


def _add_parameters() -> list[inspect.Parameter]:
    """`receivers add`'s options, made from the receiver kinds (server/rooms/alerting/kinds/): each field's flag,
    a secret's `-file` twin, a bool given as its negation."""
    def option(name: str, default: Any, kind: Any, *flags: str, **kw: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                 default=typer.Option(default, *flags, **kw))

    params = [inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                                default=typer.Argument(..., help="The receiver's name (letters, digits, . _ -)."))]
    for f in kind_fields_by_flag().values():
        assert f.flag is not None
        if f.boolean:
            params.append(option(_flag_param(f.flag), False, bool, f.flag, help=f.cli_help))
            continue
        secret_help = f" (or ${f.env})" if f.env else ""
        if f.from_file and f.env:  # a secret taken from a file or the environment only, never the command line
            params.append(option(_flag_param(f.flag) + "_file", None, Optional[Path], f.flag + "-file",
                                 help=f"{f.cli_help}, read from a file{secret_help}."))
            continue
        params.append(option(_flag_param(f.flag), None, Optional[str], f.flag, metavar=f.metavar, help=f.cli_help))
        if f.from_file:
            params.append(option(_flag_param(f.flag) + "_file", None, Optional[Path], f.flag + "-file",
                                 help=f"{f.flag}'s value, read from a file."))
    params += [option("project", None, Optional[str], "--project", help="Only this project's alerts (default: all)."),
               option("replace", False, bool, "--replace", help="Replace a receiver of the same name."),
               inspect.Parameter("server_url", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
                                 default=ServerUrlOpt),
               inspect.Parameter("token", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str], default=TokenOpt),
               inspect.Parameter("home", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[Path], default=HomeOpt)]
    return params


def kind_fields_by_flag() -> dict[str, Any]:
    """Every kind's fields that have a command-line flag, by flag (in the kinds' order)."""
    from ..server.rooms.alerting.kinds import KINDS

    return {f.flag: f for kind in KINDS.values() for f in kind.fields if f.flag}


def _field_value(f: Any, given: dict[str, Any]) -> Any:
    param = _flag_param(f.flag)
    if f.boolean:
        return not given[param] if f.negated else given[param]
    value = given.get(param)
    file = given.get(param + "_file")
    found = _secret(value, file, f.flag) if f.from_file else value
    return found if found is not None or not f.env else os.environ.get(f.env)


def add(**given: Any) -> int:
    """Add a receiver: checked by Alertmanager and loaded at once, or refused with its reason (nothing changed)."""
    from ..server.rooms.alerting.kinds import KINDS

    def selects(kind: Any) -> bool:  # the kind's first flagged field was given
        first = next(f for f in kind.fields if f.flag)
        param = _flag_param(first.flag)
        return given.get(param) is not None or given.get(param + "_file") is not None

    chosen = [k for k in KINDS.values() if selects(k)]
    if len(chosen) != 1:
        flags = [str(next(f for f in k.fields if f.flag).flag) for k in KINDS.values()]
        raise InvalidInputError(f"give exactly one of {', '.join(flags[:-1])} or {flags[-1]}")
    kind = chosen[0]
    body: dict[str, Any] = {"name": given["name"], "kind": kind.name, "project": given["project"]}
    for f in kind.fields:
        body[f.key] = _field_value(f, given) if f.flag else None
    server = require_server(given["home"], given["server_url"], given["token"], None)
    answer = server.request("POST", "/api/v1/alerting/receivers", params={"replace": str(given["replace"]).lower()},
                            json=body)
    typer.echo(f"receiver {given['name']!r} added: {answer['message']}")
    return 0


add.__signature__ = inspect.Signature(_add_parameters(), return_annotation=int)  # type: ignore[attr-defined]
receivers_app.command("add")(add)


@receivers_app.command("list")
def list_(server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
          home: Optional[Path] = HomeOpt) -> int:
    """The receivers (their secrets are never shown)."""
    server = require_server(home, server_url, token, None)
    rows = server.request("GET", "/api/v1/alerting/receivers")["receivers"]
    if not rows:
        typer.echo("no receivers: add one with `rl-insight alerts receivers add NAME --webhook URL` (docs/alerts.md)")
        return 0
    echo_table([[r["name"], r["kind"], r["project"] or "(all)", r["target"]] for r in rows],
               ["NAME", "KIND", "PROJECT", "DELIVERS TO"])
    return 0


@receivers_app.command("remove")
def remove(name: str = typer.Argument(..., help="The receiver's name."), server_url: Optional[str] = ServerUrlOpt,
           token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Remove a receiver (Alertmanager reloaded at once)."""
    answer = require_server(home, server_url, token, None).request("DELETE", f"/api/v1/alerting/receivers/{name}")
    typer.echo(f"receiver {name!r} removed: {answer['message']}")
    return 0


@receivers_app.command("test")
def test(name: str = typer.Argument(..., help="The receiver's name."), server_url: Optional[str] = ServerUrlOpt,
         token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Send a test notification to this receiver alone."""
    answer = require_server(home, server_url, token, None).request("POST",
                                                                   f"/api/v1/alerting/receivers/{name}/test")
    typer.echo(answer["message"])
    return 0


DURATION_UNITS = {"m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """'90m', '2h', '1d' in seconds."""
    unit = DURATION_UNITS.get(text[-1:])
    if unit is None or not text[:-1].isdigit():
        raise InvalidInputError(f"{text!r} is not a duration like 30m, 2h or 1d")
    return int(text[:-1]) * unit


@alerts_app.command("silence")
def silence(
    run: str = typer.Argument(..., help="The run: PROJECT/EXPERIMENT or its run id."),
    for_: str = typer.Option("2h", "--for", help="How long: 30m, 2h, 1d (at most 30d)."),
    alert: Optional[str] = typer.Option(None, "--alert", help="Only this alert (e.g. RLInsightRunStalled)."),
    whole_project: bool = typer.Option(False, "--whole-project", help="Every run of the run's project."),
    comment: str = typer.Option("", "--comment", help="Why (shown with the silence)."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Hold back a run's notifications for a while (Alertmanager keeps the silence across restarts)."""
    import getpass
    import socket

    server = require_server(home, server_url, token, None)
    body = {"run_id": resolve_run(server, run), "duration_s": parse_duration(for_), "alertname": alert,
            "whole_project": whole_project, "comment": comment,
            "created_by": f"{getpass.getuser()}@{socket.gethostname()}"}
    s = server.request("POST", "/api/v1/alerting/silences", json=body)
    what = ", ".join(f"{k}={v}" for k, v in s["matchers"].items())
    typer.echo(f"silenced {what} until {s['ends_at']} (id {s['id']}; end it with `rl-insight alerts unsilence "
               f"{s['id']}`)")
    return 0


@alerts_app.command("silences")
def silences(run: Optional[str] = typer.Option(None, "--run", help="Only this run's."),
             server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
             home: Optional[Path] = HomeOpt) -> int:
    """Active and pending silences: what they match, who set them, why, until when."""
    server = require_server(home, server_url, token, None)
    params = {"run_id": resolve_run(server, run)} if run else {}
    rows = server.request("GET", "/api/v1/alerting/silences", params=params)["silences"]
    if not rows:
        typer.echo("no silences")
        return 0
    echo_table([[s["id"], ", ".join(f"{k}={v}" for k, v in s["matchers"].items()), s["created_by"], s["ends_at"],
                 s["comment"]] for s in rows], ["ID", "MATCHES", "BY", "UNTIL", "COMMENT"])
    return 0


@alerts_app.command("unsilence")
def unsilence(silence_id: str = typer.Argument(..., help="The silence's id (`rl-insight alerts silences`)."),
              server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
              home: Optional[Path] = HomeOpt) -> int:
    """End a silence now."""
    answer = require_server(home, server_url, token, None).request("DELETE", f"/api/v1/alerting/silences/{silence_id}")
    typer.echo(answer["message"])
    return 0


def _seconds(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    if text.endswith("s") and text[:-1].isdigit():
        return float(text[:-1])
    return parse_duration(text)


@rules_app.command("add")
def add_rule(
    name: str = typer.Argument(..., help="The rule's name: its alert name (letters, digits, _)."),
    metric: str = typer.Option(..., "--metric", help="The trainer metric as logged, e.g. reward/mean."),
    below: Optional[float] = typer.Option(None, "--below", help="Fire while the metric is below this."),
    above: Optional[float] = typer.Option(None, "--above", help="Fire while the metric is above this."),
    for_steps: Optional[float] = typer.Option(None, "--for-steps", help="…for this many steps (timed from the run's "
                                                                        "median step)."),
    for_: Optional[str] = typer.Option(None, "--for", help="…for this long instead (90s, 10m, 1h)."),
    change: Optional[float] = typer.Option(None, "--change", metavar="SIGMA",
                                           help="Fire when the metric is more than SIGMA standard deviations from its "
                                                "mean over the window."),
    window_steps: Optional[float] = typer.Option(None, "--window-steps", help="The window in steps (default 50)."),
    window: Optional[str] = typer.Option(None, "--window", help="The window as a duration instead (30m, 2h)."),
    run: Optional[str] = typer.Option(None, "--run", help="Only this run (PROJECT/EXPERIMENT or its id)."),
    project: Optional[str] = typer.Option(None, "--project", help="Every run of this project."),
    severity: str = typer.Option("warning", "--severity", help="info, warning or critical."),
    what_to_check: str = typer.Option("", "--what-to-check", help="Shown with the alert as written "
                                       "($value, $labels.<name> filled in)."),
    replace: bool = typer.Option(False, "--replace", help="Replace a rule of the same name."),
    server_url: Optional[str] = ServerUrlOpt,
    token: Optional[str] = TokenOpt,
    home: Optional[Path] = HomeOpt,
) -> int:
    """Add an alert rule on a trainer metric: a threshold (--below/--above) or a change (--change SIGMA)."""
    kinds = [k for k, given in (("below", below), ("above", above), ("change", change)) if given is not None]
    if len(kinds) != 1:
        raise InvalidInputError("give exactly one of --below, --above or --change")
    if run and project:
        raise InvalidInputError("give --run or --project, not both")
    server = require_server(home, server_url, token, None)
    body: dict[str, Any] = {"name": name, "metric": metric, "severity": severity, "what_to_check": what_to_check,
                            "project": project}
    if run:
        body["run_id"] = resolve_run(server, run)
    if kinds[0] == "change":
        body.update({"kind": "change", "sigma": change, "window_steps": window_steps, "window_s": _seconds(window)})
    else:
        body.update({"kind": "threshold", "op": kinds[0], "value": below if below is not None else above,
                     "for_steps": for_steps, "for_s": _seconds(for_)})
    made = server.request("POST", "/api/v1/alerting/rules", params={"replace": str(replace).lower()},
                          json={k: v for k, v in body.items() if v is not None})
    typer.echo(f"rule {name!r} added: {made['description']}")
    return 0


@rules_app.command("list")
def list_rules(server_url: Optional[str] = ServerUrlOpt, token: Optional[str] = TokenOpt,
               home: Optional[Path] = HomeOpt) -> int:
    """The user rules, in words."""
    rows = require_server(home, server_url, token, None).request("GET", "/api/v1/alerting/rules")["rules"]
    if not rows:
        typer.echo("no user rules: add one with `rl-insight alerts rules add NAME --metric M --below X` "
                   "(docs/alerts.md)")
        return 0
    echo_table([[r["name"], r["severity"], r["description"]] for r in rows], ["NAME", "SEVERITY", "RULE"])
    return 0


@rules_app.command("remove")
def remove_rule(name: str = typer.Argument(..., help="The rule's name."), server_url: Optional[str] = ServerUrlOpt,
                token: Optional[str] = TokenOpt, home: Optional[Path] = HomeOpt) -> int:
    """Remove a user rule."""
    typer.echo(require_server(home, server_url, token, None).request("DELETE",
                                                                     f"/api/v1/alerting/rules/{name}")["message"])
    return 0
