"""Routers put together by taking their built routes, not by FastAPI's `include_router`.

Why: each route is complete where it is declared (its prefix, tags, dependencies and answer types are bound into the
`APIRoute` then), and FastAPI 0.165's `include_router` builds every route's parameter and answer fields again (a
pydantic schema each) for each level of inclusion: a server's app took 0.78 s to make, 0.45 s when its routes are
taken as built (measured 2026-12-07, tests/unit/server/routing/test_joined.py keeps the schema and the routes the
same). Invariant: a joined router is only put into another router or the app through these functions, never given
a prefix, tags or dependencies of its own (those would not reach routes taken as built).
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI


def joined(*routers: APIRouter) -> APIRouter:
    """One router holding the routes of `routers`, in their order (the first match wins, as with `include_router`)."""
    out = APIRouter()
    for router in routers:
        out.routes.extend(router.routes)
    return out


def mount(app: FastAPI, router: APIRouter) -> None:
    """`router`'s routes into `app`, after the routes it already has."""
    app.router.routes.extend(router.routes)
