"""Bounded request parameters shared by the routers: out-of-range values are a 422, never a 500.

A run id, wherever a route takes one (path, query, body), is read by `access/run_ids.strict_run_id`, the same function
the access check reads it with: one spelling, one value (issue 64).
"""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import Path, Query
from pydantic import BeforeValidator

from ...protocol import INT64_MAX
from ..access.run_ids import strict_run_id

_STRICT = BeforeValidator(strict_run_id)
RunId = Annotated[int, _STRICT, Path(ge=1, le=INT64_MAX, description="run id (GET /api/v1/runs)")]
RunIdQuery = Annotated[int, _STRICT, Query(ge=1, le=INT64_MAX, description="run id (GET /api/v1/runs)")]
OptionalRunIdQuery = Annotated[Optional[int], _STRICT, Query(ge=1, le=INT64_MAX, description="only this run's")]
# a run id inside a JSON body: an integer, or its plain decimal text
BodyRunId = Annotated[int, _STRICT]
FromNs = Annotated[Optional[int], Query(ge=0, le=INT64_MAX, description="window start, epoch ns")]
ToNs = Annotated[Optional[int], Query(ge=0, le=INT64_MAX, description="window end, epoch ns")]

