"""The answers of the routes that change something, as /openapi.json documents them (`models.typed_answer`): the
shapes the handlers already return, each named once here unless its feature names it (`Silence`, `ChangeResult`,
`ProfileView`, `ProfileProcessReported`, `SnapshotView`, `CreatedToken`, `TargetRegistered`, `IngestAnswer`).

Invariant: documentation only — an answer is serialized as the plain dict its handler builds, so naming its type
changes no byte of it (tests/unit/server/routing/test_change_answers.py checks each against its type).
"""

from __future__ import annotations

from typing import Optional

from typing_extensions import NotRequired, TypedDict

from ..prometheus.answers import Experiment
from ..prometheus.user_rules import UserRule


class Message(TypedDict):
    """What was done, in a sentence."""

    message: str


class SignedIn(TypedDict):
    """The UI's session cookie is set (`Set-Cookie`)."""

    status: str


class TargetsRemoved(TypedDict):
    status: str
    removed: int  # scrape targets removed


class ExperimentChanged(Experiment):
    """The experiment after archive or restore, and whether the managed Prometheus already follows it."""

    prometheus_converged: Optional[bool]  # None: no Prometheus is managed by this server
    prometheus_message: NotRequired[str]  # why it does not (yet)


class RuleInWords(UserRule):
    """A user rule as stored, with the rule in words."""

    description: str


class OtlpPartialSuccess(TypedDict, total=False):
    rejectedSpans: str
    rejectedDataPoints: str
    errorMessage: str


class OtlpAnswer(TypedDict, total=False):
    """OTLP's Export…ServiceResponse in its JSON form (empty when everything was kept; protobuf when asked in it)."""

    partialSuccess: OtlpPartialSuccess
