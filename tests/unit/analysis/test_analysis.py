"""Offline analysis: real torch traces, nsys and Ascend files built from their schemas, verl logs,
analyzers with hand-computed answers, and every output format."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rl_insight.analysis import analyze as an
from rl_insight.analysis.load import detect, load
from rl_insight.analysis.render import export, html, png
from rl_insight.analysis.table import Columns, with_depth
from tests.analysis_fixtures import (
    VERL_LOG,
    make_ascend_db,
    make_nsys_sqlite,
    make_torch_traces,
    make_trace_view,
    sqlite_to_jsonl,
)
from tests.conftest import free_port

MS = 1_000_000


@pytest.fixture(scope="module")
def torch_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import torch  # noqa: F401 - whether it imports is the question
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("torch missing in CI: .ci/run installs torch==2.13.0 (CPU)")
        pytest.skip("torch not installed (pip install torch==2.13.0)")
    root = tmp_path_factory.mktemp("torch")
    make_torch_traces(root, free_port())
    return root


def recorded_annotations(path: Path) -> list[tuple[str, int, int]]:
    """(name, start epoch ns, end epoch ns) exactly as torch recorded them."""
    d = json.loads(gzip.decompress(path.read_bytes()))
    base = d["baseTimeNanoseconds"]
    return sorted((e["name"], base + round(e["ts"] * 1000), base + round(e["ts"] * 1000) + round(e["dur"] * 1000))
                  for e in d["traceEvents"] if e.get("cat") == "user_annotation")


@pytest.mark.parametrize("layout", ["legacy", "flat"])
def test_real_torch_traces_every_range_on_the_right_rank_and_role(torch_traces: Path, layout: str) -> None:
    loaded = load([torch_traces / layout])
    df = loaded.events
    assert not loaded.report.errors
    files = sorted((torch_traces / layout).rglob("*rank*.json.gz"))
    assert len(files) == 2
    for f in files:
        d = json.loads(gzip.decompress(f.read_bytes()))
        rank = d["distributedInfo"]["rank"]
        mine = df[df["file"] == str(f)]
        assert set(mine["rank"]) == {rank}
        assert set(mine["role"].astype(str)) == {"actor_rollout_ref"}
        assert set(mine["lane"].astype(str)) == {f"actor_rollout_ref/rank{rank}"}
        got = sorted(zip(mine["name"], mine["start_ns"].astype(int), mine["end_ns"].astype(int)))
        assert got == recorded_annotations(f)  # every range, with torch's own start and duration, on the epoch clock
        if layout == "flat":
            assert set(mine["step"]) == {2}
    stages = df[(df["depth"] == 0) & (df["category"] == "annotation") & (df["role"] == "actor_rollout_ref")]
    assert set(stages["name"]) == {"actor_compute_log_prob", "actor_update"}
    nested = df[df["name"].str.startswith("micro_batch")]
    assert set(nested["depth"]) == {1}
    comm = df[df["category"] == "communication"]
    assert len(comm) >= 4 and comm["name"].str.contains("all_reduce").all()


def test_rollout_replica_trace_and_async_llm_decoy(torch_traces: Path) -> None:
    loaded = load([torch_traces / "legacy"])
    rollout = loaded.events[loaded.events["lane"].astype(str) == "rollout/replica_0"]
    assert list(rollout["name"]) == ["vllm_generate"]
    assert not any("async_llm" in p for p in loaded.report.parsed)


def test_truncated_torch_trace_is_read_up_to_the_damage(torch_traces: Path, tmp_path: Path) -> None:
    src = sorted((torch_traces / "legacy").rglob("prof_rank-0_*.json.gz"))[0]
    raw = gzip.decompress(src.read_bytes())
    cut = tmp_path / "actor_rollout_ref" / "prof_rank-0_1_2.json"
    cut.parent.mkdir()
    cut.write_bytes(raw[: raw.find(b'"name": "actor_update"') + 40])  # inside the actor_update event
    loaded = load([tmp_path])
    assert any("truncated" in w for w in loaded.report.warnings)
    assert set(loaded.events["name"]) >= {"actor_compute_log_prob", "micro_batch0"}
    assert "actor_update" not in set(loaded.events["name"])
    assert set(loaded.events["rank"]) == {0}  # distributedInfo recovered from the header


def test_nsys_sqlite_and_jsonl(tmp_path: Path) -> None:
    epoch = 1_790_000_000 * 10**9
    db = make_nsys_sqlite(
        tmp_path / "actor_update_node1_worker_process_4242.1.sqlite",
        rank=5,
        epoch_ns=epoch,
        ranges=[("actor_update", 1000, 9000, 60), ("micro_batch0", 2000, 4000, 59), ("gen", 500, 700, 60)],
    )
    jl = sqlite_to_jsonl(db, tmp_path / "worker_process_4243.1.jsonl")
    for path, kind in ((db, "nsys-sqlite"), (jl, "nsys-jsonl")):
        assert detect(path) == kind
        df = load([path]).events
        rows = {n: (s, e) for n, s, e in zip(df["name"], df["start_ns"], df["end_ns"])}
        assert rows == {"actor_update": (epoch + 1000, epoch + 9000), "micro_batch0": (epoch + 2000, epoch + 4000),
                        "gen": (epoch + 500, epoch + 700)}
        assert set(df["rank"]) == {5} and set(df["source"]) == {"nsys"}
        assert df.set_index("name").loc["micro_batch0", "depth"] == 1


def test_ascend_db_and_trace_view_including_truncated(tmp_path: Path) -> None:
    t = 1_790_000_000 * 10**9
    role_dir = tmp_path / "actor_update" / "node1_77_20260101000000000_ascend_pt"
    db = make_ascend_db(role_dir / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_3.db",
                        [("actor_update", t, t + 50 * MS), ("mini_batch0", t + MS, t + 40 * MS)])
    df = load([db]).events
    assert sorted(zip(df["name"], df["start_ns"], df["end_ns"])) == [("actor_update", t, t + 50 * MS),
                                                                     ("mini_batch0", t + MS, t + 40 * MS)]
    assert set(df["rank"]) == {3} and set(df["role"].astype(str)) == {"actor_update"}

    tv = make_trace_view(tmp_path / "ref" / "n_1_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", 1.79e15)
    assert detect(tv) == "mstx-trace-view"
    df = load([tv]).events
    assert set(df[df["category"] == "annotation"]["name"]) == {"actor_update", "ref_compute_log_prob"}
    assert set(df[df["category"] == "overlap"]["name"]) == {"Computing", "Communication", "Communication(Not "
                                                                                          "Overlapped)"}
    assert set(df["rank"]) == {3}  # from profiler_info_3.json
    au = df[df["name"] == "actor_update"].iloc[0]
    assert au["start_ns"] == int(1.79e15 * 1000) and au["end_ns"] - au["start_ns"] == 10 * MS
    comm = an.communication(df).set_index("stage").loc["actor_update"]
    assert comm["comm_not_overlapped_s"] == pytest.approx(0.002) and comm["compute_s"] == pytest.approx(0.006)

    cut = make_trace_view(
        tmp_path / "cut" / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", 1.79e15, truncate=True
    )
    loaded = load([cut])
    assert any("truncated" in w for w in loaded.report.warnings)
    assert "actor_update" in set(loaded.events["name"]) and "ref_compute_log_prob" not in set(loaded.events["name"])


def test_verl_logs_with_and_without_ray_prefix(tmp_path: Path) -> None:
    log = tmp_path / "run.out"  # not named .log: detected by content
    log.write_text(VERL_LOG)
    assert detect(log) == "verl-log"
    m = load([log]).metrics
    assert list(m.index) == [1, 2, 3]
    assert m.loc[2, "timing_s/gen"] == 11.5 and m.loc[3, "critic/score/mean"] == 0.3
    assert pd.isna(m.loc[3, "actor/loss"])  # nan is not a value
    assert "note" not in m.columns


def test_corrupt_and_unknown_files_are_reported_and_the_rest_analysed(torch_traces: Path, tmp_path: Path) -> None:
    bad = tmp_path / "garbage.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    unknown = tmp_path / "notes.bin"
    unknown.write_bytes(b"\x00\x01\x02 binary")
    loaded = load([torch_traces / "flat", bad, unknown])
    assert len(loaded.events) > 0
    problems = " ".join(loaded.report.errors + loaded.report.warnings)
    assert str(bad) in problems and str(unknown) in problems and "unknown format" in problems


def hand_table() -> pd.DataFrame:
    """Two ranks with known stage times, one replica, communication partly hidden behind compute."""
    c = Columns()
    def add(lane: str, rank: int | None, name: str, cat: str, a: float, b: float, step: int = 1) -> None:
        c.add("torch", lane.split("/")[0], rank, lane, name, cat, a * MS, b * MS, step, None, "f")

    add("actor/rank0", 0, "actor_update", "annotation", 0, 100)
    add("actor/rank0", 0, "all_reduce", "communication", 60, 90)
    add("actor/rank0", 0, "matmul", "kernel", 50, 70)
    add("actor/rank1", 1, "actor_update", "annotation", 0, 150)
    add("actor/rank2", 2, "actor_update", "annotation", 0, 100)
    add("rollout/replica_0", None, "vllm_generate", "annotation", 100, 200)
    return with_depth(c.frame())


def test_analyzers_match_hand_computed_answers() -> None:
    df = hand_table()
    sk = an.skew(df).set_index("name").loc["actor_update"]
    assert (sk["slowest_rank"], sk["slowest_s"], sk["median_s"], sk["ratio"]) == (1, 0.15, 0.1, pytest.approx(1.5))
    assert not sk["straggler"]  # exactly 1.5x is not above the threshold
    comm = an.communication(df).set_index("lane").loc["actor/rank0"]
    assert comm["comm_s"] == pytest.approx(0.03) and comm["compute_s"] == pytest.approx(0.02)
    assert comm["comm_not_overlapped_s"] == pytest.approx(0.02)  # 60-90 minus the 60-70 overlap with compute
    util = an.utilization(df)  # window 0..200 ms
    assert util["actor/rank1"]["utilization"] == pytest.approx(0.75) and util["actor/rank0"][
        "bubble_ratio"
    ] == pytest.approx(0.5)
    ov = an.overlap(df)
    assert ov["overlap_s"] == pytest.approx(0.05) and ov["overlap_ratio"] == pytest.approx(0.05 / 0.2)
    stats = an.stage_stats(df)
    assert stats[(stats["rank"] == 1)]["total_s"].item() == pytest.approx(0.15)
    steps = an.step_breakdown(df)
    assert steps[0]["states"]["actor_update"] == pytest.approx(0.15) and steps[0]["states"][
        "vllm_generate"
    ] == pytest.approx(0.1)


def test_outputs_perfetto_nesting_csv_parquet_summary_png_html(tmp_path: Path) -> None:
    df = hand_table()
    trace = json.loads(export.perfetto(df, tmp_path / "t.json").read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    by_thread: dict[tuple, list] = {}
    for e in xs:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for evs in by_thread.values():  # every thread holds properly nested slices
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[float] = []
        for e in evs:
            while stack and stack[-1] <= e["ts"]:
                stack.pop()
            assert not stack or e["ts"] + e["dur"] <= stack[-1] + 1e-6
            stack.append(e["ts"] + e["dur"])
    lanes = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert lanes == ["actor/rank0", "actor/rank1", "actor/rank2", "rollout/replica_0"]
    assert len(pd.read_csv(export.table(df, tmp_path / "e.csv"))) == len(df)
    assert len(pd.read_parquet(export.table(df, tmp_path / "e.parquet"))) == len(df)
    js, md = export.summary(an.summarize(df), tmp_path, ["f"], [])
    assert json.loads(js.read_text())["skew"][0]["slowest_rank"] == 1 and "Cross-rank skew" in md.read_text()
    assert png.render(df, tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = html.render(df, tmp_path / "t.html").read_text()
    assert "<script src=" not in page and "http" not in page.split("<script id=\"data\"")[0].lower().replace(
        "http-equiv", ""
    )
    data = json.loads(page.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    assert data["lanes"] == lanes and data["events"] == len(df)


def test_html_levels_merge_subpixel_events(tmp_path: Path) -> None:
    c = Columns()
    for i in range(20_000):  # 20k tiny events on one lane
        c.add("torch", "r", 0, "r/rank0", "op", "annotation", i * 1000, i * 1000 + 500, None, None, "f")
    page = html.render(with_depth(c.frame()), tmp_path / "t.html").read_text()
    data = json.loads(page.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    sizes = [len(L["rows"]) for L in data["levels"]]
    assert sizes[0] < 100 and sizes[-1] == 20_000  # coarse level merged, finest level complete
    assert sum(r[5] for r in data["levels"][0]["rows"]) == 20_000  # counts add up


def test_cli_end_to_end_and_missing_extra_message(torch_traces: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "rl_insight", "analyze", str(torch_traces / "legacy"), "--out", str(out),
                        "--ranks", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in out.iterdir()} >= {"timeline.html", "timeline.png", "trace.perfetto.json", "events.csv",
                                               "summary.json", "summary.md"}
    assert set(pd.read_csv(out / "events.csv")["rank"].dropna().astype(int)) == {1}
    code = ("import sys; sys.modules['pandas'] = None\nfrom rl_insight.cli.main import main\n"
            f"main(['analyze', {str(torch_traces)!r}])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2 and 'pip install "rl-insight[analysis]"' in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "rl_insight", "analyze", str(tmp_path / "nothing-here")], capture_output=True, text=True
    )
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_python_function_ranges_are_analysed_when_a_trace_has_no_annotations(tmp_path: Path) -> None:
    """Upstream's torch fixtures carry only `cat: "python"` events (python function tracing)."""
    events = [
        {
            "ph": "X",
            "cat": "python",
            "name": "actor_update",
            "pid": 1,
            "tid": 1,
            "ts": 1000.0,
            "dur": 500.0,
            "args": {},
        },
        {"ph": "X", "cat": "python", "name": "ref_compute_log_prob", "pid": 1, "tid": 1, "ts": 1600.0, "dur": 200.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1001.0, "dur": 5.0},
    ]
    d = tmp_path / "actor"
    d.mkdir()
    (d / "prof_rank-0_123_456.json").write_text(
        json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1_700_000_000_000_000_000})
    )
    loaded = load([tmp_path])
    assert sorted(loaded.events["name"]) == ["actor_update", "ref_compute_log_prob"]
    assert any("python function ranges" in w for w in loaded.report.warnings)
    stats = an.stage_stats(loaded.events)
    assert len(stats) == 2 and set(loaded.events["lane"].astype(str)) == {"actor/rank0"}


