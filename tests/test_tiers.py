"""The two test tiers of tests/conftest.py: under --unit (make check) a test that starts a process fails with the
line that says where it belongs, tests marked `process` (or listed in PROCESS_TESTS) are deselected, and without
--unit (make test) everything runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # runs pytest itself

TESTS = Path(__file__).resolve().parent
SAMPLE = """
import multiprocessing
import os
import subprocess

import pytest


def test_pure():
    assert sum(range(4)) == 6


def test_runs_a_command():
    subprocess.run(["true"], check=True)


def test_starts_a_process():
    p = multiprocessing.get_context("spawn").Process(target=os.getpid)
    p.start()
    p.join()


@pytest.fixture(scope="module")
def server():
    subprocess.run(["true"], check=True)


def test_through_a_fixture(server):
    pass


@pytest.mark.process
def test_marked():
    subprocess.run(["true"], check=True)
"""


def _run(tmp_path: Path, *args: str) -> str:
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "integration").mkdir()
    (tmp_path / "integration" / "test_listed.py").write_text("import os\n\ndef test_forks():\n    os.system('true')\n")
    cmd = [sys.executable, "-m", "pytest", str(tmp_path), "-q", "-p", "no:cacheprovider", "-rfE", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    return out.stdout + out.stderr


def test_unit_tier_fails_a_test_that_starts_a_process(tmp_path):
    out = _run(tmp_path, "--unit")
    assert "2 failed, 1 passed, 2 deselected, 1 error" in out, out  # test_marked and the listed file: deselected
    for kind, test, what in [
        ("FAILED", "test_runs_a_command", "subprocess"),
        ("FAILED", "test_starts_a_process", "multiprocessing"),
        ("ERROR", "test_through_a_fixture", "subprocess"),  # a fixture that starts one fails its test too
    ]:
        assert f"{kind} test_sample.py::{test} - conftest.ProcessStarted" in out, out
        assert f"this test does ({what})" in out, out
    assert "mark it @pytest.mark.process or list its file in PROCESS_TESTS" in out
    assert "PytestUnknownMarkWarning" not in out


def test_full_tier_runs_everything(tmp_path):
    out = _run(tmp_path)
    assert "6 passed" in out, out
