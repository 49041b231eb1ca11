"""Export to TensorBoard and W&B, live and after the fact, read back with the tools' own formats:
TensorBoard's EventAccumulator, and W&B's offline run files (what `wandb sync` uploads)."""

from __future__ import annotations

import glob
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import rl_insight
from tests.conftest import start_server, wait_until

# (checked, not imported: each pytest process paid 2 s at collection for importing them; the tests import them)
pytestmark = pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("tensorboard", "wandb")),
                                reason="the export extras (tensorboard, wandb) are not installed")


def _accumulator(log_dir: Path, **kwargs: Any) -> Any:
    from tensorboard.backend.event_processing import event_accumulator

    return event_accumulator.EventAccumulator(str(log_dir), **kwargs)

STEPS = 5


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    ea = _accumulator(log_dir, size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


def _train(server_url: str, monkeypatch, experiment: str, steps: range, finish: bool = True) -> None:
    """A small verl-like job: per step a state on two lanes, then the trainer scalars."""
    monkeypatch.setenv("RL_INSIGHT_SERVER_URL", server_url)
    rl_insight.init(project="proj", experiment_name=experiment)
    for step in steps:
        with rl_insight.trace_state("vllm_generate", state_lane_id="replica_0"):
            time.sleep(0.03)
        with rl_insight.trace_state("actor_update", state_lane_id="rank_0"):
            time.sleep(0.02)
        rl_insight.metric_gauge("training/global_step", step)
        rl_insight.metric_gauge("critic/score/mean", step / 10)
        rl_insight.metric_gauge("actor/loss", 1.0 / step, role="actor")
    assert rl_insight.flush(5)
    if finish:
        rl_insight.finish(5)


def test_live_tensorboard_export_has_trainer_and_insight_scalars_at_their_step(tmp_path: Path, monkeypatch) -> None:
    srv = start_server(tmp_path, export_tensorboard=str(tmp_path / "tb"))
    try:
        _train(srv.url, monkeypatch, "live-tb", range(1, STEPS + 1), finish=False)
        st = srv.app.state.st
        st.writer.flush(10)
        st.insight.refresh()  # the run is live: its per-step insights go to the exporters too
        st.insight.refresh()  # a second refresh exports nothing twice
        st.writer.flush(10)  # the steps the rounds summarized are stored: their ledger goes out at the next round
        st.insight.refresh()
        assert all(e.flush(10) for e in st.rooms["exports"].all)
        rl_insight.finish(5)
    finally:
        srv.stop()  # closes the writers
    scalars = _scalars(tmp_path / "tb" / "proj" / "live-tb")
    assert scalars["critic_score_mean"] == [(s, pytest.approx(s / 10)) for s in range(1, STEPS + 1)]
    assert scalars["actor_loss/role=actor"] == [(s, pytest.approx(1.0 / s)) for s in range(1, STEPS + 1)]
    steps = [s for s, _ in scalars["rl_insight/step/duration_s"]]
    assert steps == sorted(set(steps)) and steps and steps[-1] <= STEPS  # each completed step once
    assert any(t.startswith("rl_insight/step_state_seconds/vllm_generate") for t in scalars)
    # the goodput ledger per step (docs/ledger.md): each step's device-seconds by reason add up to its two lanes' time
    ledger_steps = [s for s, _ in scalars["rl_insight/goodput"]]
    assert ledger_steps == sorted(set(ledger_steps)) and len(ledger_steps) >= 2, scalars.keys()
    for step in ledger_steps:
        by_reason = {t: dict(v)[step] for t, v in scalars.items() if t.startswith("rl_insight/ledger_seconds/")
                     and step in dict(v)}
        assert {"rl_insight/ledger_seconds/generating", "rl_insight/ledger_seconds/training"} <= set(by_reason)
        duration = dict(scalars["rl_insight/step/duration_s"])[step]
        assert sum(by_reason.values()) == pytest.approx(2 * duration, rel=0.01)
        assert dict(scalars["rl_insight/goodput"])[step] == pytest.approx(
            by_reason["rl_insight/ledger_seconds/training"] / sum(by_reason.values()))
    ea = _accumulator(tmp_path / "tb" / "proj" / "live-tb")
    ea.Reload()
    assert "rl_insight/run" in ea.Tags()["tensors"]  # the run's identity as text


def _wandb_files(root: Path) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(root / "wandb" / "offline-run-*" / "run-*.wandb")))


def test_live_wandb_offline_run_is_resumed_after_a_server_restart(tmp_path: Path, monkeypatch) -> None:
    from tests.wandb_files import history, run_info

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    wb = tmp_path / "wb"
    srv = start_server(tmp_path, export_wandb=True, wandb_dir=str(wb), wandb_project="rl-team")
    try:
        _train(srv.url, monkeypatch, "live-wb", range(1, 5))
    finally:
        srv.stop()
    srv = start_server(
        tmp_path, export_wandb=True, wandb_dir=str(wb), wandb_project="rl-team"
    )  # same data dir: a restart
    try:
        _train(srv.url, monkeypatch, "live-wb", range(5, 8))
    finally:
        srv.stop()
    # (wandb's own service process writes the offline files; once, in CI, a file's run record was not there yet when
    # read, when stop() gave up on the server's shutdown after 10 s without a word; it now waits for it, and this for
    # the files)
    def both_written() -> list[Path] | None:
        found = _wandb_files(wb)
        return found if len(found) == 2 and all(run_info(f) for f in found) else None

    files = wait_until(both_written, timeout=30, interval=0.5, what="both W&B offline runs' files, run records in")
    infos = [run_info(f) for f in files]
    assert infos[0]["run_id"] == infos[1]["run_id"]  # the same W&B run, resumed
    assert infos[0]["project"] == "rl-team" and infos[0]["display_name"] == "live-wb"
    rows = [r for f in files for r in history(f)]
    got = {r["_step"]: r["critic_score_mean"] for r in rows if "critic_score_mean" in r}
    assert got == {s: pytest.approx(s / 10) for s in range(1, 8)}


