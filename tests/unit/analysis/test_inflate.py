"""Reading a gzip'd trace (analysis/parsers/torch_trace._inflate): every member, what decompresses of a damaged one,
and never past its bound, with ISA-L and with the stdlib's zlib alike."""

from __future__ import annotations

import gzip
import os
import zlib
from typing import Any

import pytest

from rl_insight.analysis.parsers import torch_trace

DATA = os.urandom(1 << 16).hex().encode() * 8  # 1 MiB that compresses about 2:1


@pytest.fixture(params=["isal", "stdlib"])
def engine(request: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "isal":
        pytest.importorskip("isal")
    else:
        monkeypatch.setattr(torch_trace, "_zlib", lambda: zlib)
    return str(request.param)


@pytest.mark.parametrize("limit", [None, 64 << 20])
def test_every_member_of_a_concatenated_file_is_read(engine: str, limit: int | None) -> None:
    raw = gzip.compress(DATA) + gzip.compress(b"second") + gzip.compress(b"")
    assert torch_trace._inflate(raw, limit) == (DATA + b"second", True)


@pytest.mark.parametrize("limit", [None, 64 << 20])
def test_a_truncated_stream_gives_what_decompressed_and_says_so(engine: str, limit: int | None) -> None:
    raw = gzip.compress(DATA)
    data, clean = torch_trace._inflate(raw[: len(raw) // 2], limit)
    assert not clean and 0 < len(data) < len(DATA) and DATA.startswith(data)
    damaged = raw[:100] + bytes(b ^ 0xFF for b in raw[100:200]) + raw[200:]
    data, clean = torch_trace._inflate(damaged, limit)
    assert not clean and DATA.startswith(data)


def test_output_that_fills_chunks_exactly_is_all_read(engine: str) -> None:
    """Under a limit the output is taken a chunk at a time: a stream whose output is a whole number of chunks, or
    whose last input slice leaves output held, must still end cleanly and whole."""
    chunk = torch_trace._SLICE * 4
    for size in (chunk, 3 * chunk, 3 * chunk + 1, 3 * chunk - 1):
        data = (DATA * (size // len(DATA) + 1))[:size]
        assert torch_trace._inflate(gzip.compress(data, 1), 1 << 30) == (data, True), size


def test_the_bound_stops_a_bomb_at_the_bound(engine: str) -> None:
    bomb = gzip.compress(b" " * (64 << 20))
    with pytest.raises(torch_trace.InflateLimitError, match="inflates past"):
        torch_trace._inflate(bomb, 8 << 20)
    assert torch_trace._inflate(bomb, 64 << 20) == (b" " * (64 << 20), True)  # exactly at the bound is fine
