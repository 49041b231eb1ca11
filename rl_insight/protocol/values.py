"""Checks of single wire values shared by every message: errors per item, numbers, epoch nanoseconds, UTF-8 text.

Never raises anything but `ItemError` for a bad value, so that a caller can refuse that one item and keep the rest."""

from __future__ import annotations

from .limits import INT64_MAX

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass


class ItemError(ValueError):
    """One invalid item of a batch; `reason` is a short machine-readable key counted by the server."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BatchError(ValueError):
    """The batch as a whole cannot be used (wrong shape or version): answered with one 4xx."""


def is_number(x: object) -> bool:
    return (type(x) is int or type(x) is float) and not isinstance(x, bool)


def finite_float(
    x: object, what: str, lo: float = -1.7976931348623157e308, hi: float = 1.7976931348623157e308
) -> float:
    """x as a finite float in [lo, hi]; ItemError naming `what` otherwise (also for ints past float range)."""
    if type(x) is float and lo <= x <= hi:  # fast path (NaN fails the comparison)
        return x
    if type(x) is int:
        if lo <= x <= hi:
            return float(x)
        raise ItemError("out_of_range", f"{what} must be in [{lo:g}, {hi:g}], found {short_repr(x)}")
    if not is_number(x):
        raise ItemError("invalid_value", f"{what} must be a number, found {short_repr(x)}")
    try:
        f = float(x)  # type: ignore[arg-type]  # is_number(x) above: an int or a float
    except OverflowError:
        raise ItemError("out_of_range", f"{what} {short_repr(x)} is beyond the float range") from None
    if f != f or f in (float("inf"), float("-inf")):
        raise ItemError("non_finite", f"{what} must be finite, found {f!r}")
    if not lo <= f <= hi:
        raise ItemError("out_of_range", f"{what} must be in [{lo:g}, {hi:g}], found {f!r}")
    return f


def epoch_ns(x: object, what: str) -> int:
    """A non-negative integer that fits int64 (SQLite INTEGER, OTLP fixed64 nanoseconds)."""
    if type(x) is not int:
        raise ItemError("invalid_span", f"{what} must be an integer (epoch ns), found {short_repr(x)}")
    if not 0 <= x <= INT64_MAX:
        raise ItemError("out_of_range", f"{what} must be in [0, 2^63-1], found {short_repr(x)}")
    return x


def short_repr(x: object) -> str:
    try:
        r = repr(x)
    except Exception:  # pragma: no cover - repr of decoded JSON never fails, but be safe
        r = f"<{type(x).__name__}>"
    return r if len(r) <= 60 else r[:57] + "..."


class TextCleaner:
    """Cleans strings to valid UTF-8 without NUL characters and counts how many needed it."""

    __slots__ = ("replaced",)

    def __init__(self) -> None:
        self.replaced = 0

    def clean(self, s: str) -> str:
        if s.isascii() and "\x00" not in s:  # the usual case, and a cheap one: CPython keeps whether a str is ASCII
            return s
        if "\x00" in s:  # valid UTF-8, but no database's text holds it (PostgreSQL refuses it; C strings end there)
            self.replaced += 1
            s = s.replace("\x00", "\ufffd")
        try:
            s.encode("utf-8")
            return s
        except UnicodeEncodeError:  # lone surrogates (e.g. os.fsdecode of undecodable bytes)
            self.replaced += 1
            return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in s)

    def text(self, x: object, what: str, max_len: int, *, empty_ok: bool = False, reason: str = "invalid_name") -> str:
        if not isinstance(x, str):
            raise ItemError(reason, f"{what} must be a string, found {type(x).__name__}")
        if not x and not empty_ok:
            raise ItemError(reason, f"{what} must not be empty")
        if len(x) > max_len:
            raise ItemError("too_long", f"{what} is {len(x)} characters; at most {max_len}")
        return self.clean(x)


def clean_text(s: str) -> str:
    """A string made valid UTF-8 (lone surrogates and NUL replaced with U+FFFD)."""
    return TextCleaner().clean(s)
