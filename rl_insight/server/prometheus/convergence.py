"""After an experiment is archived or restored: whether Prometheus' active targets came to reflect it (it re-reads
the file_sd file within seconds), as upstream reports `prometheus_converged`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .answers import Experiment
from .probe import ServiceProbe


async def prometheus_convergence(prometheus: ServiceProbe, row: Experiment, timeout_s: float = 15.0) -> dict[str, Any]:
    if prometheus.url is None:
        return {"prometheus_converged": None, "prometheus_message": "no Prometheus is managed by this server"}
    want_present = row["state"] == "active" and row["target_count"] > 0
    deadline = time.monotonic() + timeout_s
    silent_until = time.monotonic() + 2.0  # a Prometheus that answers nothing for 2 s is down, not converging
    while True:
        active = await prometheus.active_targets()
        if active is None and time.monotonic() > silent_until:
            return {"prometheus_converged": False,
                    "prometheus_message": f"Prometheus at {prometheus.url} does not answer: it applies the "
                                          "change when it is back (the file_sd file is written)"}
        if active is not None:
            silent_until = deadline
            mine = [t for t in active if t.get("project") == row["project"]
                    and t.get("experiment_name") == row["experiment_name"]]
            if bool(mine) == want_present:
                return {"prometheus_converged": True}
        if time.monotonic() > deadline:
            return {
                "prometheus_converged": False,
                "prometheus_message": "Prometheus did not reflect the change within %.0f s (it re-reads file_sd "
                                      "files periodically)"
                % timeout_s,
            }
        await asyncio.sleep(0.5)
