"""The process's open-file limit, fitted to the connections the server is configured to hold.

Every client connection is a descriptor, and a kept-alive one stays open between a process's batches. Many hosts
start services with a soft `RLIMIT_NOFILE` of 1,024, below the default `max_connections` (2,048): past it `accept()`
fails with EMFILE and asyncio stops accepting for a second at a time, logging each — long before the connection
guard's own limit, and without its count on `/metrics`. At start the soft limit is raised (never lowered) to fit
`max_connections` plus a reserve for the run store, logs, child pipes and outbound connections, as far as the hard
limit allows; where the hard limit is lower, one warning names both numbers and what to change.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# descriptors besides client connections: the run store (and its WAL), logs, the analysis children's pipes, the
# server's own connections to Prometheus, Tempo and PostgreSQL
RESERVE = 256


def fit_open_files(max_connections: int) -> int | None:
    """Raise the soft open-file limit to `max_connections + RESERVE` where it is lower (up to the hard limit).
    Returns the client connections the limit now leaves room for, or None where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + RESERVE
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
        except (ValueError, OSError) as exc:  # e.g. a container that forbids it
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, new, exc)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    room = max(0, soft - RESERVE)
    if room < max_connections:
        log.warning("the open-file limit (%d, hard limit %d) leaves room for %d client connections, not "
                    "max_connections %d: raise the hard limit (ulimit -Hn, LimitNOFILE= in a systemd unit, "
                    "nofile in /etc/security/limits.conf) or lower --max-connections",
                    soft, hard, room, max_connections)
    return min(room, max_connections)
