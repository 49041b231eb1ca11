"""The one spelling of a run id: plain ASCII decimal, no sign, no leading zero, no separator, no padding, 1 to int64.

Invariant: the access check (security.Auth) and every route parameter that takes a run id (routing/params.py) read a
run id with `parse_run_id` alone, so the value a project check looked at is the value the route uses. Anything else
(`+2`, `2.0`, `%2B2`, `2_0`, ` 2`, `02`, `0x2`, `２`) is not a run id: 422, never another spelling of a run.
"""

from __future__ import annotations

import re
from typing import Any

from ...protocol import INT64_MAX

_RUN_ID = re.compile(r"[1-9][0-9]{0,18}")
MAX_RUN_IDS = 20  # run ids in one comparison (`runs=1,2,3`)


def parse_run_id(text: str) -> int | None:
    """The run id `text` spells, or None when it is not one (see the module docstring)."""
    if not isinstance(text, str) or not _RUN_ID.fullmatch(text):
        return None
    value = int(text)
    return value if value <= INT64_MAX else None


def parse_run_id_list(text: str) -> list[int] | None:
    """`1,2,3` (1 to MAX_RUN_IDS ids, nothing else between them), or None."""
    parts = text.split(",") if isinstance(text, str) else []
    ids = [parse_run_id(p) for p in parts]
    if not 1 <= len(ids) <= MAX_RUN_IDS or any(i is None for i in ids):
        return None
    return [i for i in ids if i is not None]


def strict_run_id(value: Any) -> int:
    """A pydantic `BeforeValidator`: a JSON integer (not a bool, not a float) or the text of one run id."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= INT64_MAX:
        return value
    parsed = parse_run_id(value) if isinstance(value, str) else None
    if parsed is None:
        raise ValueError(f"a run id is a plain decimal number from 1 to {INT64_MAX} (e.g. 12), found "
                         f"{str(value)[:40]!r}")
    return parsed


def json_run_id(value: Any) -> int:
    """A pydantic `BeforeValidator` for a run id in a JSON body: a JSON integer (`12`, or `12.0`, which JSON Schema
    counts as one), or the plain decimal text of one. (In a path or query, text is all there is: `strict_run_id`.)"""
    if isinstance(value, float) and value.is_integer() and 1 <= value <= 2**53:
        return int(value)
    return strict_run_id(value)
