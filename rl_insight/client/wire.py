"""Wire encoding of a batch (format: rl_insight/protocol/batch.py), in bounded slices.

The exporter thread must never hold the GIL for long: a training loop (vLLM's scheduler, verl's
driver) that waits for it stalls. So a batch is built and JSON-encoded a slice at a time, and the
thread yields the GIL between slices (`time.sleep(0)`); gzip runs with the GIL released.
"""

from __future__ import annotations

import gzip
import json
import time

from ..protocol import PROTOCOL_VERSION

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SLICE = 16  # items handled between two looks at the clock
# The longest the thread works before it lets the training thread have the GIL. Short turns keep the
# loop's tail latency (bench/bench_training_stall.py: 30 us -> p99 x1.19, 100 us -> x1.4, 400 us -> x1.75).
TURN_S = 0.00003
# With a large backlog the process is flooding us (it spends its time in the hot path anyway): longer
# turns then, so that delivery keeps up (bench/bench_client.py).
BACKLOG_ITEMS = 20_000
FLOOD_TURN_S = 0.002


class Yielder:
    """Gives the GIL away (`time.sleep(0)`, which blocks long enough for a waiting thread to take it)
    once about `turn_s` of work has been done since the last time."""

    __slots__ = ("_next", "_turn")

    def __init__(self, turn_s: float = TURN_S) -> None:
        self._turn = turn_s
        self._next = time.perf_counter() + turn_s

    @classmethod
    def for_backlog(cls, items: int) -> "Yielder":
        return cls(FLOOD_TURN_S if items >= BACKLOG_ITEMS else TURN_S)

    def __call__(self) -> None:
        now = time.perf_counter()
        if now >= self._next:
            time.sleep(0)
            self._next = time.perf_counter() + self._turn
_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode


class SeriesTable:
    """Series definitions of one batch; samples refer to them by index."""

    __slots__ = ("base", "entries", "index")

    def __init__(self, base_labels: dict[str, str]) -> None:
        self.base = base_labels
        self.entries: list[dict[str, Any]] = []
        self.index: dict[tuple, int] = {}

    def ref(
        self, kind: str, name: str, lkey: tuple, labels: dict, doc: str, bounds: Any = None, ns: str | None = None
    ) -> int:
        key = (kind, name, lkey, ns)
        idx = self.index.get(key)
        if idx is None:
            merged = {k: v if isinstance(v, str) else str(v) for k, v in labels.items()}
            merged.update(self.base)  # the run identity given to init() wins over a call's labels
            entry: dict[str, Any] = {"k": kind, "n": name, "l": merged, "d": doc}
            if bounds is not None:
                entry["b"] = list(bounds)
            if ns:
                entry["ns"] = ns
            idx = self.index[key] = len(self.entries)
            self.entries.append(entry)
        return idx


def _encode_list(items: list, pause: Yielder) -> str:
    """`[a,b,…]` encoded in slices, yielding the GIL between them."""
    if len(items) <= SLICE:
        return _dumps(items)
    parts = []
    for i in range(0, len(items), SLICE):
        parts.append(_dumps(items[i:i + SLICE])[1:-1])
        pause()
    return "[" + ",".join(p for p in parts if p) + "]"


def encode_batch(client: dict[str, Any], series: list[dict[str, Any]], samples: list, span_starts: list, spans: list,
                 final: bool, span_attrs: list | None = None, pause: Yielder | None = None) -> bytes:
    """Protocol 1, or 2 when `span_attrs` is given (spans are then compact lists indexing it)."""
    version = PROTOCOL_VERSION if span_attrs is None else 2
    pause = pause or Yielder()
    fields = [f'"v":{version}', '"client":' + _dumps(client), '"series":' + _encode_list(series, pause),
              '"samples":' + _encode_list(samples, pause), '"span_starts":' + _encode_list(span_starts, pause),
              '"spans":' + _encode_list(spans, pause)]
    if span_attrs is not None:
        fields.append('"span_attrs":' + _encode_list(span_attrs, pause))
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


def warm_up() -> None:
    """First-use costs (encoder set-up, zlib) paid in init(), not in the middle of training."""
    compress(encode_json({"warm": [1, 2.5, None, "x"]}) * 100)
    json.loads(b'{"accepted": 0, "protocols": [1]}')
