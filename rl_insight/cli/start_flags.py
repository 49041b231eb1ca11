"""The flags of `rl-insight server start` (cli/stack.py), one type alias each, grouped by what they configure.

Each flag's name is the `ServerConfig` or `StackSettings` field it sets (tests/unit/cli/test_options_once.py checks
it), and its default is that field's default, given where `start` declares the parameter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import env
from ..server.config import INSIGHTS_WORKERS, STORE_WRITERS


def _one_of(value: str, allowed: tuple[str, ...], flag: str) -> str:
    if value not in allowed:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(allowed)}", param_hint=flag)
    return value


# How this command runs
DetachFlag = Annotated[bool, typer.Option('--detach', '-d', help='Run in the background and return once ready.')]
AttachLogsFlag = Annotated[
    bool,
    typer.Option(
        '--attach-logs',
        help="In the foreground, also print every service's log lines prefixed with [service] (not with --detach).",
    ),
]
DataDirFlag = Annotated[
    Optional[Path],
    typer.Option(
        '--data-dir',
        help=(
            "Where the run store, TSDB, traces and Grafana keep data (default <home>/data; upstream's server.data_dir)."
        ),
    ),
]
LogDirFlag = Annotated[
    Optional[Path], typer.Option('--log-dir', help='Directory for service logs (default <home>/logs).')
]
ReadyTimeoutFlag = Annotated[float, typer.Option(help='Seconds to wait for each service to become ready.')]
AutoPortFlag = Annotated[
    bool, typer.Option('--auto-port', help='Pick free ports for every service whose port is busy.')
]

# The ingest server
HostFlag = Annotated[str, typer.Option(help='Ingest server bind address.')]
PortFlag = Annotated[int, typer.Option(help='Ingest server port.')]
MaxConnectionsFlag = Annotated[
    int,
    typer.Option(
        '--max-connections',
        min=16,
        help=(
            "Client connections the ingest server holds at once (about one per training process; past it new ones are"
            " closed and counted). See docs/scale.md."
        ),
    ),
]
KeepAliveSFlag = Annotated[
    float,
    typer.Option(
        '--keep-alive-s',
        min=1,
        help=(
            "Seconds a client's connection may sit idle before the server closes it (longer than the clients' 10 s "
            "heartbeat keeps idle ones open)."
        ),
    ),
]
StoreWriterFlag = Annotated[
    str,
    typer.Option(
        '--store-writer',
        metavar='|'.join(STORE_WRITERS),
        callback=lambda v: _one_of(v, STORE_WRITERS, '--store-writer'),
        help=(
            "Where the run store's writer runs: a process of its own (the default: the ingest loop never waits on its"
            " GIL) or a thread of the server."
        ),
    ),
]
InsightsWorkerFlag = Annotated[
    str,
    typer.Option(
        '--insights-worker',
        metavar='|'.join(INSIGHTS_WORKERS),
        callback=lambda v: _one_of(v, INSIGHTS_WORKERS, '--insights-worker'),
        help=(
            "Where the insight metrics are computed: a process of their own (the default: a round never holds the "
            "ingest loop's GIL) or a thread of the server."
        ),
    ),
]
AllowedHostsFlag = Annotated[
    list[str],
    typer.Option(
        '--allowed-host',
        metavar='NAME',
        help=(
            "Another name clients use for this server (DNS name behind a proxy); without a token, requests for other "
            "Host names are refused (DNS-rebinding defence). Repeatable."
        ),
    ),
]
TokenFlag = Annotated[
    Optional[str],
    typer.Option(
        '--token',
        envvar=env.TOKEN,
        help='Bearer token for state-changing routes (default: generated when not on loopback).',
    ),
]
NoTokenFlag = Annotated[
    bool, typer.Option('--no-token', help='Accept writes without a token even on a network address.')
]
MetricsTokenFlag = Annotated[
    str,
    typer.Option(
        '--metrics-token',
        envvar=env.METRICS_TOKEN,
        help=(
            "Bearer token /metrics needs (it names every run): the managed Prometheus is given it. Default: /metrics "
            "open, like Prometheus exporters."
        ),
    ),
]

# Single sign-on through the proxy a company runs (docs/access.md)
TrustedProxyFlag = Annotated[
    list[str],
    typer.Option(
        '--trusted-proxy',
        metavar='CIDR',
        help=(
            "A network the signing-in proxy (oauth2-proxy, an ingress) connects from: its --user-header is believed "
            "from there only, ignored from anywhere else. Repeatable. Needs a token (one is generated)."
        ),
    ),
]
UserHeaderFlag = Annotated[
    str, typer.Option('--user-header', metavar='HEADER', help='The header the proxy names the signed-in person in.')
]
GroupsHeaderFlag = Annotated[
    Optional[str],
    typer.Option('--groups-header', metavar='HEADER', help="The header the proxy lists the person's groups in."),
]
AccessMapFlag = Annotated[
    Optional[str],
    typer.Option(
        '--access-map',
        metavar='FILE',
        help="YAML: users and groups -> role and projects (docs/access.md); read again when it changes.",
    ),
]

# The run store
StoreFlag = Annotated[
    Optional[str],
    typer.Option(
        '--store',
        envvar=env.STORE_URL,
        metavar='URL',
        help=(
            "The run store: postgresql://user@host:port/db (extra rl-insight[postgres]; the password from "
            "RL_INSIGHT_STORE_PASSWORD, ~/.pgpass or ?passfile=, never in the URL) or sqlite:///FILE (default: a "
            "SQLite file under --data-dir). See docs/scale.md."
        ),
    ),
]
SharedDirFlag = Annotated[
    Optional[str],
    typer.Option(
        '--shared-dir',
        metavar='DIR',
        help=(
            "A directory every server of a fleet mounts (NFS, Lustre): profile traces and their analyses, which any "
            "server then serves (default: --data-dir). See docs/scale.md."
        ),
    ),
]
StoreRetentionDaysFlag = Annotated[
    float, typer.Option(min=0.01, help='Run store: delete runs not seen for this many days.')
]
StoreMaxGbFlag = Annotated[
    float, typer.Option(min=0.01, help='Run store: delete the oldest runs while the file is larger.')
]

# Prometheus
PrometheusFlag = Annotated[
    bool, typer.Option('--prometheus/--no-prometheus', help='Run Prometheus (--no-prometheus: only the ingest server).')
]
PrometheusBinFlag = Annotated[Optional[str], typer.Option('--prometheus-bin', help='Prometheus binary to use.')]
PrometheusUrlFlag = Annotated[
    Optional[str],
    typer.Option(
        '--prometheus-url',
        metavar='URL',
        help=(
            "The Prometheus-compatible query endpoint the UI's panels, alert history and Grafana read "
            "(VictoriaMetrics, Mimir, Thanos; with --remote-write-url sending it the managed Prometheus's data). "
            "Default: the managed Prometheus."
        ),
    ),
]
PrometheusHostFlag = Annotated[str, typer.Option(help='Prometheus bind address (loopback by default).')]
PrometheusPortFlag = Annotated[int, typer.Option(help='Prometheus port.')]
ScrapeIntervalFlag = Annotated[str, typer.Option(help='Prometheus scrape interval.')]
RetentionFlag = Annotated[str, typer.Option(help='Prometheus TSDB retention time.')]
RemoteWriteUrlFlag = Annotated[
    Optional[str], typer.Option(help='Prometheus remote_write URL (Mimir, Thanos, VictoriaMetrics).')
]

# Notifications (Alertmanager)
AlertmanagerFlag = Annotated[
    bool,
    typer.Option('--alertmanager/--no-alertmanager',
                 help='Run Alertmanager (when installed): notifications to webhooks, Slack and email '
                      '(docs/alerts.md).'),
]
AlertmanagerBinFlag = Annotated[
    Optional[str],
    typer.Option('--alertmanager-bin', help='Alertmanager binary to use (Debian: prometheus-alertmanager).')
]
AlertmanagerHostFlag = Annotated[str, typer.Option(help='Alertmanager bind address (loopback by default: its API is '
                                                        'not authenticated).')]
AlertmanagerPortFlag = Annotated[int, typer.Option(help='Alertmanager port.')]
PublicUrlFlag = Annotated[
    Optional[str],
    typer.Option('--public-url', metavar='URL',
                 help="The server's address in the links notifications carry (default: the address start prints)."),
]
AlertOnFinishFlag = Annotated[bool, typer.Option('--alert-on-finish', help='Also notify when a run finishes.')]
AlertGroupWaitFlag = Annotated[
    str, typer.Option(help="A notification waits this long for the run's other alerts to join it (e.g. 30s).")
]
AlertGroupIntervalFlag = Annotated[
    str, typer.Option(help='A notified group (an alert and run) is told of changes, resolved included, at most this '
                           'often (e.g. 5m).')
]
AlertRepeatIntervalFlag = Annotated[str, typer.Option(help='A group still firing is notified again this often.')]

GpuHourCostFlag = Annotated[
    Optional[float],
    typer.Option('--gpu-hour-cost', min=0, metavar='PRICE',
                 help='What one device-hour costs (any currency): the goodput ledger prices each run and step with it '
                      '(docs/ledger.md).'),
]

# Tempo and OTLP
TempoFlag = Annotated[bool, typer.Option('--tempo/--no-tempo', help='Run Tempo (when installed).')]
TempoBinFlag = Annotated[Optional[str], typer.Option('--tempo-bin', help='Tempo binary to use.')]
TempoHostFlag = Annotated[str, typer.Option(help='Tempo HTTP API bind address.')]
TempoPortFlag = Annotated[int, typer.Option(help='Tempo HTTP API port.')]
TempoRetentionFlag = Annotated[str, typer.Option(help='Tempo block retention.')]
OtlpHostFlag = Annotated[str, typer.Option(help="Tempo OTLP receivers' bind address (0.0.0.0 to accept other hosts).")]
OtlpGrpcPortFlag = Annotated[int, typer.Option(help='Tempo OTLP gRPC port.')]
OtlpHttpPortFlag = Annotated[int, typer.Option(help='Tempo OTLP HTTP port.')]
OtlpEndpointFlag = Annotated[
    Optional[str], typer.Option(help='Forward spans to this OTLP receiver instead of a managed Tempo.')
]
OtlpProtocolFlag = Annotated[str, typer.Option(help='http/protobuf or grpc.')]
OtlpIntakeGrpcPortFlag = Annotated[
    int,
    typer.Option(
        '--otlp-intake-grpc-port',
        min=0,
        max=65535,
        help=(
            "Also take OTLP traces over gRPC on this port (verl's MLflow traces, vLLM, any SDK; extra "
            "rl-insight[grpc]). 0: off; OTLP/HTTP at /v1/traces is always on."
        ),
    ),
]

# Grafana
GrafanaFlag = Annotated[bool, typer.Option('--grafana/--no-grafana', help='Run Grafana (when installed).')]
GrafanaBinFlag = Annotated[
    Optional[str], typer.Option('--grafana-bin', help='Grafana binary to use (grafana or grafana-server).')
]
GrafanaHostFlag = Annotated[str, typer.Option(help='Grafana bind address (behind its login).')]
GrafanaPortFlag = Annotated[int, typer.Option(help='Grafana port.')]
ExtraDashboardDirFlag = Annotated[
    Optional[Path],
    typer.Option('--extra-dashboard-dir', help='More Grafana dashboards (classic JSON) provisioned next to ours.'),
]

# Stalls
StallSnapshotsFlag = Annotated[
    bool,
    typer.Option(
        '--stall-snapshots/--no-stall-snapshots',
        help=(
            "Take a stack snapshot of a run by itself when one of its lanes stalls or its step clock stops (see "
            "`rl-insight stacks`)."
        ),
    ),
]
StallStepSFlag = Annotated[
    float,
    typer.Option(
        '--stall-step-s',
        min=0,
        help='Seconds without a new step before a run counts as stalled (0: only the stalled-lane insight).',
    ),
]
StallSnapshotIntervalSFlag = Annotated[
    float,
    typer.Option('--stall-snapshot-interval-s', min=60, help='At most one automatic stall episode per run this often.'),
]
StallConfirmSFlag = Annotated[
    float,
    typer.Option('--stall-confirm-s', min=1,
                 help="A stall episode's second snapshot this long after the first: nobody moved, the run is hung."),
]
AutoProfileOnStallFlag = Annotated[
    bool,
    typer.Option(
        '--auto-profile-on-stall',
        help="When a stalled run's stacks still move (slow, not stuck), profile its next step on the stalled lanes.",
    ),
]

# Exports
ExportTensorboardFlag = Annotated[
    Optional[Path],
    typer.Option(
        '--export-tensorboard',
        metavar='DIR',
        help=(
            "Write every run's scalars and insight metrics as TensorBoard events under DIR/<project>/<experiment> "
            "(extra rl-insight[tensorboard])."
        ),
    ),
]
ExportWandbFlag = Annotated[
    bool,
    typer.Option(
        '--export-wandb',
        help=(
            "One W&B run per run, resumed across restarts (extra rl-insight[wandb]; WANDB_MODE=offline for `wandb "
            "sync`)."
        ),
    ),
]
WandbProjectFlag = Annotated[
    Optional[str], typer.Option('--wandb-project', help="W&B project (default: the run's project).")
]
WandbEntityFlag = Annotated[Optional[str], typer.Option('--wandb-entity', help='W&B entity.')]
