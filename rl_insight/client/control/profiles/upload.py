"""The sender thread's half of profiling: statuses reported as they are queued, and a finished trace compressed
and uploaded in chunks (`PROFILE_CHUNK_BYTES`, at most `_CHUNKS_PER_CYCLE` per sender cycle so metric batches keep
flowing), resumed where the server says (409 with its size), given up after repeated failures (reported).
`ProfileController` (profiling.py) holds one `TraceUploader` and shares its lock with it."""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from ....protocol import PROFILE_CHUNK_BYTES, ROUTE_PROFILES, ProfileRequest
from ...ratelog import ratelog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

_CHUNKS_PER_CYCLE = 4  # MiB uploaded per sender cycle at most: metric batches keep flowing meanwhile


class _Upload:
    __slots__ = ("req", "json_path", "gz_path", "name", "offset", "total", "window")

    def __init__(self, req: ProfileRequest, json_path: str, name: str, window: dict[str, Any]) -> None:
        self.req = req
        self.json_path = json_path
        self.gz_path = json_path + ".gz"
        self.name = name
        self.offset = 0
        self.total = -1  # unknown until gzip'd
        self.window = window


class TraceUploader:
    """The sender thread's half of profiling: the statuses queued by the controller (`outbox`) and the one finished
    trace being uploaded (`current`, set by the controller under the shared `lock`); `report` is the controller's
    status function (an upload's end is a status too)."""

    def __init__(self, lock: threading.Lock, report: Callable[..., None]) -> None:
        self._lock = lock
        self._status = report
        self.outbox: deque[tuple[str, dict[str, Any]]] = deque(maxlen=64)  # (request id, status body) to send
        self.current: _Upload | None = None
        self._fails = 0
        self._next_try = 0.0
        self.traces_uploaded = 0

    def pump(self, transport: Any) -> None:
        """Statuses, then a few chunks of the trace being uploaded. Failures retry later (own backoff)."""
        if time.monotonic() < self._next_try:
            return
        from ... import wire
        from ...transport import TransportError

        try:
            while self.outbox:
                rid, body = self.outbox[0]
                resp = transport.post(f"{ROUTE_PROFILES}/{rid}/status", wire.encode_json(body), {})
                if resp.status == 429 or resp.status >= 500:
                    raise TransportError(f"HTTP {resp.status}")
                if resp.status >= 400:
                    ratelog.log(
                        30,
                        "profile-status",
                        "[rl-insight] profile status refused (HTTP %s): %.200s",
                        resp.status,
                        resp.body.get("detail"),
                    )
                self.outbox.popleft()
            if self.current is not None:
                self._send_chunks(transport)
            self._fails = 0
        except TransportError as exc:
            self._fails += 1
            self._next_try = time.monotonic() + min(30.0, 0.5 * 2 ** min(self._fails, 6))
            ratelog.log(30, "profile-pump", "[rl-insight] profile delivery failed (%s); retrying", exc)

    def _send_chunks(self, transport: Any) -> None:
        from ...transport import TransportError

        up = self.current
        assert up is not None
        if up.total < 0 and not self._compress(up):
            return
        with open(up.gz_path, "rb") as f:
            for _ in range(_CHUNKS_PER_CYCLE):
                f.seek(up.offset)
                chunk = f.read(PROFILE_CHUNK_BYTES)
                if not chunk:
                    break
                route = f"{ROUTE_PROFILES}/{up.req.id}/upload/{up.name}?offset={up.offset}&total={up.total}"
                resp = transport.post(route, chunk, {"Content-Type": "application/octet-stream"})
                if resp.status == 409 and type(resp.body.get("size")) is int and 0 <= resp.body["size"] <= up.total:
                    up.offset = resp.body[
                        "size"
                    ]  # the server has a different amount (a restart, a lost reply): resume there
                    continue
                if resp.status == 429 or resp.status >= 500:
                    raise TransportError(f"HTTP {resp.status}")
                if resp.status >= 400:
                    self._finish_upload(up, "failed", f"the server refused the upload (HTTP {resp.status}): "
                                                      f"{str(resp.body.get('detail'))[:300]}")
                    return
                up.offset += len(chunk)
                if resp.body.get("complete") or up.offset >= up.total:
                    self.traces_uploaded += 1
                    self._finish_upload(
                        up, "uploaded", f"{up.total:,} bytes (gzip) uploaded as {up.name}", file=up.name
                    )
                    return

    def _compress(self, up: _Upload) -> bool:
        """gzip the exported trace in 1 MiB pieces, giving the GIL back between them."""
        import zlib

        try:
            comp = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            with open(up.json_path, "rb") as src, open(up.gz_path, "wb") as dst:
                while True:
                    block = src.read(PROFILE_CHUNK_BYTES)
                    if not block:
                        break
                    dst.write(comp.compress(block))
                    time.sleep(0)
                dst.write(comp.flush())
            _remove(up.json_path)
            up.total = os.path.getsize(up.gz_path)
        except OSError as exc:
            self._finish_upload(up, "failed", f"compressing the trace failed: {exc!r:.300}")
            return False
        if up.total > up.req.max_bytes:
            self._finish_upload(
                up,
                "failed",
                f"the trace is {up.total / 2**20:.1f} MiB gzip'd, over the request's cap of "
                f"{up.req.max_bytes / 2**20:.1f} MiB; profile fewer steps or raise --max-bytes",
            )
            return False
        return True

    def _finish_upload(self, up: _Upload, state: str, message: str, file: str | None = None) -> None:
        with self._lock:
            self.current = None
        _remove(up.json_path)
        _remove(up.gz_path)
        self._status(up.req, state, message, window=up.window, file=file)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
