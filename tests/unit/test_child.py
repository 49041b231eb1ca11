"""Every Python child of ours runs this very package (rl_insight/child.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rl_insight import child


def test_the_package_comes_first_on_the_childs_path() -> None:
    env = child.python_env({"PYTHONPATH": "/elsewhere", "KEEP": "1"}, EXTRA="x")
    assert env["PYTHONPATH"].split(os.pathsep) == [child.package_root(), "/elsewhere"]
    assert (env["KEEP"], env["EXTRA"]) == ("1", "x")
    assert child.python_env({})["PYTHONPATH"] == child.package_root()


def test_a_child_imports_the_same_code_from_anywhere(tmp_path: Path) -> None:
    # started where another rl_insight is (the working directory, and on PYTHONPATH): the child still runs ours
    decoy = tmp_path / "rl_insight"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy ran')\n")
    argv = child.python_command("rl_insight.child")
    assert argv == [sys.executable, "-m", "rl_insight.child"]
    out = subprocess.run([sys.executable, "-c", "import rl_insight.child as c; print(c.__file__)"], cwd=tmp_path,
                         capture_output=True, text=True, env=child.python_env(PYTHONPATH=str(tmp_path)), timeout=60)
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == Path(child.__file__).resolve()
