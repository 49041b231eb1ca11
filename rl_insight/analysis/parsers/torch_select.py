"""Find the few events a default analysis keeps in a torch trace's raw bytes, without decoding the rest.

A 1M-event trace holds a few thousand verl stage ranges among a million operators. Decoding every event
into an object only to drop it costs most of the parse (0.53 s to decode and 0.3 s to walk 1M events,
against 0.2 s for one regex pass over the same 236 MB), so the default detail (annotations, communication
kernels, memory samples) finds its events by their `cat` value in one pass and decodes just those objects.

Exactness: an event's object is cut from the `{` before its `"cat"` key to the first `}` followed by
`,{` or `]` that makes the slice decode; a JSON object has exactly one prefix that is itself a complete
object, so a slice that decodes is the whole event. Anything unexpected (a brace between the object
start and the key, a `cat` key nested in another event's args, a slice that never decodes, too many
hits) returns None and the caller decodes the whole document instead. The one thing a literal search
cannot see is a key spelled with JSON escapes (`"\\u0063at"`); no profiler writes that.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")

_END = re.compile(rb"\}\s*(?:,\s*\{|\])")
_MAX_CUTS = 16  # `}, {` inside one event's args (lists of objects) before we give up and decode it all
# Past this many hits (a GPU trace's kernels) slicing event by event costs more than one full decode.
MAX_HITS = 50_000


def _object_at(data: bytes, key_pos: int, lower: int, decode: Callable[[bytes], T]) -> tuple[T, int] | None:
    start = data.rfind(b"{", lower, key_pos)
    if start < 0 or b"}" in data[start:key_pos]:
        return None  # the key is not in the event's own first level, or the layout is not one we know
    pos = key_pos
    for _ in range(_MAX_CUTS):
        m = _END.search(data, pos)
        if m is None:
            return None
        try:
            return decode(data[start: m.start() + 1]), m.start() + 1
        except Exception:  # cut inside a nested object or a string: try the next boundary
            pos = m.start() + 1
    return None


def category_pattern(categories: Iterable[str]) -> re.Pattern[bytes]:
    """One pass over the document: `"cat"` is the literal the regex engine scans for, any spacing after it."""
    kinds = b"|".join(re.escape(c.encode()) for c in sorted(categories))
    return re.compile(rb'"cat"\s*:\s*"(?:' + kinds + rb')"')


def select(
    data: bytes, pattern: re.Pattern[bytes], decode: Callable[[bytes], T], max_hits: int = MAX_HITS
) -> list[T] | None:
    """The events of `traceEvents` whose `cat` key matches `pattern` (see category_pattern), in document
    order; None when the fast path cannot be sure to find exactly them, or they are too many to pay off."""
    begin = data.find(b'"traceEvents"')
    if begin < 0:
        return None
    out: list[T] = []
    taken_to = begin
    for m in pattern.finditer(data, begin):
        if m.start() < taken_to:
            return None  # a match inside the event just taken: nested `cat` keys, not a layout we know
        found = _object_at(data, m.start(), taken_to, decode)
        if found is None or len(out) >= max_hits:
            return None
        event, taken_to = found
        out.append(event)
    return out
