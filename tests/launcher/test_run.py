"""`python -m sample_factory.launcher.run`, Sample Factory 2's launcher path, runs our launcher (issue 53: it failed
with no pointer)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_sample_factory_2_launcher_path_runs_our_launcher():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "sample_factory.launcher.run", "--run=examples/sweeps/cartpole_lr.py", "--dry_run"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=100)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count(f"--train_dir={REPO / 'train_dir' / 'cartpole_lr'}") == 7, out.stdout
