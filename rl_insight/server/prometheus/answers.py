"""What the Prometheus-backed reads answer: a run's panel sections and their series, alerts, the metric families of
the panel catalogue, and the experiments that registered scrape targets. Typed dicts the routes declare as their
answers (routing/models.typed_answer), so `/openapi.json` documents every field.

Invariants: every answer that depends on Prometheus says whether it could ask (`prometheus.state`): an empty
answer with `not_configured` or `unreachable` is not "no data"; sample values are finite numbers or None (JSON has no
NaN); keys only some answers carry are `NotRequired` (evaluated at import: no postponed annotations here).
"""

from typing import Literal, Union

from typing_extensions import NotRequired, TypedDict

from .targets import TargetAnswer

Number = Union[int, float]


class PrometheusState(TypedDict):
    """Whether Prometheus answered; `message` says why not, and how to turn it on."""

    state: Literal["ok", "not_configured", "unreachable"]
    message: NotRequired[str]


class PanelListed(TypedDict):
    id: str
    title: str
    unit: str  # a Grafana unit id
    description: str


class SectionListed(TypedDict):
    """A catalogue section for a run: whether it has data, and what turns it on when it has none."""

    id: str
    title: str
    available: bool
    enable: str
    panels: list[PanelListed]


class PanelSections(TypedDict):
    run_id: int
    from_s: Number
    to_s: Number
    prometheus: PrometheusState
    sections: list[SectionListed]


class PanelSeries(TypedDict):
    """One series of a panel: its legend, labels and [unix seconds, value] points."""

    name: str
    labels: dict[str, str]
    points: list[list[Number | None]]


class Panel(PanelListed):
    """A panel's series over the range (at most MAX_SERIES_PER_QUERY a query; `truncated` when more), or its error."""

    stack: bool
    series: list[PanelSeries]
    truncated: bool
    error: str | None


class SectionData(TypedDict):
    """Every panel of one section as downsampled series (the same queries as the Grafana dashboards). Without a
    Prometheus to ask, only the section, the state and no panels."""

    section: str
    title: NotRequired[str]
    from_s: NotRequired[Number]
    to_s: NotRequired[Number]
    step_s: NotRequired[Number]
    rate_window: NotRequired[str]  # the rate window the queries used (Grafana's $__rate_interval rule)
    prometheus: PrometheusState
    panels: list[Panel]


class Alert(TypedDict):
    """A firing or pending alert (`since`, and `value` as Prometheus formats it) or one resolved within the recent
    window (`last_firing` unix seconds, `value` its expression's last value then), with the rule's annotations."""

    alertname: str | None
    state: str | None  # firing, pending or resolved
    severity: str
    labels: dict[str, str]
    since: NotRequired[str | None]
    last_firing: NotRequired[Number | None]
    value: NotRequired[str | Number | None]
    summary: str
    description: str
    what_to_check: str


class AlertList(TypedDict):
    prometheus: PrometheusState
    active: list[Alert]
    recent: list[Alert]
    recent_window_s: Number


class MetricFamily(TypedDict):
    """A trainer metric family: the UI groups a run's charts by the first word of each metric's name."""

    id: str
    title: str
    key: bool
    metrics: list[str]


class Headline(TypedDict):
    """A first-screen chart: the first of its metric names that a run logged."""

    title: str
    metrics: list[str]


class MetricFamilies(TypedDict):
    families: list[MetricFamily]
    headline: list[Headline]


class Experiment(TypedDict):
    """An experiment that registered scrape targets: whether they are discovered (`active`, upstream's meaning) and
    how many."""

    project: str
    experiment_name: str
    state: Literal["active", "archived"]
    target_count: int
    created_at: Number | None
    updated_at: Number | None


class ExperimentListed(Experiment):
    """With its run's own status (null without a run store or a run): `active` says nothing of the job."""

    run_id: int | None
    run_status: Literal["live", "stalled", "hung", "idle", "finished", "lost"] | None  # runstore/results.RunStatus


class ExperimentList(TypedDict):
    experiments: list[ExperimentListed]
    count: int


class ExperimentTargets(Experiment):
    targets: list[TargetAnswer]
