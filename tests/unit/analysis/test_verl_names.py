"""verl's trace file names (build_trace_basename at verl HEAD, and older spellings): every role, rank,
replica and step read right and selectable in either spelling; real torch traces named by those rules."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rl_insight.analysis import analyze as an
from rl_insight.analysis.load import load
from rl_insight.analysis.parsers.names import identify
from rl_insight.analysis.table import Columns, with_depth

MS = 1_000_000


def verl_name(rank: int, save_file_prefix: str | None = None, role: str | None = None, step: int | None = None,
              world: int | None = None, topology: dict | None = None, pid: int = 4242, ts: str = "20261130120000123",
              suffix: str = "") -> str:
    """A file name by verl's documented rules: parts sanitized ([^0-9A-Za-z.=+-]+ -> '-'), joined by '_'."""
    def clean(t: object) -> str:
        return re.sub(r"[^0-9A-Za-z.=+-]+", "-", str(t)).strip("-")

    parts = [clean(p) for p in (save_file_prefix, role) if p]
    if step is not None:
        parts.append(f"step{clean(step)}")
    parts.append(f"rank{rank}" + (f"-of-{world}" if world else ""))
    par = "-".join(f"{d}{(topology or {})[d]}" for d in ("tp", "pp", "dp", "cp") if d in (topology or {}))
    if par:
        parts.append(par)
    parts += [f"pid{pid}", ts]
    return "_".join(parts) + suffix + ".json.gz"


@pytest.mark.parametrize(
    ("kwargs", "want"),
    [
        (
            dict(
                rank=1,
                save_file_prefix="actor_rollout_ref",
                role="e2e",
                step=3,
                world=4,
                topology={"tp": 0, "pp": 0, "dp": 1, "cp": 0},
            ),
            ("actor_rollout_ref", 1, 3, None, "e2e", 4, "tp0-pp0-dp1-cp0", None),
        ),
        (
            dict(rank=0, save_file_prefix="actor", step=2, suffix="_mb0-3"),
            ("actor", 0, 2, None, None, None, None, "mb0-3"),
        ),
        (
            dict(rank=5, save_file_prefix="critic", world=8, suffix="_part1"),
            ("critic", 5, None, None, None, 8, None, "part1"),
        ),
        (
            dict(rank=0, save_file_prefix="ref", role="compute_log_prob", step=10),
            ("ref", 0, 10, None, "compute_log_prob", None, None, None),
        ),
        (dict(rank=0, role="train", step=1, world=2), ("train", 0, 1, None, None, 2, None, None)),
        (
            dict(rank=0, save_file_prefix="agent_loop_rollout_replica_3", step=2),
            ("rollout", 0, 2, 3, None, None, None, None),
        ),
    ],
)
def test_grammar_follows_build_trace_basename(kwargs: dict, want: tuple) -> None:
    ident = identify(Path("/traces") / verl_name(**kwargs), Path("/traces"))
    assert (
        ident.role,
        ident.rank,
        ident.step,
        ident.replica,
        ident.scope,
        ident.world,
        ident.parallel,
        ident.part,
    ) == want


def test_legacy_underscore_spelling_of_the_docs_reads_the_same_role() -> None:
    ident = identify(Path("/t/actor_rollout_ref_e2e_step1_rank0-of-2_pid42_20261130120000123.json.gz"), Path("/t"))
    assert (ident.role, ident.scope, ident.step, ident.rank, ident.world) == ("actor_rollout_ref", "e2e", 1, 0, 2)
    assert (
        identify(Path("/t/actor_rollout_ref_rank0_pid1_20261130120000123.json.gz"), Path("/t")).role
        == "actor_rollout_ref"
    )


