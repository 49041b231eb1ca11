"""What a run's step analyses answer: the insights over a window, one step's critical path, the what-ifs over a
window of steps, and the diff of two runs (or two windows). Typed dicts the routes declare as their answers
(routing/models.typed_answer), so `/openapi.json` documents every field.

Invariants: each dict lists every key its builder writes (tests/unit/server/routes/test_read_results.py compares real
answers with these types); maps keyed by a lane or a state name are `dict[str, …]` (the names are the job's own);
keys a builder adds only in some cases are `NotRequired` (evaluated at import: no postponed annotations here).
"""

from typing import Any, Literal, Union

from typing_extensions import NotRequired, TypedDict

Number = Union[int, float]


class Window(TypedDict):
    from_ns: int
    to_ns: int
    seconds: Number


class LaneUse(TypedDict):
    """A lane's busy seconds over the window, and the shares busy and idle; a state held far past its usual length is
    not busy for that excess (`stalled_s`)."""

    busy_s: Number
    utilization: Number
    bubble_ratio: Number
    stalled_s: NotRequired[Number]


class Overlap(TypedDict):
    """Seconds generating, training and both at once (the overlap async schedules buy)."""

    generation_s: Number
    training_s: Number
    overlap_s: Number
    overlap_ratio: Number


class StepBreakdown(TypedDict):
    """One step: its window, each state's wall seconds (union across lanes), its idle share over the lanes that
    worked in it, and whether a profiling window covered it."""

    step: int
    start_ns: int
    end_ns: int
    duration_s: Number
    states: dict[str, Number]
    bubble_ratio: NotRequired[Number]
    profiled: bool


class LongTail(TypedDict):
    """One step's slowest rollout lane against the median lane."""

    step: int
    slowest_lane: str
    slowest_s: Number
    median_s: Number
    ratio: Number
    lanes: dict[str, Number]


class RolloutWait(TypedDict):
    """How long training waited after the last generation ended, in one step."""

    step: int
    wait_s: Number


class StalledLane(TypedDict):
    """A state open far longer than it usually lasts (semantics/insights.stalled)."""

    lane: str
    state: str
    open_s: Number
    threshold_s: Number
    usual_p95_s: Number | None
    span_id: str | None


class Staleness(TypedDict):
    """Policy versions between generation and training; `source` is "verl" when the job reported it itself."""

    mean: Number
    max: Number
    samples: int
    source: NotRequired[str]


class SnapshotBrief(TypedDict):
    """A stack snapshot in a word (server/rooms/stacks/records.py holds the whole record)."""

    id: str
    created_at: float
    state: Literal["pending", "complete"]
    reason: str
    summary: str | None  # None while it is collected
    answered: int
    expected_count: int
    verdict: dict[str, Any] | None  # its verdict (rooms/stacks/records.Verdict), once complete


class Insights(TypedDict):
    """Utilization, bubbles, step breakdown, overlap, long tail, stalled lanes and staleness over a window."""

    run_id: int
    window: Window
    lanes: dict[str, LaneUse]
    busy: dict[str, dict[str, Number]]  # lane -> state -> seconds
    overlap: Overlap
    steps: list[StepBreakdown]
    long_tail: list[LongTail]
    rollout_wait: list[RolloutWait]
    stalled: list[StalledLane]
    unjudged: NotRequired[list[str]]  # lanes holding a state with no usual length known yet
    staleness: Staleness | None
    profiled_steps: list[int]
    stack_snapshot: SnapshotBrief | None  # the latest snapshot the server took by itself (a stall)


class PathElement(TypedDict):
    """A state on (or off) the critical path, and how late it could have ended without delaying the step."""

    lane: str
    name: str
    start_ns: int
    end_ns: int
    seconds: Number
    slack_s: Number


class PathGap(TypedDict):
    """Time on the path when nothing ran (a bubble)."""

    start_ns: int
    end_ns: int
    seconds: Number


class StepWhatIf(TypedDict):
    """What one step would save: without bubbles, without the long tail, without the slowest k % of generation items,
    with one stage faster (estimates; docs/explain.md)."""

    bubbles_s: Number
    tail_s: Number
    tail_lane: NotRequired[str]
    cut_percent: NotRequired[Number]
    cut_s: NotRequired[Number]
    stage: NotRequired[str]
    faster_percent: NotRequired[Number]
    stage_s: NotRequired[Number]


class CriticalTrajectory(TypedDict):
    """In an agent-loop step: the trajectory that kept the path's replica busy longest."""

    id: int
    key: str
    turns: int
    duration_s: Number | None


class CriticalPath(TypedDict):
    """One step's critical path: its chain of states with their slack, the gaps on it, every other state, the
    seconds by stage and by lane, and the what-ifs."""

    run_id: int
    step: int
    start_ns: int
    end_ns: int
    duration_s: Number
    elements: list[PathElement]
    gaps: list[PathGap]
    bubbles_s: Number
    by_stage: dict[str, Number]
    by_lane: dict[str, Number]
    others: list[PathElement]
    what_if: StepWhatIf
    critical_trajectory: NotRequired[CriticalTrajectory]


