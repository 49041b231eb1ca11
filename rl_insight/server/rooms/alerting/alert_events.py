"""The server's own events as alerts, posted to Alertmanager (rooms/alerting/): what the server knows that no
Prometheus rule can — a run stalled or hung (with the verdict of its stack snapshot), a run lost, a run finished.

Level-based, every `interval_s`: the alerts that hold now are posted again with an end a few rounds ahead (so a
server that dies lets them lapse on their own), and those that held last round but not now are posted once more,
ended now: Alertmanager then sends the "resolved" message. Each run has at most one alert of each name, its labels
fixed for its life (alertname, severity, project, experiment_name, run_id): annotations say what changed, so a stall
that turns into a hang is still one notification, now naming the culprit (am_config.py groups by alert and run).

* `RLInsightRunStalled`, while the run is stalled or hung (live/run_conditions.py): the stalled lanes, or the
  verdict (culprits, collective, phase);
* `RLInsightRunLost`, for `LOST_FOR_S` after the run was lost, unless it comes back: its processes went silent
  without finish();
* `RLInsightRunFinished` (with `alert_on_finish`), for `FINISHED_FOR_S` after it finished: its last step.

Each round first puts back the silences set through the server that Alertmanager lost (killed before it wrote its
state to disk), so a silenced run stays silent across its restarts.

Invariants: only the server that leads (one alone, or a fleet's lease holder) posts; a failed post is counted and
logged at most once a minute, and the next round posts the whole state again (nothing is lost by a failure);
training never waits on any of it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

from ...live.run_conditions import RunConditions
from ...live.step_clock import StepClock
from ...workers.batch_worker import Periodic
from .alertmanager import Alertmanager, AlertmanagerError, rfc3339

log = logging.getLogger("rl_insight.server.alerts")
LOST_FOR_S = 6 * 3600.0
FINISHED_FOR_S = 600.0
ROUNDS_AHEAD = 4  # an alert not posted again for this many rounds ends on its own
STALL_CHECK = ("The run page's stalled-lanes card shows the verdict of the stack snapshot the server took (or "
               "`rl-insight diagnose --run {run}`): the culprit ranks, the collective and what to check next.")
LOST_CHECK = ("Its processes stopped reporting without finish(): look for an OOM kill, a node failure or a crash in "
              "the last lines of the job's logs; the run page shows the states they held.")

Key = tuple[str, int]  # (alertname, run id)


class AlertEvents:
    def __init__(self, am: Alertmanager, conditions: RunConditions, reader: Any, clock: StepClock, *,
                 public_url: Callable[[], str], live_window_s: float, on_finish: bool = False,
                 verdict_of: Callable[[str, str], Mapping[str, Any] | None] = lambda p, e: None,
                 lead: Callable[[], bool] = lambda: True, restore_silences: Callable[[], int] = lambda: 0,
                 interval_s: float = 10.0) -> None:
        self.am, self.conditions, self.reader, self.clock = am, conditions, reader, clock
        self.public_url, self.live_window_s, self.on_finish = public_url, live_window_s, on_finish
        self.verdict_of, self.lead, self.interval_s = verdict_of, lead, interval_s
        self.restore_silences = restore_silences  # the silences set here that Alertmanager lost, put back first
        self.posted = 0  # alerts handed to Alertmanager (firing or resolved)
        self.failed = 0  # rounds whose post failed
        self._active: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._warned_at = 0.0
        self._loop = Periodic("alert-events", interval_s, self.tick)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def tick(self, now: float | None = None) -> int:
        """One round: post what holds and resolve what stopped holding; how many alerts were posted."""
        if not self.lead():
            return 0
        now = time.time() if now is None else now
        with self._lock:
            try:
                if self.restore_silences():
                    log.warning("Alertmanager had lost silences set through rl-insight; they were put back")
            except AlertmanagerError:
                pass  # (the post below fails too, and says why)
            current = self.current(now)
            ended = [{**a, "endsAt": rfc3339(now)} for key, a in self._active.items() if key not in current]
            batch = list(current.values()) + ended
            if not batch:
                return 0
            try:
                self.am.post_alerts(batch)
            except AlertmanagerError as exc:
                self.failed += 1
                if time.monotonic() - self._warned_at > 60:
                    self._warned_at = time.monotonic()
                    log.warning("alerts could not be posted to Alertmanager (%d round(s) failed so far): %s",
                                self.failed, exc.message)
                return 0  # the ended ones stay in _active: the next round resolves them
            self._active = current
            self.posted += len(batch)
            return len(batch)

    def posted_for(self, run_id: int) -> list[dict[str, Any]]:
        """The alerts this server posted for a run and has not resolved, as a run's alert list shows them (the run
        page lists what was delivered, beside Prometheus' own)."""
        with self._lock:
            mine = [a for (_, rid), a in self._active.items() if rid == run_id]
        return [{"alertname": a["labels"]["alertname"], "state": "firing", "severity": a["labels"].get("severity", ""),
                 "labels": dict(a["labels"]), "since": a["startsAt"], "value": None,
                 "summary": a["annotations"].get("summary", ""), "description": "delivered by this server to "
                 "Alertmanager", "what_to_check": a["annotations"].get("what_to_check", "")} for a in mine]

    # ------------------------------------------------------------------ what holds now
    def current(self, now: float) -> dict[Key, dict[str, Any]]:
        out: dict[Key, dict[str, Any]] = {}
        for run in self.conditions.all():
            stall = self.conditions.stall(run)
            run_id = self.reader.runs.find_id(*run)
            if stall is None or run_id is None:
                continue
            out[("RLInsightRunStalled", run_id)] = self._stalled(run, run_id, stall, now)
        for r in self.reader.runs.of_project(self.live_window_s, seen_since=now - LOST_FOR_S):  # (the recent ones only)
            ended_at = float((r.get("lost") or {}).get("at") or r["last_seen"])
            if r["status"] == "lost" and now - ended_at < LOST_FOR_S:
                out[("RLInsightRunLost", r["id"])] = self._alert(
                    "RLInsightRunLost", "critical", r, r["last_step"], ended_at, now,
                    summary=f"{r['project']}/{r['experiment_name']} was lost: "
                            f"{(r.get('lost') or {}).get('reason') or 'its processes stopped reporting'}",
                    what_to_check=LOST_CHECK, lanes=", ".join((r.get("lost") or {}).get("lanes") or [])[:500])
            elif self.on_finish and r["status"] == "finished" and now - float(r["last_seen"]) < FINISHED_FOR_S:
                out[("RLInsightRunFinished", r["id"])] = self._alert(
                    "RLInsightRunFinished", "info", r, r["last_step"], float(r["last_seen"]), now,
                    summary=f"{r['project']}/{r['experiment_name']} finished at step {r['last_step']}",
                    what_to_check="Nothing: the run ended with finish().")
        return out

    def _stalled(self, run: tuple[str, str], run_id: int, stall: Any, now: float) -> dict[str, Any]:
        clock = self.clock.current(*run)
        step = clock[0] + 1 if clock is not None else None  # the step running (the clock reads the last that ended)
        extra: dict[str, str] = {"lanes": ", ".join(stall.lanes[:20]) + (
            f" and {len(stall.lanes) - 20} more" if len(stall.lanes) > 20 else "")}
        summary = f"{run[0]}/{run[1]} is stalled: {stall.reason}"
        if stall.hung:
            summary = f"{run[0]}/{run[1]} is hung: {stall.hung.removeprefix('hung: ')}"  # (the verdict's words)
            verdict = self.verdict_of(*run) or {}
            if verdict.get("culprits"):
                extra["culprits"] = ", ".join(verdict["culprits"][:20])
            coll = verdict.get("collective") or {}
            if coll.get("op"):
                extra["collective"] = f"{coll['op']} #{coll.get('seq')}" if coll.get("seq") is not None else coll["op"]
            if verdict.get("phase"):
                extra["phase"] = str(verdict["phase"])
            if verdict.get("step") is not None and step is None:
                step = verdict["step"]
        row = {"id": run_id, "project": run[0], "experiment_name": run[1]}
        return self._alert("RLInsightRunStalled", "critical", row, step, stall.since, now, summary=summary,
                           what_to_check=STALL_CHECK.format(run=f"{run[0]}/{run[1]}"), **extra)

    def _alert(self, name: str, severity: str, run: Mapping[str, Any], step: Any, since: float, now: float,
               summary: str, what_to_check: str, **annotations: str) -> dict[str, Any]:
        url = f"{self.public_url().rstrip('/')}/#/run/{run['id']}" + (f"?step={int(step)}" if step is not None else "")
        return {
            "labels": {"alertname": name, "severity": severity, "project": run["project"],
                       "experiment_name": run["experiment_name"], "run_id": str(run["id"])},
            "annotations": {"summary": summary[:1000], "what_to_check": what_to_check, "url": url,
                            **({"step": str(int(step))} if step is not None else {}),
                            **{k: v for k, v in annotations.items() if v}},
            "startsAt": rfc3339(since), "endsAt": rfc3339(now + ROUNDS_AHEAD * self.interval_s), "generatorURL": url}