@pytest.fixture(scope="module")
def verl_dir(torch_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real rank 0 / rank 1 traces copied under names verl HEAD writes, two steps, suffixes, and an unknown file."""
    out = tmp_path_factory.mktemp("verl")
    for f in sorted((torch_traces / "flat").glob("*.json.gz")):
        rank = json.loads(gzip.decompress(f.read_bytes()))["distributedInfo"]["rank"]
        topo = {"tp": 0, "pp": 0, "dp": rank, "cp": 0}
        shutil.copy(f, out / verl_name(rank, "actor_rollout_ref", "e2e", 1, 2, topo))
        shutil.copy(f, out / verl_name(rank, "actor_rollout_ref", "e2e", 2, 2, topo, ts="20261130120100123",
                                       suffix="_mb0-1" if rank == 0 else "_part1"))
    (out / "notes.json").write_text('{"comment": "not a trace"}')
    return out


def test_real_traces_named_like_verl_are_read_right_and_selectable_in_either_spelling(verl_dir: Path) -> None:
    loaded = load([verl_dir])
    df = loaded.events
    assert set(df["lane"].astype(str)) == {"actor_rollout_ref/rank0", "actor_rollout_ref/rank1"}
    assert set(df["step"]) == {1, 2} and set(df["role"].astype(str)) == {"actor_rollout_ref"}
    assert any("notes.json" in w and "skipped" in w for w in loaded.report.warnings)  # reported, with the reason
    n = len(df)
    for spelling in ("actor-rollout-ref", "actor_rollout_ref"):
        assert len(load([verl_dir], roles={spelling}).events) == n
    only = load([verl_dir], steps={2}, ranks={1}).events
    assert set(only["step"]) == {2} and set(only["rank"]) == {1} and len(only) == n // 4


def test_a_selection_matching_nothing_names_what_is_there(verl_dir: Path, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rl_insight", "analyze", str(verl_dir), "--roles", "critic", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2
    assert "no events match the selection --roles critic" in r.stderr and "roles actor_rollout_ref" in r.stderr
    assert "ranks 0, 1" in r.stderr and "steps 1, 2" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([sys.executable, "-m", "rl_insight", "analyze", str(empty), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "nothing to analyse" in r.stderr and "warnings above" not in r.stderr


def test_long_tail_and_breakdown_are_keyed_by_each_events_step_not_by_time() -> None:
    """Async schedule: step 3's generation overlaps step 2's in time. replica_1 is slow in step 2 only."""
    c = Columns()
    def add(lane: str, name: str, a: float, b: float, step: int) -> None:
        c.add("torch", lane.split("/")[0], None, lane, name, "annotation", a * MS, b * MS, step, None, "f")

    add("rollout/replica_0", "vllm_generate", 0, 100, 2)
    add("rollout/replica_1", "vllm_generate", 0, 300, 2)      # slow in step 2 (300 ms vs 100 ms)
    add("rollout/replica_2", "vllm_generate", 0, 100, 2)
    add("rollout/replica_0", "vllm_generate", 150, 250, 3)    # step 3 starts while replica_1 still works on step 2
    add("rollout/replica_1", "vllm_generate", 320, 420, 3)
    add("rollout/replica_2", "vllm_generate", 150, 260, 3)
    df = with_depth(c.frame())
    tails = {t["step"]: t for t in an.long_tail(df)}
    assert tails[2]["slowest_lane"] == "rollout/replica_1" and tails[2]["ratio"] == pytest.approx(3.0)
    assert tails[2]["lanes"] == {"rollout/replica_0": 0.1, "rollout/replica_1": 0.3, "rollout/replica_2": 0.1}
    assert tails[3]["slowest_lane"] == "rollout/replica_2" and tails[3]["ratio"] == pytest.approx(0.11 / 0.1)
    steps = {s["step"]: s for s in an.step_breakdown(df)}
    assert steps[2]["states"]["vllm_generate"] == pytest.approx(0.3) and steps[3]["states"][
        "vllm_generate"
    ] == pytest.approx(0.21)  # 150-260 and 320-420


def test_a_verl_log_alone_reports_its_steps_not_empty_timeline_numbers(tmp_path: Path) -> None:
    from tests.analysis_fixtures import VERL_LOG

    log = tmp_path / "train.log"
    log.write_text(VERL_LOG)
    r = subprocess.run(
        [sys.executable, "-m", "rl_insight", "analyze", str(log), "--format", "summary", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "o" / "summary.md").read_text()
    assert "## verl log" in md and "steps 1–3" in md
    assert "overlap ratio" not in md and "Communication vs computation" not in md  # nothing computed from zero events


def test_compute_time_is_not_reported_as_zero_when_it_was_not_recorded(tmp_path: Path) -> None:
    from rl_insight.analysis.render import export

    c = Columns()
    c.add("torch", "actor", 0, "actor/rank0", "actor_update", "annotation", 0, 100 * MS, 1, None, "f")
    c.add("torch", "actor", 0, "actor/rank0", "all_reduce", "communication", 10 * MS, 30 * MS, 1, None, "f")
    df = with_depth(c.frame())
    export.summary(an.summarize(df), tmp_path, ["f"], [])
    row = next(line for line in (tmp_path / "summary.md").read_text().splitlines() if line.startswith("| actor/rank0 "
                                                                                                      "| actor_update"))
    assert "n/a (--detail ops or kernels)" in row


def test_staleness_as_time_per_step_hand_computed() -> None:
    """Async: step 2's samples were generated (0-300 ms) while step 1 trained; step 2 trains from 700 ms."""
    c = Columns()
    def add(lane: str, name: str, a: float, b: float, step: int) -> None:
        c.add("torch", lane.split("/")[0], 0 if "rank" in lane else None, lane, name, "annotation", a * MS, b * MS,
              step, None, "f")

    add("rollout/replica_0", "vllm_generate", 0, 250, 2)
    add("rollout/replica_1", "vllm_generate", 0, 300, 2)
    add("actor/rank0", "actor_update", 700, 900, 2)
    add("rollout/replica_0", "vllm_generate", 1000, 1100, 3)
    add("actor/rank0", "actor_update", 1100, 1300, 3)   # synchronous step: no wait
    got = {s["step"]: s["wait_s"] for s in an.staleness_time(with_depth(c.frame()))}
    assert got == {2: pytest.approx(0.4), 3: pytest.approx(0.0)}
