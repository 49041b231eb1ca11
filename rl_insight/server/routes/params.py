"""Bounded request parameters shared by the routers: out-of-range values are a 422, never a 500."""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import Path, Query

from ...protocol import INT64_MAX

RunId = Annotated[int, Path(ge=1, le=INT64_MAX, description="run id (GET /api/v1/runs)")]
FromNs = Annotated[Optional[int], Query(ge=0, le=INT64_MAX, description="window start, epoch ns")]
ToNs = Annotated[Optional[int], Query(ge=0, le=INT64_MAX, description="window end, epoch ns")]
