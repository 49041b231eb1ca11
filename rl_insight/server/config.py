"""Server configuration: one frozen dataclass, written as JSON by `server start` for the child.

Each option is declared once, as a field with its help (`option(...)`): `rl-insight server start --store-max-gb 5`
(or RL_INSIGHT_SERVER_STORE_MAX_GB=5) is the field `ServerConfig.store_max_gb` and the key `store_max_gb` in the
runtime `server.json`; cli/start_flags.py makes the flag, its default and its environment variable from the field,
and the CLI builds this dataclass from its parameters by name. Adding an option is one field here."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import env
from ..errors import ConfigError
from .runstore.retention import DEFAULT_RETENTION_DAYS, DEFAULT_STORE_MAX_GB

if TYPE_CHECKING:
    from .runstore.backend.location import StoreLocation

DEFAULT_PORT = 18080
DEFAULT_MAX_BODY = 16 * 1024 * 1024
# keys of runtime files written by earlier versions, read under today's names
RENAMED = {"retention_days": "store_retention_days", "otlp_grpc_intake_port": "otlp_intake_grpc_port"}


STORE_WRITERS = ("process", "thread")  # where the run store's writer may run (store_writer)
INSIGHTS_WORKERS = ("process", "thread")  # where the insight rounds run (insights_worker)


@dataclass(frozen=True)
class Flag:
    """How a config field is a `server start` option: its help, and what the command line needs besides its name
    (`--store-max-gb` from `store_max_gb`). cli/start_flags.py makes the flag from it, with its environment variable
    (`env`, else RL_INSIGHT_SERVER_<NAME>); the runtime file's key is the field's name."""

    help: str
    flag: str | tuple[str, ...] | None = None  # other spellings: a list's flag is singular, a switch has its --no-
    metavar: str | None = None
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    env: str | None = None  # an established name (RL_INSIGHT_TOKEN)


def option(default: Any, help: str, **flag: Any) -> Any:
    """A config field that is a `server start` option: declared once, here, with its help."""
    return field(default=default, metadata={"flag": Flag(help, **flag)})


def flag_of(f: Any) -> Flag | None:
    """A dataclass field's option (None: not a `server start` option)."""
    found = f.metadata.get("flag")
    return found if isinstance(found, Flag) else None


def reach_host(bind_host: str) -> str:
    """Where a process on this host reaches a server bound to `bind_host` (a wildcard: loopback; IPv6 bracketed)."""
    if bind_host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if bind_host == "::":
        return "[::1]"
    return f"[{bind_host}]" if ":" in bind_host else bind_host


