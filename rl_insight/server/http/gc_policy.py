"""The garbage collector, fitted to a server that holds a thousand requests in flight.

Why: an ingest answer waits for the run store's commit, so under load every request's objects (its coroutines,
the request and its headers, the decoded batch) live for tens to hundreds of milliseconds: long enough to survive
two young collections and land in the oldest generation. CPython then runs a full collection whenever that
generation grew by a quarter, here every second or so, and each one walks the whole heap (150,000-250,000
objects) with the event loop stopped: 0.15-0.25 s of CPU apiece on this 2-core machine, about a fifth of the
server's time, and a stall that every waiting answer pays. Measured with 1,000 clients at a batch a second
(bench/RESULTS.md, issue 24): 612 -> 827 batches/s, p99 1.13 s -> 0.51 s, 1.36 -> 0.89 ms of CPU a batch.

Policy (`fit_collector`, once, after the app is built and before the first request):
- one full collection, then `gc.freeze()`: the start-up heap (modules, routes, pydantic's models, the dashboards'
  definitions) lives as long as the process, so it leaves the collector's reach; later full collections walk only
  what the run made;
- the young generations keep CPython's thresholds, so short-lived cycles are still freed within milliseconds;
- a full collection only after FULL_AFTER_YOUNG collections of the middle generation instead of 10: about once a
  minute under that load, and CPython's own rule (the oldest generation grew by a quarter) still applies on top.

Invariant: cyclic garbage is still freed (young cycles at once, old ones within minutes); nothing is disabled.
`gc_policy: "python"` keeps CPython's defaults (a diagnostic, and the side-by-side baseline of bench_fanin.py).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

GC_POLICIES = ("server", "python")  # the config key gc_policy: ours (this module), or CPython's defaults
# middle-generation collections between two full ones (CPython's default: 10). At 1,000 clients the middle
# generation is collected ~20 times a second: one full collection a minute or so, each 0.1-0.2 s
FULL_AFTER_YOUNG = 1_000


def fit_collector(policy: str) -> tuple[int, int, int]:
    """Apply `policy` (one of GC_POLICIES) to this process's collector; returns the thresholds now in force."""
    if policy == "server":
        gc.collect()
        gc.freeze()
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, FULL_AFTER_YOUNG)
        log.debug("garbage collector: %d start-up objects frozen, thresholds %s", gc.get_freeze_count(),
                  gc.get_threshold())
    return gc.get_threshold()
