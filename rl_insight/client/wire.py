"""Wire encoding of a batch (format: rl_insight/protocol.py), in bounded slices.

The exporter thread must never hold the GIL for long: a training loop (vLLM's scheduler, verl's
driver) that waits for it stalls. So a batch is built and JSON-encoded a slice at a time, and the
thread yields the GIL between slices (`time.sleep(0)`); gzip runs with the GIL released.
"""

from __future__ import annotations

import gzip
import json
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

from ..protocol import PROTOCOL_VERSION

SLICE = 64  # items encoded between two GIL releases (~0.1 ms of work)
_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode


class SeriesTable:
    """Series definitions of one batch; samples refer to them by index."""

    __slots__ = ("base", "entries", "index")

    def __init__(self, base_labels: dict[str, str]) -> None:
        self.base = base_labels
        self.entries: list[dict[str, Any]] = []
        self.index: dict[tuple, int] = {}

    def ref(self, kind: str, name: str, lkey: tuple, labels: dict, doc: str, bounds: Any = None, ns: str | None = None) -> int:
        key = (kind, name, lkey, ns)
        idx = self.index.get(key)
        if idx is None:
            merged = dict(self.base)
            for k, v in labels.items():
                merged[k] = v if isinstance(v, str) else str(v)
            entry: dict[str, Any] = {"k": kind, "n": name, "l": merged, "d": doc}
            if bounds is not None:
                entry["b"] = list(bounds)
            if ns:
                entry["ns"] = ns
            idx = self.index[key] = len(self.entries)
            self.entries.append(entry)
        return idx


def _encode_list(items: list) -> str:
    """`[a,b,…]` encoded in slices, yielding the GIL between them."""
    if len(items) <= SLICE:
        return _dumps(items)
    parts = []
    for i in range(0, len(items), SLICE):
        parts.append(_dumps(items[i:i + SLICE])[1:-1])
        time.sleep(0)
    return "[" + ",".join(p for p in parts if p) + "]"


def encode_batch(client: dict[str, Any], series: list[dict[str, Any]], samples: list, span_starts: list, spans: list,
                 final: bool) -> bytes:
    fields = [f'"v":{PROTOCOL_VERSION}', '"client":' + _dumps(client), '"series":' + _encode_list(series),
              '"samples":' + _encode_list(samples), '"span_starts":' + _encode_list(span_starts),
              '"spans":' + _encode_list(spans)]
    if final:
        fields.append('"final":true')
    return ("{" + ",".join(fields) + "}").encode()


def compress(body: bytes) -> tuple[bytes, dict[str, str]]:
    """gzip level 1 (zlib releases the GIL while compressing) for bodies worth it."""
    if len(body) <= 1024:
        return body, {}
    return gzip.compress(body, compresslevel=1), {"Content-Encoding": "gzip"}


def encode_json(payload: Any) -> bytes:
    return _dumps(payload).encode()
