"""Read JSON objects out of raw bytes without decoding the rest: the complete objects of a damaged array
(a truncated trace) up to the first broken one, and the value of one top-level key.

Every function here is linear in the bytes it looks at: one forward scan, no backtracking regex.
"""

from __future__ import annotations

from typing import Any, Callable

_SPACE = b" \t\r\n"


def object_end(data: bytes, i: int, limit: int | None = None) -> int | None:
    """The index of the `}` that closes the object whose `{` is at `i` (strings and escapes respected), or
    None when the data ends first or the object is longer than `limit` bytes."""
    n = len(data) if limit is None else min(len(data), i + limit)
    depth, in_str, esc = 0, False, False
    j = i
    while j < n:
        c = data[j]
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:  # backslash
                esc = True
            elif c == 0x22:  # quote
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c == 0x7B:  # {
            depth += 1
        elif c == 0x7D:  # }
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return None


def _value_at(data: bytes, key: bytes) -> int | None:
    """Where the value of the first `"key":` in `data` begins (spaces skipped), or None."""
    at = data.find(b'"' + key + b'"')
    if at < 0:
        return None
    i, n = at + len(key) + 2, len(data)
    while i < n and data[i] in _SPACE:
        i += 1
    if i >= n or data[i] != 0x3A:  # ":"
        return None
    i += 1
    while i < n and data[i] in _SPACE:
        i += 1
    return i if i < n else None


def object_after_key(data: bytes, key: bytes, limit: int) -> bytes | None:
    """The raw object that is the value of the first `"key":` in `data` (at most `limit` bytes), or None.
    Only the first occurrence is tried: a damaged file full of the key costs one scan, not one per copy."""
    i = _value_at(data, key)
    if i is None or data[i] != 0x7B:  # "{"
        return None
    end = object_end(data, i, limit)
    return None if end is None else data[i: end + 1]


def int_after_key(data: bytes, key: bytes, max_digits: int = 20) -> int | None:
    """The non-negative integer value of the first `"key":` in `data`, or None."""
    i = _value_at(data, key)
    if i is None:
        return None
    j, n = i, len(data)
    while j < n and j - i <= max_digits and 0x30 <= data[j] <= 0x39:
        j += 1
    return int(data[i:j]) if i < j <= i + max_digits else None


def scan_objects(data: bytes, start: int, decode: Callable[[bytes], Any]) -> list[Any]:
    """Objects of the JSON array whose `[` is at or after `start`, decoded one by one until the damage."""
    out: list[Any] = []
    i = data.find(b"[", start)
    if i < 0:
        return out
    i += 1
    n = len(data)
    while i < n:
        while i < n and data[i] in b" \t\r\n,":
            i += 1
        if i >= n or data[i] != 0x7B:  # "{"
            break
        j = object_end(data, i)
        if j is None:
            break  # the object cut by the damage
        try:
            out.append(decode(data[i: j + 1]))
        except Exception:
            break
        i = j + 1
    return out
