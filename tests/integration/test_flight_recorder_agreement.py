"""rl-insight's collective wavefront against PyTorch's own flight-recorder analyzer (`fr_trace`), on the same entries of
real gloo jobs (issue 51 item 5): rank 2 calls two collectives the other way round, or all-reduces another size;
both name the same culprit rank and the same collective sequence number."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rl_insight.semantics.collectives import wavefront
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[2]
MODES = ("order", "sizes")  # (skip: the server's own verdict on it, tests/integration/test_stack_snapshots.py)


def test_both_analyzers_name_the_same_rank_and_collective(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    jobs = {}
    for mode in MODES:
        out = tmp_path / mode
        out.mkdir()
        env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "4",
               "FR_MODE": mode, "FR_OUT": str(out), "PYTHONPATH": str(REPO)}
        jobs[mode] = [subprocess.Popen([sys.executable, "-m", "tests.fr_job"], env={**env, "RANK": str(r)}, cwd=REPO,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(4)]
    try:
        for procs in jobs.values():
            for p in procs:
                p.wait(120)
    finally:
        for procs in jobs.values():
            for p in procs:
                p.kill()
    for mode in MODES:
        out = tmp_path / mode
        assert sorted(f.name for f in out.iterdir()) == sorted([f"rank_{r}" for r in range(4)] +
                                                               [f"rl_{r}.json" for r in range(4)]), mode
        ours = wavefront({f"rank_{r}": json.loads((out / f"rl_{r}.json").read_text()) for r in range(4)})[0]
        theirs = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(out)],
                                capture_output=True, text=True, timeout=120)
        said = theirs.stdout + theirs.stderr  # (it reports through its logger)
        seq = re.search(r"Collective sequence number: (\d+) has errors", said)
        culprit = re.search(r"Culprit rank (\d+)", said)
        assert seq and culprit, (mode, said[-2000:])
        assert ours["kind"] == "desync", (mode, ours)
        assert (ours["culprits"], ours["seq"]) == ([f"rank_{culprit[1]}"], int(seq[1])) == (["rank_2"], 3), \
            (mode, ours, said[-1000:])
