"""train.py's start (issue 33 item 8): an unknown --env and an experiment another run holds are answered at once,
before torch is imported or the experiment folder is touched, as fast as argument errors."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sample_factory.experiment.folder import ExperimentLock

REPO_ROOT = Path(__file__).resolve().parents[1]
# main() in a fresh interpreter; afterwards, whether torch had been imported when the error came.
PROBE = (
    "import sys\n"
    "from sample_factory.train import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit as e:\n"
    "    print(e, file=sys.stderr)\n"
    "print('torch imported' if 'torch' in sys.modules else 'torch not imported')\n"
)
# Generous for a loaded 2-core machine: the check takes about 1 s; before it was checked first, 9-21 s.
ANSWER_WITHIN_SEC = 8.0


def _start(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, f"--train_dir={tmp_path}", *flags],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.monotonic() - start


@pytest.mark.parametrize(
    ("env", "suggested"),
    [
        ("atari_pongg", "atari_pong"),  # in the user's naming scheme, not ALE's Pong
        ("ALE/Pongg-v5", "ALE/Pong-v5"),
        ("atari_spaceinvader", "atari_space_invaders"),
        ("CartPol-v1", "CartPole-v1"),
    ],
)
def test_unknown_env_is_answered_before_anything_starts(tmp_path, env, suggested):
    proc, elapsed = _start(tmp_path, f"--env={env}", "--experiment=typo")
    assert proc.stdout.strip() == "torch not imported", proc.stdout + proc.stderr
    assert f"train.py: error: unknown env '{env}'; did you mean {suggested}," in proc.stderr, proc.stderr
    assert "new experiment" not in proc.stdout + proc.stderr
    assert not (tmp_path / "typo").exists()
    assert elapsed < ANSWER_WITHIN_SEC, elapsed


def test_locked_experiment_is_answered_before_anything_starts(tmp_path):
    lock = ExperimentLock(tmp_path / "busy")
    lock.acquire()  # as a running training run holds it
    try:
        proc, elapsed = _start(tmp_path, "--env=CartPole-v1", "--experiment=busy")
    finally:
        lock.release()
    assert proc.stdout.strip() == "torch not imported", proc.stdout + proc.stderr
    assert f"is already being trained by pid {os.getpid()}" in proc.stderr, proc.stderr
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == [".lock"]
    assert elapsed < ANSWER_WITHIN_SEC, elapsed


@pytest.mark.parametrize("script", ["train.py", "enjoy.py"])
def test_without_the_virtualenv_the_scripts_say_so_in_one_line(script):
    """`python3 train.py` under a Python without the dependencies printed a 14-line traceback (issue 53)."""
    repo = Path(__file__).resolve().parents[1]
    hide = "import runpy, sys; sys.modules.update(gymnasium=None, torch=None, numpy=None)"  # as if not installed
    code = f"{hide}; sys.argv = [{script!r}, '--env=CartPole-v1']; runpy.run_path({script!r}, run_name='__main__')"
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == "", out
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{script}: error: "), out.stderr
    assert "is not installed for" in lines[0] and f".venv/bin/python {script}" in lines[0], lines[0]
