"""Access declared where a route is registered: who may call it and how a project reaches it, one declaration per
route, enforced by one piece of code and published in /openapi.json (`x-rl-insight-access`), where the generated
route × role × project matrix (tests/unit/server/access/test_route_matrix.py) reads it.

    @r.get("/runs/{run_id}", **declare(st.auth, "read", "named"), **typed_answer(Run, "the run"))

*Who* (the principal's role, server/access/principal.py): `open` (no token: probes, signing in), `scrape`
(`/metrics`: open unless the server has a --metrics-token, which the route checks), `read` (viewer and up), `operate`
(operator and up), `ingest` (ingest and admin: data a job sends), `admin`, `server` (the server's own token or an
admin's: what the managed Alertmanager hands back).

*Reach* (how a project reaches the route): `named` (a path or query names a run, a request or a rule: another
project's is answered 404, as if it did not exist), `listed` (a listing filtered to the principal's projects),
`global` (no project in it), `written` (data naming its project: another project's refused, 403), `partial` (a batch
whose items name their projects: another project's refused item by item), `open`.

Invariants: `create_app` refuses to build an app with a documented route that declares nothing (`publish`), so a
route cannot be added without saying who may call it. The enforcement is
`Access.enforce` alone: the role (security.Auth), then every run id the request names in its path or query, parsed
with the one reader the routes' parameters use (access/run_ids.py), so the id checked is the id the route reads. What
a route names besides a run — a profile, a snapshot, a receiver, a rule, a project in a body — its handler resolves
to a project: a thing its *path* names (a profile request, a snapshot, a receiver, a rule) through the declaration's
`Named` (its owner's `project_of`, checked here, before the handler runs); a project in a body or a listing, in the
handler with access/scope.py (`require_writes`, `only_visible`), as the declared reach says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol, get_args

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from .scope import principal_of, require_sees, require_writes


class Auth(Protocol):
    """The token rule (server/security.py `Auth`, a layer above this one): a requirement per role."""

    async def require_read(self, request: Request) -> None: ...

    async def require_operator(self, request: Request) -> None: ...

    async def require_write(self, request: Request) -> None: ...

    async def require_admin(self, request: Request) -> None: ...

    async def require_server(self, request: Request) -> None: ...

Who = Literal["open", "scrape", "read", "operate", "ingest", "admin", "server"]
Reach = Literal["named", "listed", "global", "written", "partial", "open"]
WHO: tuple[str, ...] = get_args(Who)
REACH: tuple[str, ...] = get_args(Reach)
SCHEMA_KEY = "x-rl-insight-access"
# who -> the token rule's requirement (security.Auth); open and scrape have none (scrape: the route checks
# --metrics-token itself)
REQUIREMENT = {"read": "require_read", "operate": "require_operator", "ingest": "require_write",
               "admin": "require_admin", "server": "require_server"}


@dataclass(frozen=True)
class Named:
    """A thing the route's path parameter `param` names, and how its project is found (`project_of(value)`: None for a
    thing of every project; it raises NotFoundError for none at all). To a principal held to projects, another
    project's thing is `missing` (404, as if it did not exist; `{}` is the value), or on a `written` route, data it
    may not write (403, `writes`). A principal of every project is not looked up at all."""

    param: str
    project_of: Callable[[str], str | None]
    missing: Callable[[str], str] = "no {}".format
    hint: str = ""
    writes: Callable[[str], str] = "a report on {}".format

    async def check(self, request: Request, reach: Reach) -> None:
        if principal_of(request).projects is None:
            return
        value = str(request.path_params.get(self.param, ""))
        project = await run_in_threadpool(self.project_of, value)
        if reach == "written":
            require_writes(request, project, self.writes(value))
        else:
            require_sees(request, project, self.missing(value), self.hint)


@dataclass(frozen=True)
class Access:
    """One route's declaration and its enforcement."""

    auth: Auth
    who: Who
    reach: Reach
    named: Named | None = None

    def __post_init__(self) -> None:
        if self.who not in WHO or self.reach not in REACH:
            raise ValueError(f"an access declaration is one of {WHO} and one of {REACH}, not {self.who!r}, "
                             f"{self.reach!r}")
        if (self.who == "open") != (self.reach == "open"):
            raise ValueError(f"a route open to anyone reaches no project, and only such a route is open: {self.who!r} "
                             f"with {self.reach!r}")

    async def enforce(self, request: Request) -> None:
        """Refuses the request unless its principal may call the route (401, 403), and answers 404 for a run id of a
        project it does not see (security.Auth). A coroutine: FastAPI would run a plain function in its thread pool,
        a trip there and back on every request."""
        name = REQUIREMENT.get(self.who)
        if name is not None:
            await getattr(self.auth, name)(request)
        if self.named is not None:
            await self.named.check(request, self.reach)

    def schema(self) -> dict[str, str]:
        return {"who": self.who, "reach": self.reach, **({"names": self.named.param} if self.named else {})}


def declare(auth: Auth, who: Who, reach: Reach, named: Named | None = None) -> dict[str, Any]:
    """A route decorator's keywords: its declaration, as the dependency that enforces it (`create_app` publishes it in
    the route's schema, `publish`); `named`: the thing of a project its path names."""
    if named is not None and reach not in ("named", "written"):
        raise ValueError(f"a route whose path names a thing of a project reaches it as named or written, not {reach!r}")
    return {"dependencies": [Depends(Access(auth, who, reach, named).enforce)]}


def declared(route: APIRoute) -> dict[str, str] | None:
    """A route's declaration (`{"who": …, "reach": …}`): the `Access` whose `enforce` it depends on, or the one in its
    schema, written there by a route that enforces it on its first line (ingest reads its raw request:
    `await access.enforce(request)`), or by `publish`. None: it declares nothing."""
    for dep in route.dependencies:
        owner = getattr(dep.dependency, "__self__", None)
        if isinstance(owner, Access):
            return owner.schema()
    found = (route.openapi_extra or {}).get(SCHEMA_KEY)
    return found if isinstance(found, dict) else None


def in_schema(access: Access) -> dict[str, Any]:
    """`openapi_extra` of a route that enforces its declaration itself (it declares it there)."""
    return {SCHEMA_KEY: access.schema()}


def publish(routes: list[Any]) -> None:
    """Writes each documented route's declaration into its schema, and refuses an app with one that declares nothing
    (a route cannot be added without saying who may call it)."""
    missing = []
    for route in _api_routes(routes):
        if not route.include_in_schema:
            continue
        found = declared(route)
        if found is None:
            missing.append(f"{','.join(sorted(route.methods or ()))} {route.path}")
            continue
        route.openapi_extra = {**(route.openapi_extra or {}), SCHEMA_KEY: found}
    if missing:
        raise RuntimeError("routes without an access declaration (server/access/declared.py): " + "; ".join(missing))


def _api_routes(routes: list[Any]) -> list[APIRoute]:
    """The app's routes, those of included routers too (FastAPI keeps an included router whole, as one route)."""
    found: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif hasattr(route, "original_router"):
            found.extend(_api_routes(route.original_router.routes))
    return found
