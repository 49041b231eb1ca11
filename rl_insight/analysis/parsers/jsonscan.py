"""Read the complete JSON objects of a damaged array (a truncated trace) up to the first broken one."""

from __future__ import annotations

from typing import Any, Callable


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
        j, depth, in_str, esc = i, 0, False, False
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
            elif c == 0x7B:
                depth += 1
            elif c == 0x7D:
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= n:
            break  # the object cut by the damage
        try:
            out.append(decode(data[i: j + 1]))
        except Exception:
            break
        i = j + 1
    return out
