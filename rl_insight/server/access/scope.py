"""What a request's principal may see: the one place routes ask whether a project's thing is theirs.

Invariants: a thing of a project the principal does not see is answered as a thing that does not exist (404, never
403), so names do not leak; a thing of no project (a receiver or rule for every project, a span naming none) is seen
only by a principal of every project; a principal held to projects may not create such a thing (403: it would act on
projects it does not see). Requests that passed `Auth` carry their principal in `request.state.principal`; one that
did not (a route without a token rule) is treated as held to no project at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ...errors import ForbiddenError, NotFoundError
from .principal import Principal

T = TypeVar("T")
NOBODY = Principal("nobody (no token rule on this route)", "viewer", frozenset())


def principal_of(request: Any) -> Principal:
    found = getattr(request.state, "principal", None)
    return found if isinstance(found, Principal) else NOBODY


def sees(request: Any, project: str | None) -> bool:
    """Whether the principal sees this project's things (`None`: a thing of every project)."""
    who = principal_of(request)
    return who.projects is None or (project is not None and who.sees(project))


def visible_filter(request: Any) -> Callable[[str | None], bool] | None:
    """A predicate on projects for filtering a listing, or None when the principal sees every project (no filtering,
    no cost)."""
    who = principal_of(request)
    if who.projects is None:
        return None
    return lambda project: project is not None and who.sees(project)


def only_visible(request: Any, items: Iterable[T], project_of: Callable[[T], str | None]) -> list[T]:
    """The items of projects the principal sees, in their order."""
    keep = visible_filter(request)
    return list(items) if keep is None else [x for x in items if keep(project_of(x))]


def require_sees(request: Any, project: str | None, missing: str, hint: str = "") -> None:
    """404 with `missing` ("no profile 'x'") when the thing's project is not the principal's."""
    if not sees(request, project):
        raise NotFoundError(missing, hint=hint)


def require_every_project(request: Any, what: str) -> None:
    """403 for a principal held to projects asking for something that acts on every project."""
    who = principal_of(request)
    if who.projects is not None:
        raise ForbiddenError(f"token {who.name!r} is held to projects {', '.join(sorted(who.projects))}: {what}",
                             hint="name one of its projects (or one of its runs), or use a token for every project")


def require_writes(request: Any, project: str | None, what: str) -> None:
    """403 for data of a project the sender's token may not write (an ingest token's own request: naming the project
    it sent leaks nothing); `None` (data of no project) only from a token for every project."""
    if project is None:
        require_every_project(request, f"{what} must name its project")
    elif not sees(request, project):
        who = principal_of(request)
        raise ForbiddenError(f"this token ({who.name!r}) writes {', '.join(sorted(who.projects or ()))} only, not "
                             f"project {project[:200]!r}: {what} refused",
                             hint="send it with that project's ingest token (RL_INSIGHT_TOKEN)")
