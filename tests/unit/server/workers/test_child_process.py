"""The server's child processes (server/workers/child_process.py): each one, the run store's writer and the insight
rounds, ends with a server killed by SIGKILL (its pipe's EOF), and messages go both ways in order."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rl_insight.server.workers.child_process import PipeChild

CHILDREN = {
    "writer": """
        from rl_insight.server.runstore.writer_process import WriterProcess
        w = WriterProcess({store!r})
        child = w._child
    """,
    "insights": """
        from rl_insight.server.live.insights.process import InsightProcess
        from rl_insight.server.runstore.backend.location import sqlite_location
        w = InsightProcess(sqlite_location({store!r}), {{"window_s": 300.0, "live_window_s": 60.0,
                           "step_metric": "training/global_step", "version_metric": "current_param_version"}})
        w.run()
        child = w._child
    """,
}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie whose parent (init) has not reaped it yet has ended too
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


@pytest.mark.parametrize("kind", sorted(CHILDREN))
def test_the_child_ends_with_a_killed_server(tmp_path: Path, kind: str) -> None:
    from rl_insight.server.runstore.writer import RunStoreWriter

    store = str(tmp_path / "rs.sqlite")
    RunStoreWriter(store).close()
    script = textwrap.dedent(CHILDREN[kind].format(store=store)) + "print(child.proc.pid, flush=True)\n" \
        "import time; time.sleep(60)\n"
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        child = int(server.stdout.readline())
        assert not _gone(child)
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        deadline = time.monotonic() + 20
        while not _gone(child):
            assert time.monotonic() < deadline, f"the {kind} child outlived its server"
            time.sleep(0.05)
    finally:
        server.kill()


def test_messages_go_both_ways_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    echo = tmp_path / "echo_child.py"
    echo.write_text(textwrap.dedent("""
        import sys
        from rl_insight.server.workers.child_process import ServerPipe
        pipe = ServerPipe.from_argv(sys.argv)
        while True:
            try:
                msg = pipe.receive()
            except EOFError:
                sys.exit(7)  # the server's end closed
            pipe.send(("echo", *msg))
    """))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    child = PipeChild.start("echo_child")
    for i in range(50):
        child.send(("n", i, "é" * i))
    got = [child.receive() for _ in range(50)]
    assert got == [("echo", "n", i, "é" * i) for i in range(50)]
    assert child.close(10) == 7  # it read EOF once the pipes closed
