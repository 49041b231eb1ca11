"""torch.distributed's flight recorder, read for a stack answer: which collectives this rank entered and finished.

PyTorch keeps a ring buffer of every collective per rank when `TORCH_FR_BUFFER_SIZE` is set (NCCL's older
`TORCH_NCCL_TRACE_BUFFER_SIZE` too); `_dump_fr_trace_json` reads it from any thread, here the sender thread. The
answer carries each process group's wavefront (the last collective enqueued, started and completed, by sequence
number) and the newest entries (operation, sizes, state): enough for the server to say which rank never entered the
collective the others wait in, or entered a different one (server: semantics/collectives.py).

Invariants: torch is never imported here (a process that has not imported it has no recorder, and pays nothing); every
path ends in a `state` with a `message` saying why there is nothing (`no_torch`, `not_initialized`, `off`,
`failed`); at most MAX_FR_ENTRIES entries and MAX_FR_GROUPS groups, sizes cut (protocol/stacks.py bounds them again).
"""

from __future__ import annotations

import json
import os
import sys

from ....protocol.stacks import MAX_FR_DIMS, MAX_FR_ENTRIES, MAX_FR_GROUPS, MAX_FR_TENSORS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

BUFFER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
TURN_ON = ("set TORCH_FR_BUFFER_SIZE=2000 in the environment of every rank before torch.distributed starts (verl: "
           "in the Ray runtime env, docs/stacks.md)")


def _buffer_size() -> int:
    for name in BUFFER_VARIABLES:
        try:
            size = int(os.environ.get(name, "0") or 0)
        except ValueError:
            continue
        if size > 0:
            return size
    return 0


def _sizes(v: Any) -> list[list[int]]:
    out = []
    for shape in (v if isinstance(v, list) else [])[:MAX_FR_TENSORS]:
        if isinstance(shape, list):
            out.append([d for d in shape[:MAX_FR_DIMS] if type(d) is int])
    return out


def _entry(e: dict[str, Any]) -> dict[str, Any]:
    pg = e.get("process_group")
    return {"seq": e.get("collective_seq_id"), "p2p_seq": e.get("p2p_seq_id"), "p2p": e.get("is_p2p") is True,
            "op": str(e.get("profiling_name") or "?"), "pg": str(pg[0]) if isinstance(pg, list) and pg else "0",
            "state": str(e.get("state") or "?"), "retired": e.get("retired") is True,
            "in_sizes": _sizes(e.get("input_sizes")), "out_sizes": _sizes(e.get("output_sizes")),
            "dtypes": [str(d) for d in (e.get("input_dtypes") or [])[:MAX_FR_TENSORS]],
            "created_ns": e.get("time_created_ns") or 0}


def _seq(v: Any) -> int | None:
    try:
        n = int(v)
    except (TypeError, ValueError):
        return None
    return n if n >= 0 else None


def _groups(d: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each process group's wavefront by its id (`pg_status`; ids agree across ranks, which create groups in one
    order), named from its entries (`pg_config` is empty on gloo)."""
    status: dict[Any, Any] = d["pg_status"] if isinstance(d.get("pg_status"), dict) else {}
    names = {}
    for e in entries:
        pg = e.get("process_group")
        if isinstance(pg, list) and len(pg) >= 2:
            names[str(pg[0])] = str(pg[1])
    out: dict[str, dict[str, Any]] = {}
    for pg_id, st in list(status.items())[:MAX_FR_GROUPS]:
        if isinstance(st, dict):
            out[str(pg_id)] = {"name": names.get(str(pg_id), ""),
                               "enqueued": _seq(st.get("last_enqueued_collective")),
                               "started": _seq(st.get("last_started_collective")),
                               "completed": _seq(st.get("last_completed_collective"))}
    return out


def read() -> dict[str, Any]:
    """This process's flight-recorder evidence, or why there is none. Never raises."""
    if "torch" not in sys.modules:
        return {"state": "no_torch", "message": "torch is not imported in this process"}
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return {"state": "not_initialized", "message": "torch.distributed is not initialized in this process"}
        rank = dist.get_rank()
    except Exception as exc:
        return {"state": "failed", "message": f"torch.distributed: {type(exc).__name__}: {str(exc)[:300]}"}
    if not _buffer_size():
        return {"state": "off", "message": f"the flight recorder is off: {TURN_ON}", "rank": rank}
    try:
        from torch._C._distributed_c10d import _dump_fr_trace_json  # type: ignore[attr-defined,unused-ignore]

        d = json.loads(_dump_fr_trace_json(True, True))
    except Exception as exc:  # an older torch, or a backend without the recorder
        return {"state": "failed", "message": f"reading the flight recorder: {type(exc).__name__}: {str(exc)[:300]}",
                "rank": rank}
    entries = [e for e in (d.get("entries") or []) if isinstance(e, dict)]
    newest = entries[-MAX_FR_ENTRIES:]
    return {"state": "ok", "message": f"the newest {len(newest)} of {len(entries)} collective(s) recorded",
            "rank": rank, "groups": _groups(d, entries), "entries": [_entry(e) for e in newest]}
