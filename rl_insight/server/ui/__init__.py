"""The built-in web UI: static files shipped in the wheel (no CDN), served by the ingest server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"


def mount_ui(app: FastAPI, require_read: Any) -> None:
    # The page and its assets hold no run data; the API calls they make are authenticated.
    # before the /ui mount, which would otherwise answer this path with a 404
    @app.get("/ui/palette.json", include_in_schema=False)
    async def palette() -> dict:
        """Stage colours shared with the offline HTML and PNG (rl_insight/semantics/palette.py)."""
        from ...semantics.palette import as_json

        return as_json()

    app.mount("/ui", StaticFiles(directory=STATIC), name="ui")

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})
