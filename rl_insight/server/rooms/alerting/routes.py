"""Notifications over HTTP (rooms/alerting/): whether they are on, and the receivers they go to.

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

from typing import TYPE_CHECKING, Any, Literal, Optional
from urllib.parse import urlencode

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool

from ....errors import ConflictError, NotFoundError
from ...access.declared import Named, declare
from ...access.principal import ANONYMOUS
from ...access.scope import only_visible, principal_of, require_every_project, require_sees
from ...prometheus.user_rules import UserRule, describe
from ...routing.body import read_body
from ...routing.change_answers import Message, RuleInWords
from ...routing.joined import joined
from ...routing.models import error_responses, typed_answer
from ...routing.params import BodyRunId, OptionalRunIdQuery
from ...state import AppState
from .delivery import MAX_MESSAGE_BYTES, WebhookDelivery
from .kinds import KINDS
from .kinds import fields as kind_fields
from .notifications import MAX_SILENCE_S, ChangeResult, NotificationStatus, Silence
from .parts import Alerting
from .receivers import ShownReceiver

# a run id in a JSON body: at most 2**53 - 1, the largest integer every JSON reader keeps exact (a body's number past
# it may arrive as a float that rounds up past int64); run ids are far below it
JSON_SAFE_INT = 2**53 - 1

def _receiver_body() -> Any:
    """The body of `POST /receivers`, made from the receiver kinds (rooms/alerting/kinds/): their fields, each
    optional here (receivers.validate checks what OpenAPI cannot: the fields a kind needs, URL and address forms)."""
    spec: dict[str, Any] = {
        "name": (str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")),
        "kind": (Literal.__getitem__(tuple(KINDS)), ...),
        "project": (Optional[str], Field(None, max_length=2048, description="only this project's alerts"))}
    for f in kind_fields():
        spec[f.key] = (bool, f.negated) if f.boolean else \
            (Optional[str], Field(None, max_length=2048, description=f.description))
    return create_model("ReceiverCreate", __config__=ConfigDict(extra="forbid"), __doc__="A receiver "
                        "(rooms/alerting/receivers.py checks what OpenAPI cannot: the fields a kind needs, URL and "
                        "address forms).", **spec)


if TYPE_CHECKING:
    class ReceiverCreate(BaseModel):  # (what mypy sees of the model made from the kinds)
        name: str
        kind: str
        project: Optional[str]
else:
    ReceiverCreate = _receiver_body()


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
    run_id: Optional[BodyRunId] = Field(None, description="only this run")
    project: Optional[str] = Field(None, min_length=1, max_length=256, description="every run of this project")
    severity: Literal["info", "warning", "critical"] = "warning"
    what_to_check: str = Field("", max_length=1000)


SilenceId = Path(pattern=r"^[0-9a-fA-F-]{1,64}$", description="a silence's id (Alertmanager's)")


class SilenceCreate(BaseModel):
    """Silence a run's notifications for a while: all of them, or one alert's; or its whole project's."""

    run_id: BodyRunId
    duration_s: float = Field(ge=60, le=MAX_SILENCE_S, description="how long (1 min to 30 days)")
    alertname: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", description="only this alert")
    whole_project: bool = Field(False, description="every run of the run's project")
    comment: str = Field("", max_length=1000)
    created_by: str = Field("", max_length=200, description="where from (the CLI sends user@host): kept "
                            "in the comment; the silence's creator is the token or person that sent it")


