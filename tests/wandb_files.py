"""Reads W&B's offline run files (`run-<id>.wandb`) the way `wandb sync` does: the W&B header, then
LevelDB-log framed records (32 KiB blocks; FULL / FIRST / MIDDLE / LAST), each a `wandb_internal_pb2.Record`.
wandb ships no Python reader any more (its core is in Go), so the tests carry this small one."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterator

BLOCK = 32768
HEADER = 7  # ":W&B" + magic (2) + version (1)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    pos, parts = HEADER, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            pos += left  # block trailer padding
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        if kind == FULL:
            parts = chunk
        elif kind == FIRST:
            parts = chunk
            continue
        elif kind == MIDDLE:
            parts += chunk
            continue
        elif kind == LAST:
            parts += chunk
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(parts)
        yield rec


def history(path: Path) -> list[dict[str, Any]]:
    """Every logged history row: {"_step": n, key: value, …}."""
    rows = []
    for rec in records(path):
        if rec.WhichOneof("record_type") == "history":
            row = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            if rec.history.HasField("step"):
                row.setdefault("_step", rec.history.step.num)
            rows.append(row)
    return rows


def run_info(path: Path) -> dict[str, Any]:
    for rec in records(path):
        if rec.WhichOneof("record_type") == "run":
            return {"run_id": rec.run.run_id, "project": rec.run.project, "display_name": rec.run.display_name,
                    "config": {i.key: json.loads(i.value_json) for i in rec.run.config.update}}
    return {}
