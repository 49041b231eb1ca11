"""Bounded request parameters shared by the routers: out-of-range values are a 422, never a 500.

A run id, wherever a route takes one (path, query, body), is read by `access/run_ids.strict_run_id`, the same function
the access check reads it with: one spelling, one value (issue 64).
"""

from __future__ import annotations

from typing import Annotated, Optional

import annotated_types as at
from fastapi import Path, Query
from pydantic import BeforeValidator

from ...protocol import INT64_MAX
from ..access.run_ids import json_run_id, strict_run_id

# the bounds ahead of the validator: so they are checked and stated in /openapi.json as minimum and maximum (after
# it, pydantic could only write them as unknown keys, and a schema fuzzer would send -7 as valid)
StrictRunId = Annotated[int, at.Ge(1), at.Le(INT64_MAX), BeforeValidator(strict_run_id)]
RunId = Annotated[StrictRunId, Path(description="run id (GET /api/v1/runs)")]
RunIdQuery = Annotated[StrictRunId, Query(description="run id (GET /api/v1/runs)")]
OptionalRunIdQuery = Annotated[Optional[StrictRunId], Query(description="only this run's")]
# a run id inside a JSON body: an integer (one every JSON reader holds exactly: at most 2^53 - 1; `12.0` is one to JSON
# Schema), or its plain decimal text
BodyRunId = Annotated[int, at.Ge(1), at.Le(2**53 - 1), BeforeValidator(json_run_id)]
FromNs = Annotated[Optional[int], Query(ge=0, le=INT64_MAX, description="window start, epoch ns")]
ToNs = Annotated[Optional[int], Query(ge=0, le=INT64_MAX, description="window end, epoch ns")]

