"""Fan trace files out over a Ray cluster (what verl users already run): one task per file.

The files must be readable at the same path on the cluster's nodes (a shared file system, as verl's
`global_profiler.save_path` usually is); each task returns the file's columns whole, so the event
table equals the local one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import MissingExtraError, ServiceError


def run_on_ray(tasks: list[tuple[Path, Any, Path | None, tuple[str, ...]]], address: str,
               parse: Callable[..., Any]) -> Iterable[Any]:
    """`parse(*task)` for each task on the Ray cluster at `address`, results in task order (load.py passes its
    `parse_file`: the workers import it by name)."""
    try:
        import ray
    except ImportError:
        raise MissingExtraError("--ray needs Ray in this environment", hint='pip install "ray[default]"') from None
    _reachable(address)
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=address, log_to_driver=False, include_dashboard=False, ignore_reinit_error=True)
        except Exception as exc:  # ConnectionError, a bad address, a version mismatch
            raise ServiceError(
                f"cannot connect to the Ray cluster at {address!r}: {exc}",
                hint="start one with `ray start --head`, or pass its address (ray://host:10001 or host:6379)",
            ) from None
    try:
        remote = ray.remote(num_cpus=1, max_retries=1)(parse)
        refs = [remote.remote(*t) for t in tasks]
        for ref in refs:  # in task order: the same table as a local run
            yield ray.get(ref)
    finally:
        if started_here:
            ray.shutdown()


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a `host:port` (or ray://host:port) nobody listens on: Ray itself retries for minutes."""
    import socket

    if address == "auto" or address.startswith("local"):
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ServiceError(f"Ray address {address!r} is not host:port, ray://host:port or 'auto'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ServiceError(
            f"cannot connect to the Ray cluster at {address!r}: {exc.strerror or exc}",
            hint="start one with `ray start --head`, or pass its address (ray://host:10001 or host:6379)",
        ) from None
