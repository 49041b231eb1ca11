"""Reading a request body with a size bound (declared and actual)."""

from __future__ import annotations

from fastapi import Request

from ...errors import PayloadTooLargeError


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"body of {declared} bytes exceeds the limit of {limit} bytes",
                                   hint="send smaller batches or raise max_body_bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"body exceeds the limit of {limit} bytes", hint="send smaller batches or raise max_body_bytes")
        chunks.append(chunk)
    return b"".join(chunks)
