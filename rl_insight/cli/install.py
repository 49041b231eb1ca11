"""`rl-insight server install | bundle`: Prometheus, Tempo and Grafana, verified, from the internet, a mirror, or
a bundle carried into an air-gapped cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import env
from ..errors import InvalidInputError, RLInsightError
from ..services.home import Home
from .options import ConfigOpt, HomeOpt, apply_config_file, config_url, echo_table


def _progress_factory():
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    progress = Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(), transient=True
    )

    def make(label: str):
        task = progress.add_task(label, total=None)
        progress.start()

        def update(done: int, total: int | None) -> None:
            progress.update(task, completed=done, total=total)

        return update

    return progress, make


VersionOpt = lambda name: typer.Option(None, f"--{name}-version", help=f"{name} version (default: the catalog's).")  # noqa: E731 - an option factory, read where it is used


def install(
    ctx: typer.Context,
    config: Optional[Path] = ConfigOpt,
    local_archive: Optional[Path] = typer.Option(
        None, "--local-archive", help="A directory of release archives, or a bundle file from `server bundle`."
    ),
    mirror: Optional[str] = typer.Option(
        None, "--mirror", envvar=env.DOWNLOAD_MIRROR, help="URL template with {service} {version} {os} {arch} {asset}."
    ),
    force: bool = typer.Option(False, "--force", help="Reinstall even if the version is installed."),
    install_dir: Optional[Path] = typer.Option(None, "--install-dir", help="Default <home>/services."),
    check: bool = typer.Option(False, "--check", help="Only show what is found: service, version, source, status."),
    allow_unverified: bool = typer.Option(
        False, "--allow-unverified", help="Accept archives without an available checksum."
    ),
    platform: Optional[str] = typer.Option(
        None, help="linux-amd64, linux-arm64, darwin-amd64, darwin-arm64 (default: this host)."
    ),
    service: list[str] = typer.Option([], "--service", help="Only these services (repeatable)."),
    prometheus_version: Optional[str] = VersionOpt("prometheus"),
    alertmanager_version: Optional[str] = VersionOpt("alertmanager"),
    tempo_version: Optional[str] = VersionOpt("tempo"),
    grafana_version: Optional[str] = VersionOpt("grafana"),
    home: Optional[Path] = HomeOpt,
) -> int:
    """Install Prometheus, Alertmanager, Tempo and Grafana, verified, into <home>/services/<service>/<version>/."""
    from ..services.binaries import find_binary
    from ..services.catalog import CATALOG, current_platform
    from ..services.installer import Installer

    if config is not None:
        apply_config_file(ctx, config)
        install_dir = ctx.params["install_dir"]
    h = Home.resolve(home)
    target = Path(install_dir) if install_dir else h.install_dir
    names = service or list(CATALOG)
    for n in names:
        if n not in CATALOG:
            raise InvalidInputError(f"unknown service {n!r}; choose from {', '.join(CATALOG)}")
    if check:
        rows, ok = [], True
        for n in names:
            try:
                b = find_binary(n, target)
                rows.append([n, b.version_str, f"{b.source} ({b.path})", "ok"])
            except RLInsightError as exc:
                ok = False
                status = (
                    "unsupported"
                    if "unsupported" in exc.message
                    else ("too old" if "older" in exc.message else "missing")
                )
                rows.append([n, "-", "-", f"{status}: {exc.message.split(': ', 1)[-1][:90]}"])
        echo_table(rows, ["SERVICE", "VERSION", "SOURCE", "STATUS"])
        return 0 if ok else 1
    progress, make = _progress_factory()
    inst = Installer(target, platform=platform or current_platform(),
                     versions={"prometheus": prometheus_version, "alertmanager": alertmanager_version,
                               "tempo": tempo_version, "grafana": grafana_version},
                     local_archive=local_archive, mirror=mirror, force=force, allow_unverified=allow_unverified,
                     report=lambda m: typer.echo(f"[install] {m}", err=True), progress=make)
    try:
        results = [inst.install(n) for n in names]
    finally:
        progress.stop()
    echo_table([[r.service, r.version, r.status, r.sha256[:16] + "…", r.path] for r in results],
                ["SERVICE", "VERSION", "STATUS", "SHA256", "BINARY"])
    return 0


def bundle(
    output: Path = typer.Option(..., "--output", "-o", help="The bundle file to write (a tar)."),
    platform: list[str] = typer.Option([], "--platform", help="Repeatable; default: this host's platform."),
    mirror: Optional[str] = typer.Option(None, "--mirror", envvar=env.DOWNLOAD_MIRROR),
    local_archive: Optional[Path] = typer.Option(
        None, "--local-archive", help="Take archives from this directory when present."
    ),
    allow_unverified: bool = typer.Option(False, "--allow-unverified"),
    prometheus_version: Optional[str] = VersionOpt("prometheus"),
    alertmanager_version: Optional[str] = VersionOpt("alertmanager"),
    tempo_version: Optional[str] = VersionOpt("tempo"),
    grafana_version: Optional[str] = VersionOpt("grafana"),
    config: Optional[Path] = ConfigOpt,
) -> int:
    """On a machine with internet: download and verify every archive into one file for air-gapped clusters."""
    config_url(config)  # upstream's --config: validated; versions and URLs come from our catalog
    from ..services.catalog import current_platform
    from ..services.installer import make_bundle

    progress, make = _progress_factory()
    try:
        manifest = make_bundle(output, platform or [current_platform()],
                               versions={"prometheus": prometheus_version, "tempo": tempo_version,
                                         "grafana": grafana_version},
                               mirror=mirror, local_archive=local_archive, allow_unverified=allow_unverified,
                               report=lambda m: typer.echo(f"[bundle] {m}", err=True), progress=make)
    finally:
        progress.stop()
    echo_table([[a["service"], a["version"], a["platform"], a["sha256"][:16] + "…"] for a in manifest["archives"]],
                ["SERVICE", "VERSION", "PLATFORM", "SHA256"])
    typer.echo(f"Wrote {output} ({output.stat().st_size / 2**20:.1f} MiB) and {output.name}.sha256. On the cluster: "
               f"rl-insight server install --local-archive {output.name}")
    return 0
