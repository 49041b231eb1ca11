"""Notifications over HTTP (outbound/alerting/): whether they are on, and the receivers they go to.

    GET    /api/v1/alerting                          on or off, the Alertmanager, how many receivers, in words
    GET    /api/v1/alerting/receivers                the receivers, without their secrets
    POST   /api/v1/alerting/receivers[?replace=true] add one (checked by Alertmanager, reloaded; refused whole)
    DELETE /api/v1/alerting/receivers/{name}         remove one
    POST   /api/v1/alerting/receivers/{name}/test    a test notification to that receiver alone
    GET    /api/v1/alerting/rules                    the user rules (prometheus/user_rules.py)
    POST   /api/v1/alerting/rules[?replace=true]     add one (checked by promtool; refused whole)
    DELETE /api/v1/alerting/rules/{name}             remove one
    GET    /api/v1/alerting/silences[?run_id=N]      active and pending silences (of one run)
    POST   /api/v1/alerting/silences                 silence a run (or its whole project, or one alert of it)
    DELETE /api/v1/alerting/silences/{id}            end a silence now

Changes need the token (or the UI's session); a webhook URL or SMTP password sent here is never answered back.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from fastapi import APIRouter, Depends, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ...errors import ConflictError
from ...protocol import INT64_MAX
from ..outbound.alerting.notifications import MAX_SILENCE_S, ChangeResult, NotificationStatus, Silence
from ..outbound.alerting.receivers import ShownReceiver
from ..prometheus.user_rules import UserRule, describe
from ..state import AppState
from .models import error_responses, typed_answer

# a run id in a JSON body: at most 2**53 - 1, the largest integer every JSON reader keeps exact (a body's number past
# it may arrive as a float that rounds up past int64); run ids are far below it
JSON_SAFE_INT = 2**53 - 1

class ReceiverCreate(BaseModel):
    """A receiver (outbound/alerting/receivers.py checks what OpenAPI cannot: the fields a kind needs, URL and address
    forms)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    kind: Literal["webhook", "slack", "email"]
    project: Optional[str] = Field(None, max_length=2048, description="only this project's alerts")
    url: Optional[str] = Field(None, max_length=2048, description="webhook, slack: where to post (a secret)")
    channel: Optional[str] = Field(None, max_length=2048, description="slack: another channel")
    to: Optional[str] = Field(None, max_length=2048, description="email: to")
    sender: Optional[str] = Field(None, max_length=2048, description="email: from")
    smarthost: Optional[str] = Field(None, max_length=2048, description="email: host:port of the SMTP server")
    username: Optional[str] = Field(None, max_length=2048)
    password: Optional[str] = Field(None, max_length=2048, description="(a secret, never answered back)")
    require_tls: bool = True


class RuleCreate(BaseModel):
    """A user rule (prometheus/user_rules.py checks what OpenAPI cannot: the fields a kind needs)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="its alert name")
    metric: str = Field(min_length=1, max_length=256, description="the trainer metric as logged")
    kind: Literal["threshold", "change"]
    op: Optional[Literal["below", "above"]] = Field(None, description="threshold")
    value: Optional[float] = Field(None, allow_inf_nan=False, description="threshold")
    for_steps: Optional[float] = Field(None, ge=1, le=100_000, description="threshold: steps it holds")
    for_s: Optional[float] = Field(None, ge=0, le=30 * 86400, description="threshold: or seconds")
    sigma: Optional[float] = Field(None, ge=0.1, le=100, description="change: standard deviations")
    window_steps: Optional[float] = Field(None, ge=1, le=100_000, description="change: the window in steps")
    window_s: Optional[float] = Field(None, ge=0, le=30 * 86400, description="change: or seconds")
    run_id: Optional[int] = Field(None, ge=1, le=JSON_SAFE_INT, description="only this run")
    project: Optional[str] = Field(None, min_length=1, max_length=256, description="every run of this project")
    severity: Literal["info", "warning", "critical"] = "warning"
    what_to_check: str = Field("", max_length=1000)


SilenceId = Path(pattern=r"^[0-9a-fA-F-]{1,64}$", description="a silence's id (Alertmanager's)")


class SilenceCreate(BaseModel):
    """Silence a run's notifications for a while: all of them, or one alert's; or its whole project's."""

    run_id: int = Field(ge=1, le=JSON_SAFE_INT)
    duration_s: float = Field(ge=60, le=MAX_SILENCE_S, description="how long (1 min to 30 days)")
    alertname: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", description="only this alert")
    whole_project: bool = Field(False, description="every run of the run's project")
    comment: str = Field("", max_length=1000)
    created_by: str = Field("", max_length=200, description="who (the CLI sends user@host, the UI 'ui')")


RuleName = Path(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="a user rule's name (its alert name)")


ReceiverName = Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="a receiver's name")