@dataclass(frozen=True)
class ServerConfig:
    host: str = option("0.0.0.0", "Ingest server bind address.")
    port: int = option(DEFAULT_PORT, "Ingest server port.")
    token: str = option(
        "", "Bearer token for state-changing routes (default: generated when not on loopback).", env=env.TOKEN)
    # Single sign-on through a trusted proxy (server/access/sso.py): requests from these networks (CIDR) are the
    # person the proxy names in user_header (their groups in groups_header), given a role by access_map (YAML)
    trusted_proxy: tuple[str, ...] = option(
        (),
        "A network the signing-in proxy (oauth2-proxy, an ingress) connects from: its --user-header is believed from "
        "there only, ignored from anywhere else. Repeatable. Needs a token (one is generated).", metavar="CIDR")
    user_header: str = option(
        "X-Forwarded-User", "The header the proxy names the signed-in person in.", metavar="HEADER")
    groups_header: str | None = option(None, "The header the proxy lists the person's groups in.", metavar="HEADER")
    access_map: str | None = option(
        None, "YAML: users and groups -> role and projects (docs/access.md); read again when it changes.",
        metavar="FILE")
    metrics_token: str = option(
        "",
        "Bearer token /metrics needs (it names every run): the managed Prometheus is given it. Default: /metrics open,"
        " like Prometheus exporters.", env=env.METRICS_TOKEN)
    data_dir: str = "~/.rl-insight/data"
    max_body_bytes: int = DEFAULT_MAX_BODY
    series_ttl_s: float = 3600.0  # series not updated for this long leave /metrics
    agent_loop_series_ttl_s: float = 120.0  # agent_loop_* info series (one per trajectory) leave /metrics sooner
    max_series_per_metric: int = 10_000
    max_targets: int = 10_000
    # Size bounds of what the server holds in memory (beyond them new items are refused and counted)
    max_families: int = 20_000  # metric names on /metrics
    max_families_per_client: int = 5_000
    max_metric_store_bytes: int = 256 * 2**20
    max_span_memory_bytes: int = 64 * 2**20  # open and recent spans kept for /api/v1/spans/*
    # A client silent this long is gone: its open states are closed (cut short) and its run may finish.
    # Clients send a heartbeat every 10 s while idle.
    client_silence_s: float = 30.0
    # Host names (besides loopback, this machine's names and the bound address) a token-less server answers to.
    allowed_hosts: tuple[str, ...] = option(
        (),
        "Another name clients use for this server (DNS name behind a proxy); without a token, requests for other Host "
        "names are refused (DNS-rebinding defence). Repeatable.", flag="--allowed-host", metavar="NAME")
    # Run store (SQLite under data_dir, or `store`: postgresql://user@host:port/db, never with a password in it):
    # runs not seen for retention_days are deleted, and the oldest runs go first when it holds more than store_max_gb.
    store_enabled: bool = True
    store: str | None = option(
        None, "The run store: postgresql://user@host:port/db (extra rl-insight[postgres]; the password from "
        "RL_INSIGHT_STORE_PASSWORD, ~/.pgpass or ?passfile=, never in the URL) or sqlite:///FILE (default: a SQLite "
        "file under --data-dir). See docs/scale.md.", metavar="URL", env=env.STORE_URL)
    # A directory every server of a fleet mounts (NFS, Lustre): profile traces and their analyses (default data_dir;
    # the requests themselves live in a PostgreSQL store, docs/scale.md)
    shared_dir: str | None = option(
        None,
        "A directory every server of a fleet mounts (NFS, Lustre): profile traces and their analyses, which any server"
        " then serves (default: --data-dir). See docs/scale.md.", metavar="DIR")
    store_retention_days: float = option(
        DEFAULT_RETENTION_DAYS, "Run store: delete runs not seen for this many days.", min=0.01)
    store_max_gb: float = option(
        DEFAULT_STORE_MAX_GB, "Run store: delete the oldest runs while the file is larger.", min=0.01)
    live_window_s: float = 60.0  # a run counts as live while data arrived this recently
    step_metric: str = "training/global_step"
    version_metric: str = "current_param_version"  # trainer parameter version, for staleness
    insights_window_s: float = 300.0  # window of the insight metrics on /metrics
    insights_interval_s: float = 15.0  # how often the insight metrics (and the stall watch) are recomputed
    insights_worker: str = option(
        "process",
        "Where the insight metrics are computed: a process of their own (the default: a round never holds the ingest "
        "loop's GIL) or a thread of the server.", metavar="process|thread", choices=INSIGHTS_WORKERS)
    stalled_lane_min_s: float = 45.0  # a lane is stalled after 3x its usual time in a state, and at least this long
    # Where the other services run, for /api/v1/services (None = not managed by us). prometheus_url is the
    # Prometheus-compatible query endpoint the UI's panels and alerts read (`server start --prometheus-url`:
    # VictoriaMetrics, Mimir, Thanos; default the managed Prometheus); managed_prometheus_url the one this stack runs
    # (its rules are the alert rules).
    prometheus_url: str | None = option(
        None,
        "The Prometheus-compatible query endpoint the UI's panels, alert history and Grafana read (VictoriaMetrics, "
        "Mimir, Thanos; with --remote-write-url sending it the managed Prometheus's data). Default: the managed "
        "Prometheus.", metavar="URL")
    managed_prometheus_url: str | None = None
    prometheus_config_file: str | None = None  # reported by target registration (upstream's `config_file`)
    scrape_interval_s: float = 10.0  # Prometheus' scrape interval: rate windows follow Grafana's $__rate_interval
    tempo_url: str | None = None
    grafana_url: str | None = None
    # Span forwarding over OTLP (None: only when OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT is set)
    otlp_endpoint: str | None = option(None, "Forward spans to this OTLP receiver instead of a managed Tempo.")
    otlp_protocol: str = option("http/protobuf", "http/protobuf or grpc.")
    otlp_queue: int = 50_000
    otlp_intake_grpc_port: int = option(
        0,
        "Also take OTLP traces over gRPC on this port (verl's MLflow traces, vLLM, any SDK; extra rl-insight[grpc]). "
        "0: off; OTLP/HTTP at /v1/traces is always on.", min=0, max=65535)
    # Live export of every run's scalars and insight metrics (extras rl-insight[tensorboard] / [wandb])
    export_tensorboard: str | None = option(
        None,
        "Write every run's scalars and insight metrics as TensorBoard events under DIR/<project>/<experiment> (extra "
        "rl-insight[tensorboard]).", metavar="DIR")
    export_wandb: bool = option(
        False,
        "One W&B run per run, resumed across restarts (extra rl-insight[wandb]; WANDB_MODE=offline for `wandb sync`).")
    wandb_project: str | None = option(None, "W&B project (default: the run's project).")
    wandb_entity: str | None = option(None, "W&B entity.")
    wandb_dir: str | None = None  # default <data_dir>/wandb
    # Profile uploads are analysed in a child process bounded by these (analysis/isolated.py)
    profile_analysis_timeout_s: float = 600.0
    profile_analysis_max_memory_bytes: int = 8 * 2**30
    # Slow or idle peers (server/http/slow_peers.py): seconds to send a request's headers, and to send its body
    # (after which the connection is closed), and the most connections held at once (past it new ones are closed)
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_connections: int = option(
        2048,
        "Client connections the ingest server holds at once (about one per training process; past it new ones are "
        "closed and counted). See docs/scale.md.", min=16)
    # How long a connection may sit idle between requests. Longer than a client's idle heartbeat (10 s), so a quiet
    # process keeps its connection instead of opening a new one for every heartbeat or step (uvicorn's own is 5 s)
    keep_alive_s: float = option(
        20.0, "Seconds a client's connection may sit idle before the server closes it (longer than the clients' 10 s "
        "heartbeat keeps idle ones open).", min=1)
    http_parser: str = "auto"  # uvicorn's HTTP/1.1 parser: "httptools" (C, where installed; "auto"), or "h11"
    event_loop: str = "auto"  # uvicorn's event loop: "uvloop" (where installed; "auto"), or "asyncio"
    # Stack snapshots taken by the server itself (rooms/stacks/stall_watch.py): when the stalled-lane insight fires,
    # or the run's step clock has not moved for stall_step_s (0: off); at most one episode per run per interval
    stall_snapshots: bool = option(
        True, "Take a stack snapshot of a run by itself when one of its lanes stalls or its step clock stops (see "
        "`rl-insight stacks`).", flag="--stall-snapshots/--no-stall-snapshots")
    stall_step_s: float = option(
        900.0, "Seconds without a new step before a run counts as stalled (0: only the stalled-lane insight).", min=0)
    stall_snapshot_interval_s: float = option(900.0, "At most one automatic stall episode per run this often.", min=60)
    stall_confirm_s: float = option(
        30.0, "A stall episode's second snapshot this long after the first: nobody moved, the run is hung.", min=1)
    auto_profile_on_stall: bool = option(
        False, "When a stalled run's stacks still move (slow, not stuck), profile its next step on the stalled lanes.")
    # Notifications (rooms/alerting/): the managed Alertmanager (None: notifications off),
    # the address the links in them use (None: the one `server start` prints), and how Alertmanager groups them
    alertmanager_url: str | None = None
    amtool: str | None = None  # amtool beside the managed Alertmanager (None: from PATH), to check receiver changes
    promtool: str | None = None  # promtool beside the managed Prometheus (None: from PATH), to check user rules
    public_url: str | None = option(
        None, "The server's address in the links notifications carry (default: the address start prints).",
        metavar="URL")
    alert_on_finish: bool = option(False, "Also notify when a run finishes.")
    alert_group_wait: str = option(
        "30s", "A notification waits this long for the run's other alerts to join it (e.g. 30s).")
    alert_group_interval: str = option(
        "5m",
        "A notified group (an alert and run) is told of changes, resolved included, at most this often (e.g. 5m).")
    alert_repeat_interval: str = option("4h", "A group still firing is notified again this often.")
    gpu_hour_cost: float | None = option(
        None, "What one device-hour costs (any currency): the goodput ledger prices each run and step with it "
        "(docs/ledger.md).", metavar="PRICE", min=0)
    # Ingest answers after the run store committed what it acknowledged; a slower store answers 503 (resend)
    ack_timeout_s: float = 10.0
    # Where the run store's writer runs: "process" (a child process of its own, with its own GIL: the event loop never
    # waits for the writer's Python work, runstore/writer_process.py) or "thread" (a thread of the server's process)
    store_writer: str = option(
        "process",
        "Where the run store's writer runs: a process of its own (the default: the ingest loop never waits on its GIL)"
        " or a thread of the server.", metavar="process|thread", choices=STORE_WRITERS)
    # The server process's garbage collector: "server" (start-up heap frozen, full collections rare:
    # server/http/gc_policy.py) or "python" (CPython's defaults)
    gc_policy: str = "server"  # one of GC_POLICIES

    @property
    def store_max_bytes(self) -> int:
        return int(self.store_max_gb * 2**30)

    @property
    def profiles_dir(self) -> Path:
        return Path(self.shared_dir or self.data_dir).expanduser() / "profiles"

    @property
    def store_file(self) -> Path:
        return Path(self.data_dir).expanduser() / "runstore.sqlite"

    @cached_property
    def store_location(self) -> StoreLocation:
        """`store` (or RL_INSIGHT_STORE_URL), else the SQLite file under data_dir; ConfigError for a bad URL. Parsed
        once, on first use (the one place a store URL given to the server is read)."""
        from .runstore.backend.location import STORE_URL_ENV, parse_store

        return parse_store(self.store or os.environ.get(STORE_URL_ENV), Path(self.data_dir).expanduser())

    @property
    def targets_file(self) -> Path:
        return Path(self.data_dir).expanduser() / "targets" / "rl-insight-targets.json"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_file(cls, path: str | Path) -> ServerConfig:
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except FileNotFoundError:
            raise ConfigError(
                f"server config {p} does not exist", hint="run `rl-insight server start` to create it"
            ) from None
        except ValueError as exc:
            raise ConfigError(f"server config {p} is not valid JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"server config {p} must hold a JSON object, found {type(raw).__name__}")
        raw = {RENAMED.get(k, k): v for k, v in raw.items()}
        if "store_max_bytes" in raw and isinstance(raw["store_max_bytes"], (int, float)):  # before store_max_gb
            raw["store_max_gb"] = raw.pop("store_max_bytes") / 2**30
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"server config {p} has unknown keys {unknown}; expected some of {sorted(known)}")
        for key in ("allowed_hosts", "trusted_proxy"):
            if key in raw:
                raw[key] = tuple(raw[key] or ())
        try:
            return cls(**raw)
        except TypeError as exc:
            raise ConfigError(f"server config {p} has a value of the wrong type: {exc}") from None
