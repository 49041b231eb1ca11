"""Offline analysis spread over processes and over a real local Ray cluster (`ray start --head`): the
event table is identical to the one read in a single process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rl_insight.analysis import analyze as an
from rl_insight.analysis.load import load

pytestmark = pytest.mark.integration


def _frame(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["file", "lane", "name", "start_ns", "end_ns", "step", "rank", "depth"]
    out = df[cols].astype({"file": str, "lane": str, "name": str}).sort_values(cols).reset_index(drop=True)
    return out


@pytest.fixture(scope="module")
def many(torch_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 files: the two real rank traces under 8 steps' names."""
    out = tmp_path_factory.mktemp("many")
    for f in sorted((torch_traces / "flat").glob("*.json.gz")):
        rank = 0 if "rank0" in f.name else 1
        for step in range(1, 9):
            shutil.copy(
                f,
                out
                / f"actor-rollout-ref_e2e_step{step}_rank{rank}-of-2_pid{100 + rank}_2026113012000{step}123.json.gz",
            )
    return out


def test_workers_give_the_same_table_as_one_process(many: Path) -> None:
    one = load([many], workers=1)
    four = load([many], workers=4)
    assert len(one.events) > 0 and sorted(one.report.parsed) == sorted(four.report.parsed)
    pd.testing.assert_frame_equal(_frame(one.events), _frame(four.events))
    assert an.summarize(one.events)["long_tail"] == an.summarize(four.events)["long_tail"]


def test_ray_cluster_gives_the_same_table(many: Path, tmp_path: Path) -> None:
    try:
        import ray  # noqa: F401 - whether it imports is the question
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("ray missing in CI; `pip install -e .[dev]` installs it")
        pytest.skip("ray not installed")
    ray_bin = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    import tempfile

    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    r = subprocess.run(
        [
            ray_bin,
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            f"--temp-dir={temp}",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        local = load([many], workers=1)
        fanned = load([many], ray_address="auto")
        pd.testing.assert_frame_equal(_frame(local.events), _frame(fanned.events))
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "rl_insight",
                "analyze",
                str(many),
                "--ray",
                "auto",
                "--format",
                "summary",
                "--out",
                str(tmp_path / "o"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Analysed 16 file(s)" in out.stdout
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, timeout=120, env=env)
        shutil.rmtree(temp, ignore_errors=True)


def test_an_unreachable_ray_address_is_a_clear_error(many: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rl_insight", "analyze", str(many), "--ray", "127.0.0.1:1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert out.returncode != 0 and "cannot connect to the Ray cluster at '127.0.0.1:1'" in out.stderr
