"""The prerequisites' hooks, run by a real pytest on a small suite: a missing prerequisite skips
its test on a developer's machine and fails it in CI, before its fixtures are set up — and a test
skipped by design stays skipped in CI whatever it would need (the container test outside
``make test-container`` on a machine without podman: CI once failed there)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

TESTS = Path(__file__).parent

SUITE = """
import pytest
from prerequisites import requires

MISSING = requires(False, "needs a thing this machine lacks")


@pytest.fixture
def set_up(tmp_path_factory):
    (tmp_path_factory.getbasetemp().parent / "fixture-ran").touch()


@MISSING
def test_missing(set_up):
    pass


@requires(True, "needs a thing this machine has")
def test_met():
    pass


@pytest.mark.skipif(True, reason="runs only when asked for")
@MISSING
def test_skipped_by_design(set_up):
    pass
"""

CONFTEST = """
from prerequisites import pytest_collection_modifyitems, pytest_configure, pytest_runtest_setup
"""


def run_suite(tmp_path: Path, ci: str) -> tuple[dict[str, tuple[str, str]], bool]:
    """Each test's outcome (passed, skipped, failed, error) and its message, from pytest's
    JUnit report; and whether any fixture was set up."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    report = tmp_path / "report.xml"
    basetemp = tmp_path / "run" / "base"
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(TESTS)}
    run = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider"),
            *(f"--junitxml={report}", f"--basetemp={basetemp}", "--rootdir", str(tmp_path)),
            str(tmp_path / "test_suite.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    outcomes: dict[str, tuple[str, str]] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        found = [child for child in case if child.tag in ("skipped", "failure", "error")]
        tag = found[0].tag if found else "passed"
        message = found[0].get("message", "") if found else ""
        outcomes[case.get("name", "")] = (tag, message)
    assert sorted(outcomes) == ["test_met", "test_missing", "test_skipped_by_design"], run.stdout
    return outcomes, (basetemp.parent / "fixture-ran").exists()


def test_off_ci_a_missing_prerequisite_skips_its_test(tmp_path: Path) -> None:
    outcomes, fixture_ran = run_suite(tmp_path, ci="")
    assert outcomes["test_missing"] == ("skipped", "needs a thing this machine lacks")
    assert outcomes["test_met"][0] == "passed"
    assert outcomes["test_skipped_by_design"][0] == "skipped"
    assert not fixture_ran


def test_in_ci_a_missing_prerequisite_fails_its_test_before_its_fixtures(
    tmp_path: Path,
) -> None:
    outcomes, fixture_ran = run_suite(tmp_path, ci="true")
    tag, message = outcomes["test_missing"]
    assert tag in ("failure", "error")
    assert "CI=true, and a prerequisite is missing: needs a thing this machine lacks" in message
    assert outcomes["test_met"][0] == "passed"
    assert not fixture_ran


def test_in_ci_a_test_skipped_by_design_stays_skipped(tmp_path: Path) -> None:
    outcomes, _ = run_suite(tmp_path, ci="true")
    assert outcomes["test_skipped_by_design"] == ("skipped", "runs only when asked for")