def build_router(st: AppState) -> APIRouter:
    n = st.notifications
    read = APIRouter(prefix="/api/v1/alerting", dependencies=[Depends(st.auth.require_read)], tags=["alerting"],
                     responses=error_responses(401, 404, 409, 422))
    change = APIRouter(prefix="/api/v1/alerting", dependencies=[Depends(st.auth.require_operator)],
                       tags=["alerting"], responses=error_responses(401, 403, 404, 409, 422))

    @read.get("", **typed_answer(NotificationStatus, "whether notifications are delivered, and where"))
    async def status() -> dict[str, Any]:
        return dict(await run_in_threadpool(n.status))

    @read.get("/receivers", **typed_answer(dict[str, list[ShownReceiver]], "the receivers (no secrets)"))
    async def receivers() -> dict[str, Any]:
        return {"receivers": await run_in_threadpool(n.receivers)}

    @change.post("/receivers", status_code=201, **typed_answer(ChangeResult, "the receivers now"))
    async def add(receiver: ReceiverCreate,
                  replace: bool = Query(False, description="replace a receiver of the same name")) -> dict[str, Any]:
        return dict(await run_in_threadpool(n.add, receiver.model_dump(exclude_none=True), replace))

    @change.delete("/receivers/{name}", **typed_answer(ChangeResult, "the receivers now"))
    async def remove(name: str = ReceiverName) -> dict[str, Any]:
        return dict(await run_in_threadpool(n.remove, name))

    @change.post("/receivers/{name}/test", **typed_answer(dict[str, str], "what was sent"))
    async def test(name: str = ReceiverName) -> dict[str, Any]:
        return {"message": await run_in_threadpool(n.test, name, st.public_url)}

    def run_of(run_id: int) -> tuple[str, str]:
        from ..runstore import queries as q

        if st.reader is None:
            raise ConflictError("this server keeps no run store: there is no run to silence")
        run = q.get_run(st.reader.conn(), run_id, st.config.live_window_s)  # 404 for a run that does not exist
        return run["project"], run["experiment_name"]

    @read.get("/silences", **typed_answer(dict[str, list[Silence]], "active and pending silences"))
    async def silences(run_id: int | None = Query(None, ge=1, le=INT64_MAX)) -> dict[str, Any]:
        def work() -> list[Silence]:
            return n.silences(run_of(run_id) if run_id is not None else None)
        return {"silences": await run_in_threadpool(work)}

    @change.post("/silences", status_code=201, **typed_answer(Silence, "the silence"))
    async def silence(body: SilenceCreate) -> dict[str, Any]:
        def work() -> Silence:
            project, experiment = run_of(body.run_id)
            matchers = {"project": project} if body.whole_project else {"project": project,
                                                                         "experiment_name": experiment}
            if body.alertname:
                matchers["alertname"] = body.alertname
            return n.silence(matchers, body.duration_s, body.created_by, body.comment)
        return dict(await run_in_threadpool(work))

    @change.delete("/silences/{silence_id}", **typed_answer(dict[str, str], "what was done"))
    async def unsilence(silence_id: str = SilenceId) -> dict[str, Any]:
        await run_in_threadpool(n.unsilence, silence_id)
        return {"message": f"silence {silence_id} ended"}

    @read.get("/rules", **typed_answer(dict[str, list[dict[str, Any]]], "the user rules, each with its words"))
    async def rules() -> dict[str, Any]:
        return {"rules": [{**r, "description": describe(r)} for r in await run_in_threadpool(st.user_rules.rules)]}

    @change.post("/rules", status_code=201, **typed_answer(dict[str, Any], "the rule as stored, in words too"))
    async def add_rule(rule: RuleCreate, replace: bool = Query(False)) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            from ..runstore import queries as q
            from ..runstore.steps.run_insights import median_step_s

            body = rule.model_dump(exclude_none=True, exclude={"run_id"})
            run_id = rule.run_id
            step_s = None
            if st.reader is not None and run_id is not None:
                run = q.get_run(st.reader.conn(), run_id, st.config.live_window_s)  # 404 for no such run
                body["project"], body["experiment_name"] = run["project"], run["experiment_name"]
                step_s = median_step_s(st.reader.conn(), run_id, st.config.step_metric)
            elif st.reader is not None and isinstance(body.get("project"), str):  # the project's latest run's steps
                runs = q.list_runs(st.reader.conn(), st.config.live_window_s, body["project"])
                if runs:
                    latest = max(runs, key=lambda r: r["last_seen"])
                    step_s = median_step_s(st.reader.conn(), latest["id"], st.config.step_metric)
            made: UserRule = st.user_rules.add(body, step_s, replace)
            return {**made, "description": describe(made)}
        return await run_in_threadpool(work)

    @change.delete("/rules/{name}", **typed_answer(dict[str, str], "what was done"))
    async def remove_rule(name: str = RuleName) -> dict[str, Any]:
        await run_in_threadpool(st.user_rules.remove, name)
        return {"message": f"rule {name} removed; Prometheus drops it at its reload (within a second)"}

    out = APIRouter()
    out.include_router(read)
    out.include_router(change)
    return out
