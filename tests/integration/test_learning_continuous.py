"""Continuous control learns: Pendulum-v1 (Box actions, both normalizers, the continuous_control preset) improves
its mean episode reward by a clear margin within a short multi-process run."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(240)
def test_pendulum_improves(tmp_path):
    cmd = [sys.executable, "train.py", "--env=Pendulum-v1", "--num_workers=2", "--experiment=p"]
    cmd += [f"--train_dir={tmp_path}", "--train_for_env_steps=400000", "--report_interval_sec=1"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=220)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [r for r in csv.DictReader(open(tmp_path / "p" / "progress.csv")) if r["reward_p0"] != "nan"]
    rewards = [float(r["reward_p0"]) for r in rows]
    # A random policy scores about -1200 per episode; the trained one reaches about -200 here. Demand a clear margin.
    # The first row averages only the first few episodes (one fresh-clone CI run: -889, then -1179, -1228), so the
    # start is the best of the first three rows.
    assert min(rewards[:3]) < -900, rewards[:5]
    assert max(rewards) > -500, rewards
