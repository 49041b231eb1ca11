"""Alert rules users add on any trainer metric, evaluated by the managed Prometheus and delivered like the shipped
ones (docs/alerts.md):

* a **threshold**: the metric below (or above) a value for a while — `reward/mean below 0.2 for 10 steps`;
* a **change**: the metric more than k standard deviations from its mean over a window — `3σ over 50 steps`.

Prometheus counts time, not steps: a number of steps becomes a duration from the run's own median step time when the
rule is added, and the rule says so (`steps_note`). A rule is for one run (its project and experiment_name), one
project, or every run.

Kept in `<data_dir>/alerting/rules.json` and written as the Prometheus rule file `<data_dir>/alerting/user_rules.yml`
(which `server start` adds to Prometheus' `rule_files`). A change is checked with `promtool check rules` before the
file is replaced, so a rule that does not compile is refused with promtool's message and the loaded rules are never
broken; the supervisor reloads Prometheus (SIGHUP) when the file changes.

Invariants: one writer (this module, under its lock); the rule file is always one that promtool accepted (or, without
promtool, one Prometheus would keep its previous rules over).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Literal, Optional, cast

import yaml
from typing_extensions import NotRequired, TypedDict

from ...errors import ConflictError, InvalidInputError, NotFoundError
from ...fsutil import atomic_write
from ...semantics.names import exposed_name

RULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_RULES = 200
MIN_FOR_S, MAX_WINDOW_S = 0.0, 30 * 86400.0
GROUP = "rl_insight_user_rules"


class UserRule(TypedDict):
    """One user rule as stored."""

    name: str  # its alert name
    metric: str  # the trainer metric as logged (`reward/mean`)
    kind: Literal["threshold", "change"]
    op: Literal["below", "above"]  # threshold
    value: float  # threshold
    sigma: float  # change: how many standard deviations
    for_s: float  # threshold: how long it holds before it fires
    window_s: float  # change: the window of the mean and deviation
    project: Optional[str]  # scope: None for every project
    experiment_name: Optional[str]  # scope: None for every run of the project
    severity: Literal["info", "warning", "critical"]
    what_to_check: str
    steps_note: str  # how steps became seconds, when they did
    url: NotRequired[str]  # the run page (a rule for one run) or the project's runs: the notification's link


def rule_files(data_dir: Path) -> tuple[Path, Path]:
    """(rules.json, user_rules.yml) of a data directory: the server and `server start` agree on them."""
    d = Path(data_dir).expanduser() / "alerting"
    return d / "rules.json", d / "user_rules.yml"


def _selector(r: UserRule) -> str:
    # a PromQL string as it is written: `ensure_ascii` would write a character outside the BMP as a UTF-16 surrogate
    # pair (`\ud83d\ude80`), which PromQL refuses (json.dumps still escapes quotes, backslashes and control characters)
    parts = [f"{label}={json.dumps(value, ensure_ascii=False)}" for label, value in (("project", r["project"]),
                                                                ("experiment_name", r["experiment_name"])) if value]
    return "{" + ", ".join(parts) + "}"


def _duration(seconds: float) -> str:
    return f"{max(0, int(round(seconds)))}s"


# one series per live run, from the server's insight rounds (live/insights/rounds.py): a rule fires on a live run
# only — a finished run's last value stays on /metrics, and kept its rules firing (issue 64)
LIVE_RUNS = "rl_insight_insight_stalled_lanes"


def expression(r: UserRule) -> str:
    m = exposed_name(r["metric"]) + _selector(r)
    if r["kind"] == "threshold":
        test = f"{m} {'<' if r['op'] == 'below' else '>'} {r['value']!r}"
    else:
        w = _duration(r["window_s"])
        test = f"abs({m} - avg_over_time({m}[{w}])) > {r['sigma']!r} * stddev_over_time({m}[{w}])"
    return f"({test}) and on(project, experiment_name) {LIVE_RUNS}{_selector(r)}"


def describe(r: UserRule) -> str:
    """The rule in words, as it fires."""
    scope = (f"{r['project']}/{r['experiment_name']}" if r["experiment_name"] else
             f"every run of {r['project']}" if r["project"] else "every run")
    if r["kind"] == "threshold":
        what = f"{r['metric']} {r['op']} {r['value']:g}" + (f" for {_duration(r['for_s'])}" if r["for_s"] else "")
    else:
        what = f"{r['metric']} more than {r['sigma']:g}σ from its mean over {_duration(r['window_s'])}"
    return f"{what} ({scope}){' — ' + r['steps_note'] if r['steps_note'] else ''}"


def _literal(text: str) -> str:
    """Text shown as it is inside a Prometheus annotation (a Go template): a metric or run name holding `{{` is not
    run as a template."""
    return text.replace("{{", "{{ `{{` }}")


_REFERENCE = re.compile(r"\$(value\b|labels\.[A-Za-z_][A-Za-z0-9_]*)")


def user_text(text: str) -> str:
    """What a user wrote for a rule (what_to_check), as an annotation: literal, but for `$value` and `$labels.<name>`
    (the firing series' own value and labels). Never a template of the user's: a `{{ query … }}` would run any PromQL
    every evaluation and show every project's data to this rule's readers (issue 64); the rule's expression, built
    here with the run's matchers, stays its only PromQL."""
    return _REFERENCE.sub(lambda m: "{{ $" + m[1] + " }}", _literal(text))


def render(rules: list[UserRule]) -> str:
    group: dict[str, Any] = {"name": GROUP, "rules": []}
    for r in rules:
        rule: dict[str, Any] = {
            "alert": r["name"], "expr": expression(r),
            "labels": {"severity": r["severity"], "rl_insight_rule": "user"},
            "annotations": {
                "summary": f"{{{{ $labels.project }}}}/{{{{ $labels.experiment_name }}}}: "
                           f"{_literal(describe(r))}; now {{{{ $value | printf \"%.4g\" }}}}",
                "what_to_check": user_text(r["what_to_check"]) or "The run page's charts around the step it began "
                                                                               "in.",
                **({"url": _literal(r["url"])} if r.get("url") else {})}}
        if r["kind"] == "threshold" and r["for_s"]:
            rule["for"] = _duration(r["for_s"])
        group["rules"].append(rule)
    header = ("# Written by rl-insight from <data_dir>/alerting/rules.json (`rl-insight alerts rules`); checked with "
              "promtool before it replaces the last one.\n")
    return header + yaml.safe_dump({"groups": [group] if rules else []}, sort_keys=False, width=1000)


def _number(body: dict[str, Any], key: str, lo: float, hi: float) -> float:
    v = body.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= float(v) <= hi:
        raise InvalidInputError(f"{key} must be a number from {lo:g} to {hi:g}, found {str(v)[:40]!r}")
    return float(v)


def validate(body: Any, step_s: Optional[float]) -> UserRule:
    """A rule from what a user sent. `for_steps` / `window_steps` become seconds with `step_s` (the run's median step
    time; None when it has no steps yet: then seconds must be given)."""
    if not isinstance(body, dict):
        raise InvalidInputError("a rule must be a JSON object")
    rule = _common(body)
    steps = _Steps(body, step_s)
    KINDS[rule["kind"]](body, rule, steps)
    rule["steps_note"] = steps.note
    return rule


def _common(body: dict[str, Any]) -> UserRule:
    """What every rule has — its name, metric, kind, severity, scope and what to check — with its kind's fields at
    their neutral values."""
    name = body.get("name")
    if not isinstance(name, str) or not RULE_NAME.match(name):
        raise InvalidInputError(f"rule name {str(name)[:80]!r} must be a Prometheus alert name: a letter or _, then "
                                "letters, digits or _ (at most 64)")
    if name.startswith("RLInsight"):
        raise InvalidInputError(f"rule name {name!r}: names starting with RLInsight are the shipped alerts' (the "
                                "notification routes and inhibitions match them)")
    metric = body.get("metric")
    if not isinstance(metric, str) or not 0 < len(metric) <= 256:
        raise InvalidInputError("a rule needs the metric it watches (as logged, e.g. reward/mean)")
    kind = body.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise InvalidInputError("kind must be threshold (below/above a value) or change (k σ from the mean)")
    severity = body.get("severity") or "warning"
    if severity not in ("info", "warning", "critical"):
        raise InvalidInputError("severity must be info, warning or critical")
    scope = _scope(body)
    check = body.get("what_to_check") or ""
    if not isinstance(check, str) or len(check) > 1000:
        raise InvalidInputError("what_to_check must be text of at most 1000 characters")
    for k, v in (("metric", metric), ("what_to_check", check), *scope.items()):
        if isinstance(v, str) and not _encodable(v):
            raise InvalidInputError(f"{k} holds a character that is not Unicode text (a lone surrogate)")
    return {"name": name, "metric": metric, "kind": cast(Literal["threshold", "change"], kind), "op": "below",
            "value": 0.0, "sigma": 0.0, "for_s": 0.0, "window_s": 0.0, "project": scope["project"],
            "experiment_name": scope["experiment_name"],
            "severity": cast(Literal["info", "warning", "critical"], severity), "what_to_check": check,
            "steps_note": ""}


def _scope(body: dict[str, Any]) -> dict[str, Optional[str]]:
    scope = {k: body.get(k) for k in ("project", "experiment_name")}
    for k, v in scope.items():
        if v is not None and (not isinstance(v, str) or not 0 < len(v) <= 256):
            raise InvalidInputError(f"{k} must be a non-empty string of at most 256 characters")
    if scope["experiment_name"] and not scope["project"]:
        raise InvalidInputError("a rule for one run needs its project too")
    return scope


class _Steps:
    """Durations given in seconds or in steps; steps become seconds at the run's step time, and the rule says how
    (`note`)."""

    def __init__(self, body: dict[str, Any], step_s: Optional[float]) -> None:
        self.body, self.step_s, self.note = body, step_s, ""

    def given(self, steps_key: str, seconds_key: str) -> bool:
        return self.body.get(steps_key) is not None or self.body.get(seconds_key) is not None

    def seconds(self, steps_key: str, seconds_key: str, default_steps: float) -> float:
        if self.body.get(seconds_key) is not None:
            return _number(self.body, seconds_key, MIN_FOR_S, MAX_WINDOW_S)
        steps = _number(self.body, steps_key, 1, 100_000) if self.body.get(steps_key) is not None else default_steps
        if self.step_s is None:
            raise InvalidInputError(f"{steps_key} needs a run with steps to measure a step's time; give "
                                    f"{seconds_key} instead")
        self.note = f"{steps:g} steps ≈ {_duration(steps * self.step_s)} at {self.step_s:.3g} s per step"
        return min(MAX_WINDOW_S, steps * self.step_s)


def _threshold(body: dict[str, Any], rule: UserRule, steps: _Steps) -> None:
    """Below (or above) a value, for a while."""
    op = body.get("op")
    if op not in ("below", "above"):
        raise InvalidInputError("a threshold rule needs op: below or above")
    rule["op"] = op
    rule["value"] = _number(body, "value", -1.7976931348623157e308, 1.7976931348623157e308)
    rule["for_s"] = steps.seconds("for_steps", "for_s", 1) if steps.given("for_steps", "for_s") else 0.0


def _change(body: dict[str, Any], rule: UserRule, steps: _Steps) -> None:
    """More than k standard deviations from the mean over a window (at least a minute)."""
    rule["sigma"] = _number(body, "sigma", 0.1, 100)
    rule["window_s"] = max(60.0, steps.seconds("window_steps", "window_s", 50))


KINDS: dict[str, Callable[[dict[str, Any], UserRule, _Steps], None]] = {"threshold": _threshold, "change": _change}


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class UserRules:
    def __init__(self, data_dir: Path, promtool: str | None = None, enabled: bool = True) -> None:
        self.store_path, self.rule_path = rule_files(data_dir)
        self.promtool = promtool or shutil.which("promtool")
        self.enabled = enabled  # a managed Prometheus evaluates them
        self._lock = threading.Lock()

    def rules(self) -> list[UserRule]:
        try:
            doc = json.loads(self.store_path.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"{self.store_path} is not a rules file: {exc}") from None
        return list(doc.get("rules", [])) if isinstance(doc, dict) else []

    def add(self, body: Any, step_s: Optional[float], replace: bool = False, url: str | None = None) -> UserRule:
        """`url`: where its notification links to (the route's: the run page, or the project's runs)."""
        if not self.enabled:
            raise ConflictError("no managed Prometheus evaluates rules on this server",
                                hint="start the stack with Prometheus (`rl-insight server start`)")
        rule = validate(body, step_s)
        if url:
            rule["url"] = url
        with self._lock:
            current = self.rules()
            if any(r["name"] == rule["name"] for r in current) and not replace:
                raise ConflictError(f"a rule named {rule['name']!r} exists", hint="remove it first, or replace it")
            if len(current) >= MAX_RULES:
                raise InvalidInputError(f"at most {MAX_RULES} rules")
            self._write([r for r in current if r["name"] != rule["name"]] + [rule])
        return rule

    def remove(self, name: str) -> None:
        with self._lock:
            current = self.rules()
            if not any(r["name"] == name for r in current):
                raise NotFoundError(f"no rule named {name[:80]!r}")
            self._write([r for r in current if r["name"] != name])

    def _write(self, rules: list[UserRule]) -> None:
        text = render(rules)
        if self.promtool:
            with tempfile.TemporaryDirectory(prefix="rl-insight-rules-") as tmp:
                path = Path(tmp) / "user_rules.yml"
                path.write_text(text)
                out = subprocess.run([self.promtool, "check", "rules", str(path)], capture_output=True, text=True,
                                     timeout=30)
            if out.returncode != 0:
                said = (out.stdout + out.stderr).replace(str(path), "user_rules.yml").strip()
                raise InvalidInputError(f"promtool refused the rule: {said[:800]}",
                                        hint="nothing was changed; the loaded rules are kept")
        atomic_write(self.rule_path, text, mode=0o644)
        atomic_write(self.store_path, json.dumps({"rules": rules}, indent=1), mode=0o600)


def write_rule_file(data_dir: Path) -> Path:
    """(`server start`) the rule file from the stored rules, so Prometheus finds one (possibly empty) at start."""
    store_path, rule_path = rule_files(data_dir)
    try:
        rules = json.loads(store_path.read_text()).get("rules", [])
    except (OSError, ValueError):
        rules = []
    atomic_write(rule_path, render(rules), mode=0o644)
    return rule_path
