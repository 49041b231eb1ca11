"""One TLS context per process for the monitor's own HTTP clients (the server's calls to Prometheus and
Alertmanager, its probes and deliveries, the supervisor's readiness polls, the CLI's requests).

httpx builds a context for every client it makes, loading the CA bundle each time: 46 ms of CPU (2026-12-08, this
project's machine), paid by every panel request and every probe, though most of these calls are plain HTTP on the
loopback. Invariant: the context verifies as httpx's default does (certifi's bundle; with `trust_env`, the
`SSL_CERT_FILE` / `SSL_CERT_DIR` named when it is first asked for); it is built once per setting and never changed
after (httpcore sets the same ALPN protocols on it for every HTTP/1.1 connection).
"""

from __future__ import annotations

import functools
import ssl


@functools.cache
def verified(trust_env: bool = False) -> ssl.SSLContext:
    """The process's verifying client context (for httpx's `verify=`)."""
    import httpx  # (here: the training client never loads this module's callers, nor httpx)

    return httpx.create_ssl_context(verify=True, trust_env=trust_env)
