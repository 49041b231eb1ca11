"""The default-detail fast path of the torch parser: finding the kept events in the raw bytes gives exactly
what decoding every event and filtering gives, on real torch traces and on hostile JSON, or it declines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_insight.analysis.load import load
from rl_insight.analysis.parsers import torch_trace as tt
from rl_insight.analysis.parsers.torch_select import category_pattern, select
from tests.lanes import examples

KEPT = tt.ANNOTATION_CATS | tt.KERNEL_CATS | {"cpu_instant_event"}
PATTERN = category_pattern(KEPT)


def _expected(doc: bytes) -> list[tt.Event]:
    return [e for e in tt._decoder.decode(doc).traceEvents if e.cat in KEPT]


def _select(doc: bytes, max_hits: int = 50_000) -> list[tt.Event] | None:
    return select(doc, PATTERN, tt._event_decoder.decode, max_hits)


SCRIPT = r'''
import sys, torch
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True,
                            record_shapes=True, with_stack=True) as prof:
    for step in range(2):
        with torch.profiler.record_function("actor_update"):
            with torch.profiler.record_function("micro_batch0"):
                x = torch.ones(128, 128) @ torch.ones(128, 128)
                torch.cat([x, x])
prof.export_chrome_trace(sys.argv[1])
'''


def test_a_real_torch_trace_gives_the_same_table_as_a_full_decode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        import torch  # noqa: F401 - whether it imports is the question
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("torch missing in CI")
        pytest.skip("torch not installed")
    trace = tmp_path / "actor_update" / "prof_rank-0_1_2.json"
    trace.parent.mkdir()
    (tmp_path / "make.py").write_text(SCRIPT)
    subprocess.run(
        [sys.executable, str(tmp_path / "make.py"), str(trace)], check=True, capture_output=True, timeout=300
    )
    doc = trace.read_bytes()
    fast = _select(doc)
    assert fast is not None and fast == _expected(doc)
    assert sum(e.name == "actor_update" for e in fast) == 2 and any(e.name == tt.MEMORY_EVENT for e in fast)

    quick = load([tmp_path], workers=1)
    monkeypatch.setattr(tt, "select", lambda *a, **k: None)  # force the decode-everything path
    full = load([tmp_path], workers=1)
    assert quick.events.equals(full.events) and quick.memory.equals(full.memory)
    assert len(quick.events) == 4 and len(quick.memory) > 0


# events a hostile or unusual writer could produce: nested args with lists of objects, names with braces,
# quotes and `}, {`, kept and dropped categories, missing cat
_text = st.text(alphabet=st.sampled_from(list('ab{}[],: "\\\n') + ["\u00e9", "\U0001f600"]), max_size=12)
_leaf = st.one_of(st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False), _text, st.none())
_args = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(_text, inner, max_size=3)), max_leaves=8)
_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "i", "M"]), "name": _text, "ts": st.floats(0, 1e13), "dur": st.floats(0, 1e6)},
    optional={"cat": st.sampled_from(sorted(KEPT) + ["cpu_op", "python_function", "cuda_runtime", "cat"]),
              "args": st.dictionaries(_text, _args, max_size=3)})


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_event, max_size=12), style=st.sampled_from(["dumps", "indent", "compact"]),
       args_first=st.booleans())
def test_on_any_json_the_fast_path_is_exact_or_declines(events: list[dict], style: str, args_first: bool) -> None:
    if args_first:  # a writer that puts args before cat: the key is no longer at the event's own first level
        events = [{"args": e.pop("args"), **e} if "args" in e else e for e in events]
    doc_obj = {"baseTimeNanoseconds": 7, "traceEvents": events, "traceName": "x"}
    doc = {"dumps": lambda: json.dumps(doc_obj), "indent": lambda: json.dumps(doc_obj, indent=2),
           "compact": lambda: json.dumps(doc_obj, separators=(",", ":"), ensure_ascii=False)}[style]().encode()
    got = _select(doc)
    if got is not None:
        assert got == _expected(doc)


def test_declines_what_it_cannot_be_sure_of() -> None:
    def doc(events: list[dict]) -> bytes:
        return json.dumps({"traceEvents": events}).encode()

    ann = {"ph": "X", "cat": "user_annotation", "name": "actor_update", "ts": 1.0, "dur": 2.0}
    # a brace between the object's start and its cat key
    assert _select(doc([{"ph": "X", "args": {"a": 1}, "cat": "kernel", "name": "nccl", "ts": 1, "dur": 1}])) is None
    # a cat key nested inside a kept event's args
    assert _select(doc([{**ann, "args": {"inner": {"cat": "kernel"}}}])) is None
    assert _select(doc([ann] * 5), max_hits=3) is None  # too many to pay off: decode everything
    assert _select(b'{"traceEvents": [' + json.dumps(ann).encode()[:-3]) is None  # truncated mid-event
    assert _select(b'{"events": []}') is None
    # a name that looks like the boundary between events is cut at the right place
    tricky = {**ann, "name": '}, {"ph": "X"', "args": {"l": [{"a": "}, {"}, {"b": 2}]}}
    got = _select(doc([tricky, ann]))
    assert got is not None and got == _expected(doc([tricky, ann])) and got[0].name == '}, {"ph": "X"'


def test_header_is_read_before_or_after_the_events() -> None:
    ann = {"ph": "X", "cat": "user_annotation", "name": "actor_update", "ts": 1.0, "dur": 2.0}
    before = json.dumps({"distributedInfo": {"rank": 3, "world_size": 4}, "baseTimeNanoseconds": 1790000000000000000,
                         "traceEvents": [ann]}).encode()
    after = json.dumps({"traceEvents": [ann], "distributedInfo": {"rank": 3, "world_size": 4},
                        "baseTimeNanoseconds": 1790000000000000000}).encode()
    for doc in (before, after):
        h = tt._header(doc)
        assert h.baseTimeNanoseconds == 1790000000000000000 and h.distributedInfo == {"rank": 3, "world_size": 4}