def test_offline_html_uses_the_shared_stage_palette(tmp_path: Path) -> None:
    from rl_insight.semantics.palette import MIXED as MIXED_COLOR
    from rl_insight.semantics.palette import color_of

    df = pd.DataFrame({"lane": ["rank_0", "replica_0"], "name": ["actor_update", "vllm_generate"], "depth": [0, 0],
                       "start_ns": [0, 10], "end_ns": [5, 20]})
    out = html.render(df, tmp_path / "t.html")
    payload = json.loads(out.read_text().split('<script id="data" type="application/json">')[1].split("</script>")[0])
    colors = dict(zip(payload["names"], payload["colors"]))
    assert colors["actor_update"] == color_of("actor_update") == "#2563eb"
    assert colors["vllm_generate"] == color_of("vllm_generate") and colors["(mixed)"] == MIXED_COLOR


def test_the_report_lists_operators_and_keeps_their_colours_apart_from_the_stages(torch_traces: Path,
                                                                                 tmp_path: Path) -> None:
    """Issue 64: the HTML profile report had no operator table, and its legend mixed stages and `aten::*` operators
    in near-identical colours. Real torch traces: stages (the job's record_function ranges) and operators are two
    legend groups, no operator shares a colour with any stage, and the operator table is torch's self-time ranking
    with each row on the operator's longest call."""
    from rl_insight.semantics.palette import FALLBACK, STAGES

    loaded = load([torch_traces / "flat"], detail=("annotations", "ops", "kernels"))
    df, result = loaded.events, an.summarize(loaded.events)
    page = html.render(df, tmp_path / "t.html", result=result).read_text()
    payload = json.loads(page.split('<script id="data" type="application/json">')[1].split("</script>")[0])
    names, colors, legend = payload["names"], payload["colors"], payload["legend"]
    stages = {names[i] for i in legend["stages"]}
    operators = [names[i] for i in legend["operators"]]
    recorded_stages = set(df.loc[df["category"].astype(str) == "annotation", "name"].astype(str))
    assert stages == recorded_stages and stages, stages
    assert operators and all(n not in stages for n in operators) and any(n.startswith("aten::") for n in operators)
    assert len(operators) <= 12 and legend["more_operators"] == max(0, len(set(names) - stages - {"(mixed)"}) - 12)
    stage_colors = set(STAGES.values()) | set(FALLBACK)
    by_name = dict(zip(names, colors))
    assert not {by_name[n] for n in set(names) - stages - {"(mixed)"}} & stage_colors
    # the most time first, as analyze counts it
    spent = {n: int((g["end_ns"] - g["start_ns"]).sum()) for n, g in df[~df["name"].astype(str).isin(stages)]
             .groupby(df["name"].astype(str), observed=True)}
    assert [spent[n] for n in operators] == sorted(spent.values(), reverse=True)[:len(operators)]

    tables = {t["id"]: t for t in payload["tables"]}
    ops = tables["operators"]
    assert ops["rows"] and [r["cells"][0] for r in ops["rows"]] == [o["name"] for o in result["operators"]["operators"]]
    first = ops["rows"][0]
    instances = df[(df["name"].astype(str) == first["cells"][0]) & (df["category"].astype(str) == "op")]
    longest = instances.loc[(instances["end_ns"] - instances["start_ns"]).idxmax()]
    assert first["lane"] == str(longest["lane"])
    assert first["to"] - first["from"] == pytest.approx((longest["end_ns"] - longest["start_ns"]) / 1e6, abs=1e-3)
    assert "kernels" in tables  # (CPU-only traces hold no kernels: the table says none)


def test_merging_mixed_short_events_works_on_the_tables_load_builds() -> None:
    """pandas 3 hands out read-only arrays: merging names of a loaded (categorical) table must not write into one."""
    from rl_insight.analysis.render.merge import MIXED, merge_below
    from rl_insight.analysis.table import Columns, with_depth

    cols = Columns()
    for i in range(6):  # short ops of two names, back to back
        cols.add(
            "torch",
            "actor",
            0,
            "actor/rank0",
            "aten::mm" if i % 2 else "aten::add",
            "op",
            i * 10,
            i * 10 + 5,
            1,
            None,
            "f",
        )
    merged = merge_below(with_depth(cols.frame()), 100)
    assert list(merged["name"]) == [MIXED] and list(merged["count"]) == [6]
