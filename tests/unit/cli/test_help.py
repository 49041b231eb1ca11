"""`--help` read off a terminal (issue 49 item 21): piped into a file or `less`, every option's name is whole and
help text is plain (a bracketed word such as `[service]` is not eaten as markup)."""

from __future__ import annotations

import subprocess
import sys


def test_help_through_a_pipe_names_every_option_whole() -> None:
    out = subprocess.run([sys.executable, "-m", "rl_insight", "server", "start", "--help"], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    for option in ("--extra-dashboard-dir", "--export-tensorboard", "--attach-logs", "--store-retention-days",
                   "--otlp-intake-grpc-port"):
        assert option in text, option
    assert "…" not in text and "prefixed with [service]" in " ".join(text.split())