class Saving(TypedDict):
    median_s: Number
    total_s: Number


class Savings(TypedDict):
    """Over a window of steps: each what-if's median saving a step and its total (keys `tail`, `bubbles`, `cut<k>`,
    and the stage's name when one was asked), the biggest, and where the critical path ran (seconds a step)."""

    steps: int
    median_step_s: Number | None
    what_if: dict[str, Saving]
    biggest: str | None
    path_stages: dict[str, Number]
    path_lanes: dict[str, Number]


class Explanation(Savings):
    """A run's what-ifs over a window, with the steps not summarized yet and the biggest fix in words."""

    run_id: int
    pending_steps: int
    biggest_text: str | None


class DiffStep(TypedDict):
    """One aligned step: A's and B's seconds and each stage's change."""

    step: int
    a_s: Number
    b_s: Number
    delta_s: Number
    stages: dict[str, Number]


# `class` is a keyword: the functional form
DiffLane = TypedDict("DiffLane", {
    "lane": str,
    "class": str,  # rollout replicas, trainer ranks, …
    "generation_delta_s": NotRequired[Number],  # rollout lanes: the change in generation seconds a step
    "slowest_share_a": NotRequired[Number],  # the share of steps this lane was the slowest, in A and in B
    "slowest_share_b": NotRequired[Number],
    "busy_delta_s": NotRequired[Number],  # other lanes: the change in busy seconds a step
})


class PendingSteps(TypedDict):
    a: int
    b: int


class RunsDiff(TypedDict):
    """Where B's time went against A's, step by step (the medians, the change and the threshold are absent when the
    two have no step in common)."""

    a: int
    b: int
    names: list[str]
    aligned_steps: int
    median_a_s: NotRequired[Number]
    median_b_s: NotRequired[Number]
    mean_delta_s: NotRequired[Number]
    change: NotRequired[Number | None]
    threshold_s: NotRequired[Number]
    noise_s: NotRequired[Number]  # the standard error of the mean per-step change
    significant: NotRequired[bool]  # the change is more than twice that noise (and more than the threshold)
    steps: list[DiffStep]
    by_stage: dict[str, Number]
    by_class: dict[str, Number]
    lanes: list[DiffLane]
    sentence: str
    pending_steps: PendingSteps
    savings_b: Savings
    ledger: "LedgerDiff"


class LedgerDiff(TypedDict):
    """Where B's extra device-seconds went: the mean per step of each ledger reason, B's minus A's, the largest change
    first (docs/ledger.md), and the same in words."""

    a_per_step_s: Number
    b_per_step_s: Number
    by_reason: dict[str, Number]
    sentence: str


class LedgerStep(TypedDict):
    """One step of the ledger: its wall time, the devices its lanes count, their device-seconds in all
    (`wall_s` × `devices`), and those device-seconds by reason (semantics/ledger.py), the largest first."""

    step: int
    wall_s: Number
    devices: Number
    total: Number
    reasons: dict[str, Number]
    tokens: "StepTokens"
    cost: Number | None


class TokenGroups(TypedDict):
    drawn: Number
    filtered: Number


class TokenTotals(TypedDict):
    """Generated tokens by what became of them (semantics/token_ledger.py): null where the job did not report it."""

    generated: Number | None
    trained: Number | None
    filtered: Number | None
    stale: Number | None
    aborted: Number | None
    truncated: Number | None
    unaccounted: Number | None


class StepTokens(TokenTotals):
    """A step's token counts; `sources` says where each count came from; `groups`: the groups drawn and filtered,
    when reported."""

    sources: dict[str, str]
    groups: TokenGroups | None


class LedgerTotals(TypedDict):
    wall_s: Number
    total: Number
    reasons: dict[str, Number]
    tokens: TokenTotals


class Ledger(TypedDict):
    """A run's goodput ledger over a window of steps (runstore/steps/ledger.py): each step's and the window's
    device-seconds by reason, the share that trained (`goodput`, null with no step), where the rest went in one
    sentence, how devices were counted, and the steps still to be summarized; the token ledger likewise (each step's
    `tokens`, the window's `run.tokens`, `token_goodput` = trained over generated when both are reported)."""

    run_id: int
    steps: list[LedgerStep]
    run: LedgerTotals
    goodput: Number | None
    token_goodput: Number | None
    sentence: str
    tokens_sentence: str
    devices_note: str
    pending: list[int]
    cost: Union["LedgerCost", None]


class LedgerCost(TypedDict):
    """With `--gpu-hour-cost`: the price of a device-hour, of the window, of a step on average, of 1,000 trained-on
    tokens (null when the job reports none), and of the device time that did not train."""

    per_device_hour: Number
    total: Number
    per_step: Number
    per_1k_trained_tokens: Number | None
    not_training: Number