def test_a_failing_exporter_never_affects_ingest(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    srv = start_server(tmp_path, export_tensorboard=str(blocker))  # every run's log dir fails to open
    try:
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        rl_insight.init(project="proj", experiment_name="broken-export")
        rl_insight.metric_gauge("training/global_step", 1)
        rl_insight.metric_gauge("x", 1.0)
        assert rl_insight.flush(5)  # accepted, nothing refused
        st = srv.app.state.st
        wait_until(lambda: st.rooms["exports"].all[0].dropped.get("writer_unavailable"), what="counted drop")
        text = httpx.get(srv.url + "/metrics").text
        assert (
            'rl_insight_server_export_points_dropped_total{exporter="tensorboard",reason="writer_unavailable"}' in text
        )
        assert 'rl_insight_monitor_x{experiment_name="broken-export",project="proj"} 1.0' in text
    finally:
        srv.stop()


def test_export_cli_for_runs_already_in_the_store(tmp_path: Path, monkeypatch) -> None:
    from tests.wandb_files import history

    srv = start_server(tmp_path)
    try:
        _train(srv.url, monkeypatch, "history", range(1, STEPS + 1))
        srv.app.state.st.writer.flush(10)
    finally:
        srv.stop()
    store = srv.config.store_file
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rl_insight", "export", *args, "--store", str(store)],
                              capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)

    listed = cli("--list")
    assert listed.returncode == 0 and "proj/history" in listed.stdout
    r = cli("proj/history", "--to", "tensorboard", "-o", str(tmp_path / "tb"))
    assert r.returncode == 0, r.stderr
    scalars = _scalars(tmp_path / "tb" / "proj" / "history")
    assert scalars["critic_score_mean"] == [(s, pytest.approx(s / 10)) for s in range(1, STEPS + 1)]
    assert "rl_insight/rollout_training_overlap_ratio" in scalars and "rl_insight/step/duration_s" in scalars
    assert "rl_insight/goodput" in scalars and "rl_insight/ledger_seconds/generating" in scalars  # docs/ledger.md
    r = cli("proj/history", "--to", "wandb", "-o", str(tmp_path / "wb"))
    assert r.returncode == 0, r.stderr
    (f,) = _wandb_files(tmp_path / "wb")
    assert {row["_step"]: row["critic_score_mean"] for row in history(f)} == {
        s: pytest.approx(s / 10) for s in range(1, STEPS + 1)
    }
    r = cli("1", "--to", "parquet", "-o", str(tmp_path / "run.parquet"))
    assert r.returncode == 0 and (tmp_path / "run.parquet").exists()
    import pandas as pd

    frame = pd.read_parquet(tmp_path / "run.parquet")
    assert set(frame[frame["name"] == "critic_score_mean"]["value"].round(3)) == {s / 10 for s in range(1, STEPS + 1)}
    assert "rl_insight/step/duration_s" in set(frame["name"])  # the insight metrics, as the help says
    r = cli("1", "--to", "csv", "-o", str(tmp_path / "run.csv"))
    assert r.returncode == 0, r.stderr
    rows = (tmp_path / "run.csv").read_text().splitlines()
    steps = [row.split(",")[2] for row in rows[1:] if row.startswith("critic_score_mean,")]
    assert steps == [str(s) for s in range(1, STEPS + 1)]  # whole steps, not 1.0
    assert any(row.startswith("rl_insight/step/duration_s,") for row in rows)
    r = cli("nope/none", "--to", "csv")
    assert r.returncode == 2 and "no run 'nope/none'" in r.stderr


def test_analyze_writes_tensorboard_scalars(tmp_path: Path) -> None:
    from tests.analysis_fixtures import VERL_LOG

    log = tmp_path / "train.log"
    log.write_text(VERL_LOG)
    r = subprocess.run([sys.executable, "-m", "rl_insight", "analyze", str(log), "--format", "tensorboard", "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    scalars = _scalars(tmp_path / "out" / "tensorboard" / "offline")
    assert scalars["critic/score/mean"][0] == (1, pytest.approx(0.2))


def test_missing_extras_are_named(monkeypatch) -> None:
    from rl_insight.errors import ConfigError
    from rl_insight.export import tensorboard_writer, wandb_writer

    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    with pytest.raises(ConfigError, match=r"rl-insight\[tensorboard\]"):
        tensorboard_writer._import()
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ConfigError, match=r"rl-insight\[wandb\]"):
        wandb_writer._import()
