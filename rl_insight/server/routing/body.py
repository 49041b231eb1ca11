"""Request bodies: read with a size bound (declared and actual), gunzip'd without ever holding more than that
bound (a zip bomb is a 413), parsed as JSON with the nesting bounded; errors name the problem."""

from __future__ import annotations

import json
import zlib
from typing import Any

import msgspec
from fastapi import Request

from ...errors import MalformedBodyError, PayloadTooLargeError


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"body of {declared} bytes exceeds the limit of {limit} bytes",
                                   hint="send smaller batches or raise max_body_bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLargeError(f"body exceeds the limit of {limit} bytes", hint="send smaller batches or "
                                                                                        "raise max_body_bytes")
        chunks.append(chunk)
    return b"".join(chunks)


# msgspec decodes the usual body in about half json.loads' time (a thousand clients post a batch a second each). What
# it accepts, it reads as json.loads does; what it refuses (NaN, numbers past a float's range, lone surrogates,
# UTF-16, a BOM, deep nesting, and all that is malformed) goes to json.loads, so the stdlib's answer, or its error, is
# the one given: tests/unit/server/routing/test_body.py holds the two to the same values.
_fast_json = msgspec.json.Decoder().decode


def decode_body(raw: bytes, content_encoding: str | None, max_bytes: int) -> Any:
    """gunzip (bounded, against zip bombs) and parse JSON as json.loads does; errors name the problem."""
    raw = gunzip_bounded(raw, content_encoding, max_bytes)
    try:
        return _fast_json(raw)
    except (msgspec.DecodeError, RecursionError):
        pass  # not plain JSON to msgspec: the stdlib decides, and says why not
    try:
        return json.loads(raw)
    except RecursionError:
        raise MalformedBodyError("body is nested too deeply to be a valid request") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedBodyError(f"body is not valid JSON: {exc}") from None


def gunzip_bounded(raw: bytes, content_encoding: str | None, max_bytes: int) -> bytes:
    """The body as sent, or gunzip'd without ever holding more than `max_bytes` (a zip bomb is a 413)."""
    if content_encoding and content_encoding.lower() == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            raw = d.decompress(raw, max_bytes + 1)
        except zlib.error as exc:
            raise MalformedBodyError(f"body is not valid gzip: {exc}") from None
        if len(raw) > max_bytes or d.unconsumed_tail:
            raise PayloadTooLargeError(f"decompressed body exceeds the limit of {max_bytes} bytes",
                                       hint="send smaller batches or raise --max-body-bytes")
    elif content_encoding and content_encoding.lower() not in ("identity", ""):
        raise MalformedBodyError(f"unsupported Content-Encoding {content_encoding!r}; use gzip or none")
    return raw
