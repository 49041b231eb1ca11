"""What the run store's reads of runs, metrics, series, lanes and spans return: typed dicts the query modules build
(mypy checks every key they write) and the read routes declare as their answers (routing/models.typed_answer), so
`/openapi.json` documents every field.

Invariants: each dict lists every key its query writes (tests/unit/server/routes/test_read_results.py compares
answers with their types); numbers read from the store are `Number` (an int stays an int on the wire);
keys a query adds only sometimes are `NotRequired` (evaluated at import: no postponed annotations here, so
`__required_keys__` says which).
"""

from typing import Any, Literal, Union

from typing_extensions import NotRequired, TypedDict

Number = Union[int, float]
RunStatus = Literal["live", "stalled", "hung", "idle", "finished", "lost"]


class Run(TypedDict):
    """A run: who it is, when it was seen, how far it got, its state."""

    id: int
    project: str
    experiment_name: str
    first_seen: Number
    last_seen: Number
    last_step: Number | None
    status: RunStatus
    duration_s: Number
    tags: list[str]
    lost: NotRequired[dict[str, Any]]  # (lost runs) why, and the lanes that were open
    why: NotRequired[str]  # (stalled and hung runs) what the stall watch saw, or the verdict
    config: NotRequired[dict[str, Any]]  # what init(config=...) said (when asked for)


class RunListed(Run):
    """A run in the runs list, with the columns that list was asked for."""

    archived: NotRequired[bool]  # archived through the experiments API
    metric: NotRequired[Number | None]  # the summary metric's latest value (metric=NAME)
    config_values: NotRequired[dict[str, Any]]  # the config columns (config=KEYS)


class RunList(TypedDict):
    runs: list[RunListed]
    count: int


class Metric(TypedDict):
    """One series of a run: its name as stored and as logged, kind, labels, sample count and last step."""

    name: str
    kind: str
    labels: dict[str, Any]
    samples: int
    last_step: Number | None
    logged: str


class MetricList(TypedDict):
    run_id: int
    metrics: list[Metric]
    count: int


class SeriesPoints(TypedDict):
    """One label set of a metric: [x, value] points (downsampled), and how many samples the window holds."""

    labels: dict[str, Any]
    kind: str
    points: list[list[Number | None]]
    total: int


class Series(TypedDict):
    run_id: int
    name: str
    x: Literal["step", "time"]
    agg: Literal["minmax", "lttb", "none"]
    series: list[SeriesPoints]


class Comparison(TypedDict):
    name: str
    runs: list[Series]


class Lane(TypedDict):
    """A lane of the timeline; with counts=true, how many spans, their extent, and how many are open."""

    lane: str
    spans: NotRequired[int]
    first_ns: NotRequired[int | None]
    last_ns: NotRequired[int | None]
    open: NotRequired[int | None]


class LaneList(TypedDict):
    run_id: int
    lanes: list[Lane]


class SpanDetail(TypedDict):
    """One span as stored, its attributes decoded."""

    id: str
    trace_id: str | None
    parent_id: str | None
    name: str
    lane: str
    kind: str
    start_ns: int
    end_ns: int | None
    open: bool
    attributes: dict[str, Any]


class LeftOut(TypedDict):
    """Spans a default window left out: they start long before the run began (a client clock far behind)."""

    spans: int
    before_ns: int
    why: str


class SpanWindow(TypedDict):
    """The timeline's window (spans/timeline.spans_window): `spans` are rows in the order of `columns`
    ([lane index into `lanes`, depth, name, start_ns, end_ns, spans merged, span id or null, open]), about one a
    `resolution_ns` a lane; `truncated` when `limit` cut them."""

    run_id: int
    from_ns: int
    to_ns: int
    resolution_ns: int
    lanes: list[str]
    columns: list[str]
    spans: list[list[Any]]
    truncated: bool
    left_out: NotRequired[LeftOut]


class TrajectorySteps(TypedDict):
    """The steps that have agent-loop trajectories, newest first, and whether some have no step."""

    steps: list[int]
    without_step: bool


class Trajectory(TypedDict):
    """One agent-loop trajectory as the index keeps it (runstore/trajectories/index.py)."""

    id: int
    key: str
    step: int | None
    sample: str | None
    rollout_n: int | None
    validate: bool | None
    source: str | None
    status: str | None
    reward: Number | None
    reported_turns: int | None
    start_ns: int | None
    end_ns: int | None
    duration_s: Number | None
    turns: int
    generates: int
    tool_calls: int
    tool_errors: int
    tokens_in: int | None
    tokens_out: int | None
    generate_s: Number | None
    tool_s: Number | None
    replica: str | None
    tools: list[str]


class Gap(TypedDict):
    start_ns: int
    end_ns: int


class TrajectoryDetail(Trajectory):
    """A trajectory with its turns in time order (each with its engine timings when known) and the gaps between
    them (time no turn was running)."""

    turn_list: list[dict[str, Any]]
    gaps: list[Gap]
    gap_s: Number


class TrajectoryPage(TypedDict):
    """One page of a step's trajectories and how many match."""

    step: int | None
    total: int
    offset: int
    limit: int
    sort: str
    descending: bool
    trajectories: list[Trajectory]


class Quantiles(TypedDict):
    p50: Number | None
    p90: Number | None
    p99: Number | None
    max: Number | None


class Histogram(TypedDict):
    """Equal-width bins: `counts[i]` values in [edges[i], edges[i + 1])."""

    edges: list[Number]
    counts: list[int]


class ToolLatency(TypedDict):
    tool: str
    calls: int
    errors: int
    p50_s: Number | None
    p99_s: Number | None
    max_s: Number


class ReplicaLoad(TypedDict):
    replica: str
    trajectories: int
    max_s: Number
    total_s: Number


class TrajectoryStats(TypedDict):
    """A step's distributions over its trajectories."""

    step: int | None
    trajectories: int
    duration_s: Quantiles
    turns: Histogram
    reward: Histogram
    tokens_out: Histogram
    duration: Histogram
    tools: list[ToolLatency]
    replicas: list[ReplicaLoad]
    statuses: dict[str, int]
    failed: int
    with_tool_errors: int


class MoeCell(TypedDict):
    """The most imbalanced layer at a step: its busiest expert gets `times_fair` × its fair share."""

    layer: int
    step: Number
    max_vio: Number
    times_fair: Number


class MoeLatest(TypedDict):
    step: Number
    layer: int
    max_vio: Number


class HotExpert(TypedDict):
    layer: int
    expert: int
    share: Number
    times_fair: Number


class ExpertLoad(TypedDict):
    """Each expert's share of its layer's assignments at one step (layers × experts; None where not logged)."""

    step: Number | None
    load: list[list[Number | None]]
    hot: HotExpert


class Moe(TypedDict):
    """MoE expert load (semantics/moe.py): each layer's max violation by step (`max_vio[layer][step]`), the worst
    and the latest most imbalanced layer, the experts at one step when logged, and a sentence."""

    run_id: int
    layers: list[int]
    steps: list[Number]
    max_vio: list[list[Number | None]]
    worst: MoeCell | None
    latest: NotRequired[MoeLatest]
    experts: ExpertLoad | None
    sentence: str
