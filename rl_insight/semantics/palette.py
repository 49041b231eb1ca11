"""One colour per RL stage, the same in the live UI, the offline HTML timeline and the PNG.

verl's stages have fixed colours chosen to be distinct (generation green, weight sync orange,
actor update blue, …); any other name gets a colour from a fallback list by a stable hash of its
UTF-8 bytes (FNV-1a), which the UI's JavaScript computes identically (`/ui/palette.json` carries
both tables). Stdlib only: the client never imports it, the server and the analysis do.
"""

from __future__ import annotations

STAGES: dict[str, str] = {
    # generation (every engine)
    "vllm_generate": "#16a34a",
    "sglang_generate": "#16a34a",
    "omni_generate": "#16a34a",
    "generate_sequences": "#16a34a",
    "rollout": "#22c55e",
    "async_rollout": "#22c55e",
    # weight sync
    "update_weights": "#f97316",
    "sync_weights": "#f97316",
    "weight_sync": "#f97316",
    # training
    "train_batch": "#7c3aed",
    "actor_update": "#2563eb",
    "update_actor": "#2563eb",
    "forward_backward": "#1d4ed8",
    "actor_compute_log_prob": "#dc2626",
    "compute_log_prob": "#dc2626",
    "ref_compute_log_prob": "#0891b2",
    "compute_ref_log_prob": "#0891b2",
    "critic_update": "#db2777",
    "compute_values": "#ca8a04",
    "adv": "#a16207",
    "testing": "#64748b",
    "save_checkpoint": "#475569",
}
FALLBACK = [
    "#4f46e5",
    "#059669",
    "#b45309",
    "#be185d",
    "#0e7490",
    "#65a30d",
    "#9333ea",
    "#c2410c",
    "#0369a1",
    "#a21caf",
    "#15803d",
    "#b91c1c",
]
MIXED = "#9ca3af"  # several short events merged below the resolution
# Profiler operators and kernels (`aten::mm`, `ncclKernel…`): light tints, never a stage's saturated colour, so a
# timeline that holds both tells them apart at a glance (issue 64: they were drawn from the same list).
OPERATORS = [
    "#93c5fd",
    "#86efac",
    "#fca5a5",
    "#c4b5fd",
    "#fdba74",
    "#67e8f9",
    "#fde68a",
    "#f9a8d4",
    "#a5b4fc",
    "#6ee7b7",
    "#d9f99d",
    "#e9d5ff",
]


def fnv1a(text: str) -> int:
    h = 0x811C9DC5
    for b in text.encode("utf-8", "replace"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def color_of(name: str) -> str:
    return STAGES.get(name) or FALLBACK[fnv1a(name) % len(FALLBACK)]


def operator_color_of(name: str) -> str:
    """A profiler operator's or kernel's colour (a light tint, by the same stable hash)."""
    return OPERATORS[fnv1a(name) % len(OPERATORS)]


def as_json() -> dict[str, object]:
    return {"stages": STAGES, "fallback": FALLBACK, "mixed": MIXED}
