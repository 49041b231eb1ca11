"""Client configuration, resolved once at `init()` from the environment and the init config."""

from __future__ import annotations

from .. import env as _env

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing and dataclasses cost ~8 ms of import time that training processes would pay
    from typing import Any, Mapping

DEFAULT_STEP_METRIC = "training/global_step"
# Prometheus client library defaults, so histograms look familiar when no buckets are configured.
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)


class ClientConfig:
    """Everything the exporter needs; read-only after construction so the thread reads it lock-free.

    A plain slotted class rather than a frozen dataclass: `dataclasses` imports `inspect`, which
    would add milliseconds to every training process's start-up.
    """

    __slots__ = ("url", "token", "step_metric", "queue_size", "batch_size", "flush_interval_s",
                 "request_timeout_s", "exit_timeout_s", "max_series", "histogram_buckets", "namespace", "span_budget")

    def __init__(
        self,
        url: str = "",
        token: str = "",
        step_metric: str = DEFAULT_STEP_METRIC,
        queue_size: int = 100_000,  # items; the oldest is dropped (and counted) past this
        batch_size: int = 5_000,  # items per HTTP request
        flush_interval_s: float = 0.1,  # linger: events wait at most this long before they are sent
        request_timeout_s: float = 5.0,
        exit_timeout_s: float = 5.0,  # how long atexit may wait for the last flush
        max_series: int = 10_000,  # distinct series per kind per process
        histogram_buckets: Mapping[str, tuple[float, ...]] | None = None,
        namespace: str = "",  # upstream's server.namespace: metric prefix and OTel service.name ("" = default)
        span_budget: int = 0,  # agent-loop turn spans per step and process, by whole trajectories (0: no budget)
    ) -> None:
        self.url = url
        self.token = token
        self.step_metric = step_metric
        self.queue_size = queue_size
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.request_timeout_s = request_timeout_s
        self.exit_timeout_s = exit_timeout_s
        self.max_series = max_series
        self.histogram_buckets = dict(histogram_buckets or {})
        self.namespace = namespace
        self.span_budget = span_budget

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def buckets_for(self, name: str) -> tuple[float, ...]:
        return self.histogram_buckets.get(name, DEFAULT_BUCKETS)


def _get(cfg: Any, *path: str) -> Any:
    """Read a nested key from a dict or dict-like (OmegaConf DictConfig) without importing it."""
    node = cfg
    for key in path:
        if node is None:
            return None
        try:
            node = node.get(key) if hasattr(node, "get") else None
        except Exception:  # DictConfig in struct mode raises on unknown keys
            return None
    return node


def _num(value: Any, default: float, kind: type = float) -> Any:
    try:
        return kind(value) if value not in (None, "") else default
    except (TypeError, ValueError):
        return default


def resolve_url(config: Any = None) -> str:
    """`RL_INSIGHT_SERVER_URL` wins over `config["server"]["url"]` (upstream's precedence)."""
    env = _env.get(_env.SERVER_URL)
    if env:
        return env.rstrip("/")
    url = _get(config, "server", "url")
    return str(url).strip().rstrip("/") if url else ""


def resolve_token(config: Any = None) -> str:
    env = _env.get(_env.TOKEN)
    if env:
        return env
    tok = _get(config, "server", "token")
    return str(tok).strip() if tok else ""


def load_config(config: Any = None) -> ClientConfig:
    """Build the client config from `init(config=...)` plus environment overrides."""
    buckets_cfg = _get(config, "histogram_buckets") or {}
    buckets: dict[str, tuple[float, ...]] = {}
    if hasattr(buckets_cfg, "items"):
        for name, bounds in buckets_cfg.items():
            try:
                clean = tuple(sorted({float(b) for b in bounds}))
            except (TypeError, ValueError):
                continue
            if clean:
                buckets[str(name)] = clean
    client = _get(config, "client") or {}
    def env(name: str) -> str:
        return _env.get(name)

    return ClientConfig(
        url=resolve_url(config),
        token=resolve_token(config),
        step_metric=str(env(_env.STEP_METRIC) or _get(config, "step_metric") or DEFAULT_STEP_METRIC),
        queue_size=max(100, _num(env(_env.QUEUE_SIZE) or _get(client, "queue_size"), 100_000, int)),
        batch_size=max(1, _num(_get(client, "batch_size"), 5_000, int)),
        flush_interval_s=max(0.01, _num(env(_env.FLUSH_INTERVAL) or _get(client, "flush_interval_s"), 0.1)),
        request_timeout_s=max(0.1, _num(_get(client, "request_timeout_s"), 5.0)),
        exit_timeout_s=max(0.0, _num(env(_env.EXIT_TIMEOUT) or _get(client, "exit_timeout_s"), 5.0)),
        max_series=max(10, _num(_get(client, "max_series"), 10_000, int)),
        histogram_buckets=buckets,
        namespace=_namespace(_get(config, "server", "namespace")),
        span_budget=max(0, _num(env(_env.SPAN_BUDGET) or _get(client, "span_budget"), 0, int)),
    )


def _namespace(raw: Any) -> str:
    """`server.namespace` as a valid metric-name prefix ("" for the default `rl_insight_monitor`)."""
    if not raw or not isinstance(raw, str) or not raw.strip():
        return ""
    from ..semantics.names import sanitize_metric_name

    ns = sanitize_metric_name(raw.strip())[:64].replace(":", "_")
    return "" if ns == "rl_insight_monitor" else ns


def resolve_identity(project: str | None, experiment_name: str | None) -> dict[str, str]:
    """Run identity labels: the arguments of init(), else RL_INSIGHT_PROJECT / RL_INSIGHT_EXPERIMENT_NAME
    (verl's workers call bare init(); the Ray runtime env carries these). Normalised as upstream main does:
    surrounding whitespace stripped, and a name that is blank after that counts as not given."""
    project = project if project is not None else (_env.get(_env.PROJECT) or None)
    if experiment_name is None:
        experiment_name = _env.get(_env.EXPERIMENT_NAME) or None
    labels = {}
    for key, value in (("project", project), ("experiment_name", experiment_name)):
        text = "" if value is None else str(value).strip()
        if text:
            labels[key] = text
    return labels
