"""`python -m tests` (tests/__main__.py): a run leaves the tree as it was. The browser tests' screenshots go under
test-artifacts/; the ones docs/ shows are written into docs/img/ only by `python -m tests --docs-images` (a full run
used to rewrite four tracked images)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tests.__main__ as runner
from tests.e2e.test_ui import ARTIFACTS, DOCS_IMAGES_ENV, DOCS_IMG, ROOT, doc_image


def test_a_docs_screenshot_goes_to_the_artifacts_unless_refreshing_on_purpose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DOCS_IMAGES_ENV, raising=False)
    assert Path(doc_image("ui-stacks.png")) == ARTIFACTS / "ui-stacks.png"
    monkeypatch.setenv(DOCS_IMAGES_ENV, "1")
    assert Path(doc_image("ui-stacks.png")) == DOCS_IMG / "ui-stacks.png"


def test_docs_images_runs_the_browser_pass_alone_with_the_switch_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DOCS_IMAGES_ENV, raising=False)
    calls: list[tuple[list[str], str | None]] = []
    monkeypatch.setattr(runner, "run",
                        lambda args, lane=None: calls.append((args, os.environ.get(DOCS_IMAGES_ENV))) or 0)
    assert runner.main(["--docs-images", "-k", "stacks"]) == 0
    assert calls == [(["-q", "-m", "e2e", "-k", "stacks"], "1")]
    monkeypatch.delenv(DOCS_IMAGES_ENV)
    calls.clear()
    assert runner.main(["-x"]) == 0  # the usual run: both passes, the switch off
    assert [args[-2:] for args, _ in calls] == [["not e2e and not alone and not full", "-x"],
                                                ["(e2e or alone) and not full", "-x"]]
    assert {env for _, env in calls} == {None}
    calls.clear()
    assert runner.main(["--full"]) == 0  # everything: the full lane's tests too
    assert [args[-1] for args, _ in calls] == ["not e2e and not alone", "(e2e or alone)"]


def test_every_full_lane_entry_names_a_test_that_exists_and_says_what_covers_its_part() -> None:
    """tests/full_lane.py: a renamed or deleted test would otherwise leave a dead entry (and a renamed one would slip
    back into the standard run unseen)."""
    import ast

    from tests.full_lane import FULL_ONLY, in_full_lane

    for entry, why in FULL_ONLY.items():
        module, _, name = entry.partition("::")
        path = ROOT / module
        assert path.is_file(), f"{entry}: no such module"
        if name:
            tests = {f.name for f in ast.walk(ast.parse(path.read_text())) if isinstance(f, ast.FunctionDef)}
            assert name.split("[", 1)[0] in tests, f"{entry}: no such test in {module}"
        assert "test_" in why or "tests/" in why, f"{entry}: say which standard-lane test covers its part"
        assert in_full_lane(entry if "[" in name else f"{entry}[param]" if name else f"{entry}::test_x")
    assert not in_full_lane("tests/unit/test_suite_runner.py::test_compiled_modules_are_kept_outside_the_tree")


def test_fast_runs_one_pass_without_the_external_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(runner, "run", lambda args, lane=None: calls.append([*args, lane]) or 0)
    assert runner.main(["--fast", "-x"]) == 0
    assert calls == [["-q", "-n", str(runner.FAST_WORKERS), "--dist", "load", "-m", "not socket and not slow",
                      "tests/unit", "-x", runner.IN_PROCESS_LANE]]
    calls.clear()
    assert runner.main(["--fast", "tests/unit/cli"]) == 0  # (a path given: that path only)
    assert calls[0][-2:] == ["tests/unit/cli", runner.IN_PROCESS_LANE]


def test_the_lanes_split_by_what_a_test_starts() -> None:
    """tests/conftest.py marks a test `external` from where it lives and what it names; spot checks both ways."""
    from tests.lanes import process_starters as _process_starters

    export_tests = _process_starters(str(ROOT / "tests" / "unit" / "test_export.py"))
    assert "test_export_cli_for_runs_already_in_the_store" in export_tests  # (a nested cli() runs a subprocess)
    assert "test_a_failing_exporter_never_affects_ingest" not in export_tests
    runs_api = _process_starters(str(ROOT / "tests" / "unit" / "server" / "routes" / "test_runs_api.py"))
    assert "test_runs_metrics_series_spans_insights" not in runs_api  # (an in-process server)


def test_no_test_writes_into_docs_img_but_through_doc_image() -> None:
    writers = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*.py")
               if p.name not in ("test_ui.py", "test_suite_runner.py")
               and ('"docs" / "img"' in p.read_text() or '"docs/img' in p.read_text())]
    assert writers == []


def test_compiled_modules_are_kept_outside_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    env = runner.bytecode_kept({"PYTHONDONTWRITEBYTECODE": "1", "HOME_ISH": "x"})
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["HOME_ISH"] == "x"
    assert not Path(env["PYTHONPYCACHEPREFIX"]).is_relative_to(ROOT)
    assert runner.bytecode_kept({"PYTHONPYCACHEPREFIX": "/elsewhere"})["PYTHONPYCACHEPREFIX"] == "/elsewhere"
