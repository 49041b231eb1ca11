"""The HTML report's explain tables: each step's critical path with its what-if savings, and, with
`analyze --compare`, where the compared trace's time went (the sentence as the table's title). Rows link to the
timeline like every other table."""

from __future__ import annotations

from typing import Any, Callable


def explain_tables(result: dict[str, Any], ms: Callable[[int], float]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    r3 = lambda v: None if v is None else round(float(v), 4)  # noqa: E731 - a one-line formatter, read where used
    rows = []
    for p in result.get("critical_path", []):
        chain = " → ".join(f"{name} {lane} {sec:.3f}" for lane, name, sec in p["chain"])
        rows.append({"cells": [p["step"], r3(p["duration_s"]), chain, r3(p["bubbles_s"]), r3(p.get("tail_s")),
                               r3(p.get("cut10_s"))],
                     "lane": p["chain"][-1][0] if p["chain"] else None,
                     "from": ms(p["start_ns"]), "to": ms(p["end_ns"]),
                     "flag": bool(p["duration_s"]) and (p.get("tail_s") or 0) > 0.1 * p["duration_s"]})
    if rows:
        out.append({"id": "critical-path", "title": "Critical path per step (what the step waited on, in order: state "
                    "lane seconds) and what would save time (estimates, seconds; docs/explain.md)",
                    "columns": ["step", "duration", "critical path", "idle on the path", "tail with the others",
                                "slowest 10 % cut"], "rows": rows})
    d = result.get("compare")
    if d:
        whole = (ms(result["window"]["start_ns"]), ms(result["window"]["end_ns"])) if result.get("window") else (0, 0)
        rows = [{"cells": ["stage", k, r3(v)], "lane": None, "from": whole[0], "to": whole[1]}
                for k, v in list(d["by_stage"].items())[:8]]
        rows += [{"cells": ["lane class", k, r3(v)], "lane": None, "from": whole[0], "to": whole[1]}
                 for k, v in d["by_class"].items()]
        rows += [{"cells": ["lane", x["lane"], r3(x.get("generation_delta_s", x.get("busy_delta_s")))],
                  "lane": x["lane"], "from": whole[0], "to": whole[1]} for x in d["lanes"][:6]]
        out.append({"id": "compare", "title": f"Compared: {d['sentence']}", "columns": ["by", "what", "Δ a step (s)"],
                    "rows": rows})
    return out
