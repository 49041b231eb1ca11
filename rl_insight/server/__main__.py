"""`python -m rl_insight.server --config FILE`: run the ingest server in the foreground.

This is the command the supervisor spawns (its command line identifies our process in pid
checks). It binds the socket itself so that a busy port is a clear error, not a uvicorn traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from typing import Any

from ..errors import ConfigError, PortInUseError, RLInsightError
from .config import ServerConfig
from .http.fd_limit import fit_open_files
from .http.gc_policy import GC_POLICIES, fit_collector
from .http.net import bind_socket, port_is_free
from .http.slow_peers import PeerGuardCounters, guarded_protocol
from .outbound.otlp import require_grpc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_insight.server")
    parser.add_argument("--config", required=True, help="server config JSON written by `rl-insight server start`")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # httpx logs every request at INFO: the server's own polls of Prometheus would fill the log
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        config = ServerConfig.from_file(args.config)
        fit_open_files(config.max_connections)
        if config.gc_policy not in GC_POLICIES:
            raise ConfigError(f"gc_policy {config.gc_policy!r} is not one of {', '.join(GC_POLICIES)}")
        sock = bind_socket(config.host, config.port)
        if config.otlp_intake_grpc_port:  # its errors before uvicorn's start, as clear as the main port's
            require_grpc()
            if not port_is_free(config.host, config.otlp_intake_grpc_port):
                raise PortInUseError(
                    f"port {config.otlp_intake_grpc_port} (OTLP/gRPC intake) on {config.host} is already in use",
                    hint="choose another --otlp-intake-grpc-port; Tempo's own OTLP receiver uses 4317",
                )
        import uvicorn

        from .app import create_app

        app = create_app(config)
        fit_collector(config.gc_policy)  # after the app is built: its start-up heap is what gets frozen
        server = uvicorn.Server(uvicorn_config(app, config, counters=app.state.st.peer_guard, log_level=args.log_level))
        server.run(sockets=[sock])
    except RLInsightError as exc:
        print(f"rl-insight server: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def uvicorn_config(app: object, config: ServerConfig, counters: PeerGuardCounters | None = None, **kw: object) -> Any:
    """uvicorn as the server runs it: slow or idle peers bounded (server/http/slow_peers.py), on the configured
    HTTP parser and event loop."""
    import uvicorn

    protocol = guarded_protocol(config.header_timeout_s, config.body_timeout_s, config.max_connections,
                                counters=counters, parser=config.http_parser)
    if config.event_loop not in ("auto", "asyncio", "uvloop"):
        raise ConfigError(f"event_loop {config.event_loop!r} is not one of auto, asyncio, uvloop")
    if config.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise ConfigError("event_loop 'uvloop' needs the uvloop package (pip install uvloop), or use 'asyncio'")
    if not config.keep_alive_s > 0:
        raise ConfigError(f"keep_alive_s {config.keep_alive_s!r} must be a number of seconds above 0")
    return uvicorn.Config(app, access_log=False, timeout_graceful_shutdown=5, timeout_keep_alive=config.keep_alive_s,  # type: ignore[arg-type]  # uvicorn's stubs: `http` also takes a protocol class
                          http=protocol, loop=config.event_loop, **kw)  # type: ignore[arg-type]  # uvicorn's stubs: the keyword options are typed narrower than accepted


if __name__ == "__main__":
    sys.exit(main())