RuleName = Path(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", description="a user rule's name (its alert name)")


ReceiverName = Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", description="a receiver's name")


def build_router(st: AppState, alerting: Alerting) -> APIRouter:
    read = APIRouter(prefix="/api/v1/alerting", tags=["alerting"],
                     responses=error_responses(401, 404, 409, 422))
    change = APIRouter(prefix="/api/v1/alerting",
                       tags=["alerting"], responses=error_responses(401, 403, 404, 409, 422))
    for add in (_add_receiver_routes, _add_silence_routes, _add_rule_routes):  # (in /openapi.json's order)
        add(read, change, st, alerting)
    return joined(read, change, _delivery_router(st, alerting.webhooks))


def _run_of(st: AppState, request: Request, run_id: int) -> tuple[str, str]:
    """A run's (project, experiment_name): 404 for a run that does not exist or that the principal does not see."""

    if st.reader is None:
        raise ConflictError("this server keeps no run store: there is no run to silence")
    run = st.reader.runs.get(run_id, st.config.live_window_s)  # 404 for a run that does not exist
    require_sees(request, run["project"], f"no run with id {run_id}", "GET /api/v1/runs lists the runs")
    return run["project"], run["experiment_name"]


def _own_change(request: Request, done: ChangeResult) -> dict[str, Any]:
    """A change's answer lists the receivers now: those the token sees."""
    return {**done, "receivers": only_visible(request, done["receivers"], lambda r: r["project"])}


def _receiver(n: Any) -> Named:
    """A receiver the path names: of another project (or of every project), to a token held to projects, one that does
    not exist."""
    return Named("name", lambda name: next((r["project"] for r in n.receivers() if r["name"] == name), None),
                 missing=lambda name: f"no receiver named {name[:80]!r}")


def _may_add(request: Request, name: str, project: str | None, existing: list[ShownReceiver]) -> None:
    """A token held to projects adds receivers of one of its projects only, and replaces only its own (`existing`:
    the receivers now, when it asks to replace)."""
    if project is None:
        require_every_project(request, "a receiver of every project's alerts (give project)")
    else:
        require_sees(request, project, f"no project {project[:80]!r}")
    names = {r["name"]: r["project"] for r in existing}
    if name in names:
        require_sees(request, names[name], f"no receiver named {name!r} of this token's projects to replace")


def _silence_matchers(run: tuple[str, str], body: SilenceCreate) -> dict[str, str]:
    project, experiment = run
    matchers = {"project": project} if body.whole_project else {"project": project, "experiment_name": experiment}
    if body.alertname:
        matchers["alertname"] = body.alertname
    return matchers


def _silenced_by(request: Request, body: SilenceCreate) -> tuple[str, str]:
    """(who set it, its comment): the request's principal, never what the body claims (kept in the comment:
    user@host); a server without a token knows nobody: the claim, said to be one."""
    who = principal_of(request)
    if who is ANONYMOUS:
        return f"{body.created_by or 'someone'} (unverified: the server has no token)", body.comment
    said = f" (sent as {body.created_by})" if body.created_by else ""
    return who.name, body.comment[:900] + said


def _rule_scope(st: AppState, request: Request, body: dict[str, Any], run_id: int | None) -> float | None:
    """A rule for one run takes the run's project and experiment; its steps' median time (or the project's latest
    run's) turns a number of steps into seconds (None: no steps to measure)."""

    if st.reader is not None and run_id is not None:
        body["project"], body["experiment_name"] = _run_of(st, request, run_id)
        return st.reader.steps.median_s(run_id, st.config.step_metric)
    if st.reader is not None and isinstance(body.get("project"), str):
        runs = st.reader.runs.of_project(st.config.live_window_s, body["project"])
        if runs:
            latest = max(runs, key=lambda r: r["last_seen"])
            return st.reader.steps.median_s(latest["id"], st.config.step_metric)
    return None


def _rule_link(st: AppState, body: dict[str, Any], run_id: int | None) -> str:
    """A notification's link: the run's page, the project's runs, or the runs list."""
    base = st.public_url.rstrip("/")
    if run_id is not None:
        return f"{base}/#/run/{run_id}"
    return f"{base}/#/?{urlencode({'project': body['project']})}" if body.get("project") else f"{base}/#/"


def _add_receiver_routes(read: APIRouter, change: APIRouter, st: AppState, alerting: Alerting) -> None:
    """Whether notifications are on, and the receivers: listed, added, removed, tested."""
    n = alerting.notifications

    @read.get("", **declare(st.auth, "read", "global"),
              **typed_answer(NotificationStatus, "whether notifications are delivered, and where"))
    async def status() -> dict[str, Any]:
        return dict(await run_in_threadpool(n.status))

    @read.get("/receivers", **declare(st.auth, "read", "listed"),
              **typed_answer(dict[str, list[ShownReceiver]], "the receivers (no secrets)"))
    async def receivers(request: Request) -> dict[str, Any]:
        """A token held to projects sees the receivers of its projects (not those of every project)."""
        return {"receivers": only_visible(request, await run_in_threadpool(n.receivers), lambda r: r["project"])}

    @change.post("/receivers", **declare(st.auth, "operate", "named"),
                 **typed_answer(ChangeResult, "the receivers now", status=201))
    async def add(request: Request, receiver: ReceiverCreate,
                  replace: bool = Query(False, description="replace a receiver of the same name")) -> dict[str, Any]:
        """A token held to projects adds receivers of one of its projects only (and replaces only its own)."""
        request.state.audit_what = {"name": receiver.name, "kind": receiver.kind,
                                    **({"project": receiver.project} if receiver.project else {})}  # (audit log)
        _may_add(request, receiver.name, receiver.project, await run_in_threadpool(n.receivers) if replace else [])
        return _own_change(request, await run_in_threadpool(n.add, receiver.model_dump(exclude_none=True), replace))

    @change.delete("/receivers/{name}", **declare(st.auth, "operate", "named", _receiver(n)),
                   **typed_answer(ChangeResult, "the receivers now"))
    async def remove(request: Request, name: str = ReceiverName) -> dict[str, Any]:
        request.state.audit_what = {"name": name}  # (the audit log: the answer lists the receivers left)
        return _own_change(request, await run_in_threadpool(n.remove, name))

    @change.post("/receivers/{name}/test", **declare(st.auth, "operate", "named", _receiver(n)),
                 **typed_answer(Message, "what was sent"))
    async def test(request: Request, name: str = ReceiverName) -> dict[str, Any]:
        return {"message": await run_in_threadpool(n.test, name, st.public_url)}


def _add_silence_routes(read: APIRouter, change: APIRouter, st: AppState, alerting: Alerting) -> None:
    """Silences of a run (or its whole project) through the managed Alertmanager."""
    n = alerting.notifications

    def own_silences(request: Request, found: list[Silence]) -> list[Silence]:
        return only_visible(request, found, lambda s: s["matchers"].get("project"))

    @read.get("/silences", **declare(st.auth, "read", "named"),
              **typed_answer(dict[str, list[Silence]], "active and pending silences"))
    async def silences(request: Request, run_id: OptionalRunIdQuery = None) -> dict[str, Any]:
        def work() -> list[Silence]:
            return own_silences(request, n.silences(_run_of(st, request, run_id) if run_id is not None else None))
        return {"silences": await run_in_threadpool(work)}

    @change.post("/silences", **declare(st.auth, "operate", "named"),
                 **typed_answer(Silence, "the silence", status=201))
    async def silence(request: Request, body: SilenceCreate) -> dict[str, Any]:
        def work() -> Silence:
            by, comment = _silenced_by(request, body)
            return n.silence(_silence_matchers(_run_of(st, request, body.run_id), body), body.duration_s, by, comment)
        return dict(await run_in_threadpool(work))

    @change.delete("/silences/{silence_id}", **declare(st.auth, "operate", "named"),
                   **typed_answer(Message, "what was done"))
    async def unsilence(request: Request, silence_id: str = SilenceId) -> dict[str, Any]:
        def work() -> None:
            if principal_of(request).projects is not None and \
                    not own_silences(request, [x for x in n.silences() if x["id"] == silence_id]):
                raise NotFoundError(f"no silence {silence_id}")  # another project's: as one that does not exist
            n.unsilence(silence_id)
        await run_in_threadpool(work)
        return {"message": f"silence {silence_id} ended"}


def _add_rule_routes(read: APIRouter, change: APIRouter, st: AppState, alerting: Alerting) -> None:
    """The rules users add on trainer metrics (prometheus/user_rules.py)."""

    def rule_project(name: str) -> str | None:
        return next((r.get("project") for r in st.user_rules.rules() if r["name"] == name), None)

    def own_rule(request: Request, name: str) -> None:
        """A rule of another project (or of every project) is, to a token held to projects, one that does not exist
        (one that does not exist yet may be added)."""
        found = [r for r in st.user_rules.rules() if r["name"] == name]
        if found:
            require_sees(request, found[0].get("project"), f"no rule named {name!r}")

    @read.get("/rules", **declare(st.auth, "read", "listed"),
              **typed_answer(dict[str, list[RuleInWords]], "the user rules, each with its words"))
    async def rules(request: Request) -> dict[str, Any]:
        """A token held to projects sees the rules of its projects (not those of every project)."""
        found = only_visible(request, await run_in_threadpool(st.user_rules.rules), lambda r: r.get("project"))
        return {"rules": [{**r, "description": describe(r)} for r in found]}

    @change.post("/rules", **declare(st.auth, "operate", "named"),
                 **typed_answer(RuleInWords, "the rule as stored, in words too", status=201))
    async def add_rule(request: Request, rule: RuleCreate, replace: bool = Query(False)) -> dict[str, Any]:
        """A token held to projects adds rules of its projects' runs only (and replaces only its own)."""
        def work() -> dict[str, Any]:
            body = rule.model_dump(exclude_none=True, exclude={"run_id"})
            step_s = _rule_scope(st, request, body, rule.run_id)
            if body.get("project") is None:
                require_every_project(request, "a rule of every project's runs (give project or run_id)")
            require_sees(request, body.get("project"), f"no project {str(body.get('project'))[:80]!r}")
            if replace:
                own_rule(request, rule.name)
            made: UserRule = st.user_rules.add(body, step_s, replace, url=_rule_link(st, body, rule.run_id))
            return {**made, "description": describe(made)}
        return await run_in_threadpool(work)

    @change.delete("/rules/{name}", **declare(st.auth, "operate", "named", Named("name", rule_project,
                                                                                missing="no rule named {!r}".format)),
                   **typed_answer(Message, "what was done"))
    async def remove_rule(request: Request, name: str = RuleName) -> dict[str, Any]:
        request.state.audit_what = {"name": name}  # (the audit log)
        await run_in_threadpool(st.user_rules.remove, name)
        return {"message": f"rule {name} removed; Prometheus drops it at its reload (within a second)"}


def _delivery_router(st: AppState, webhooks: WebhookDelivery) -> APIRouter:
    """Where the managed Alertmanager hands webhook receivers' messages (rooms/alerting/delivery.py): with the
    server's own token (a token for every project: an admin)."""
    deliver = APIRouter(prefix="/api/v1/alerting", tags=["alerting"],
                        responses=error_responses(400, 401, 403, 404, 413, 502))

    @deliver.post("/deliver/{name}", **declare(st.auth, "server", "global"),
                  **typed_answer(Message, "what the receiver answered"))
    async def deliver_message(request: Request, name: str = ReceiverName) -> Any:
        url = await run_in_threadpool(webhooks.target, name)
        if url is None:
            raise NotFoundError(f"no webhook receiver named {name[:80]!r}")
        code, said = await webhooks.deliver(name, url, await read_body(request, MAX_MESSAGE_BYTES))
        return {"message": said} if code == 200 else JSONResponse({"detail": said}, status_code=code)

    return deliver
