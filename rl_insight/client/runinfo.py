"""What `init(config=...)` tells about the run: a flat, bounded, redacted copy of the config and its tags.

verl passes its whole trainer config (an OmegaConf DictConfig) to `init`; the run page shows it so
a curve can be read next to the learning rate, batch size and engine settings that produced it.
Stdlib only, computed once at `init()`; anything odd in the config is skipped, never raised.

Secrets (rl_insight/redact.py): keys that name one are masked, credentials inside values are cut out,
command-line lists lose the values of their secret flags, and objects are never stored as `repr()` (a
dataclass is walked like a mapping; anything else is its type name), nor is what lies past the depth limit.
"""

from __future__ import annotations

from typing import Any

from ..redact import MASK, redact_args, redact_flat, secret_key

MAX_KEYS = 2000
MAX_KEY = 256
MAX_VALUE = 1024
MAX_TAGS = 64
MAX_TAG = 128
MAX_DEPTH = 12
TOO_DEEP = "<nested too deeply>"


def _scalar(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float)):
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2**53:
            return str(v)
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return str(v)  # JSON has no spelling for NaN/inf
        return v
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    # an object's repr() can hold anything (its fields' values, a secret among them): its type name only
    s = v if isinstance(v, str) else f"<{type(v).__name__}>"
    return s if len(s) <= MAX_VALUE else s[: MAX_VALUE - 1] + "…"


def _items(node: Any) -> list[tuple[Any, Any]] | None:
    """Mapping-like (dict, OmegaConf DictConfig) → items; a dataclass → its fields; sequence-like → indexed
    items; else None."""
    if isinstance(node, (str, bytes)):
        return None
    fields = getattr(type(node), "__dataclass_fields__", None)
    if isinstance(fields, dict) and not isinstance(node, type):
        return [(name, getattr(node, name, None)) for name in fields]
    if hasattr(node, "items"):
        try:
            return list(node.items())
        except Exception:  # OmegaConf: one unresolvable interpolation fails items()
            out = []
            for k in list(node.keys()) if hasattr(node, "keys") else []:
                try:
                    out.append((k, node[k]))
                except Exception:
                    out.append((k, "<unreadable>"))
            return out
    if isinstance(node, (list, tuple)) or (hasattr(node, "__len__") and hasattr(node, "__getitem__")):
        return list(enumerate(node))
    return None


def _inline_list(items: list) -> Any:
    """A short list of plain values as one value (reads better inline); a command line's secret flags' values go."""
    values = [str(_scalar(v)) for _, v in items]
    if any(v.startswith("-") for v in values):
        values = redact_args(values)
    return _scalar("[" + ", ".join(values) + "]")


def _walk(out: dict[str, Any], node: Any, prefix: str, depth: int) -> None:
    """`node`'s leaves into `out` under dotted keys, bounded in keys and depth; secrets masked."""
    if len(out) >= MAX_KEYS:
        return
    try:
        items = _items(node)
    except Exception:  # a broken __len__ or keys()
        out[(prefix or "config")[:MAX_KEY]] = "<unreadable>"
        return
    if items and depth >= MAX_DEPTH:
        out[(prefix or "config")[:MAX_KEY]] = TOO_DEEP
        return
    if items is None or not items:
        if prefix:
            out[prefix[:MAX_KEY]] = _scalar(node) if items is None else ("{}" if hasattr(node, "items") else "[]")
        return
    if all(not isinstance(k, str) for k, _ in items) and all(_items(v) is None for _, v in items):
        out[prefix[:MAX_KEY]] = _inline_list(items)
        return
    for k, v in items:
        _child(out, v, f"{prefix}.{k}" if prefix else str(k), depth)
        if len(out) >= MAX_KEYS:
            return


def _child(out: dict[str, Any], v: Any, key: str, depth: int) -> None:
    if secret_key(key):
        out[key[:MAX_KEY]] = MASK
        return
    try:
        _walk(out, v, key, depth + 1)
    except Exception:
        out[key[:MAX_KEY]] = "<unreadable>"


def flatten(config: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _walk(out, config, "", 0)
    return redact_flat(out)[0]  # credentials inside values; values of secret names in name/value lists


def _tags(config: Any) -> list[str]:
    found: list[str] = []
    for path in (("tags",), ("trainer", "tags"), ("run", "tags")):
        node = config
        try:
            for p in path:
                node = node.get(p) if hasattr(node, "get") else None
        except Exception:
            node = None
        if isinstance(node, str):
            node = [node]
        items = _items(node) if node is not None else None
        if items:
            found += [str(v)[:MAX_TAG] for _, v in items if isinstance(v, (str, int, float))]
    return list(dict.fromkeys(found))[:MAX_TAGS]


def describe(config: Any, env_tags: str = "") -> dict[str, Any] | None:
    """{"config": {dotted.key: scalar}, "tags": [...]}, or None when there is nothing to tell."""
    try:
        flat = flatten(config) if config is not None else {}
        tags = _tags(config) if config is not None else []
    except Exception:
        flat, tags = {}, []
    tags += [t.strip()[:MAX_TAG] for t in env_tags.split(",") if t.strip()]
    tags = list(dict.fromkeys(tags))[:MAX_TAGS]
    if not flat and not tags:
        return None
    return {"config": flat, "tags": tags}
