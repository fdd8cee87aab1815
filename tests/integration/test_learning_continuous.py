"""Continuous control learns: Pendulum-v1 (Box actions, both normalizers, the continuous_control preset) and MuJoCo's
HalfCheetah-v5 (the mujoco preset, synchronous PPO) improve their mean episode reward by a clear margin within short
multi-process runs."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _rewards(tmp_path: Path, exp: str) -> list[float]:
    rows = [r for r in csv.DictReader(open(tmp_path / exp / "progress.csv")) if r["reward_p0"] != "nan"]
    return [float(r["reward_p0"]) for r in rows]


@pytest.mark.timeout(240)
def test_pendulum_improves(tmp_path):
    cmd = [sys.executable, "train.py", "--env=Pendulum-v1", "--num_workers=2", "--experiment=p"]
    cmd += [f"--train_dir={tmp_path}", "--train_for_env_steps=400000", "--report_interval_sec=1"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=220)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rewards = _rewards(tmp_path, "p")
    # A random policy scores about -1200 per episode; the trained one reaches about -200 here. Demand a clear margin.
    # The first row averages only the first few episodes (one fresh-clone CI run: -889, then -1179, -1228), so the
    # start is the best of the first three rows.
    assert min(rewards[:3]) < -900, rewards[:5]
    assert max(rewards) > -500, rewards


@pytest.mark.timeout(300)
def test_halfcheetah_improves_with_the_mujoco_preset(tmp_path):
    pytest.importorskip("mujoco", reason="MuJoCo needs the [mujoco] extra: pip install -e .[mujoco]")
    cmd = [sys.executable, "train.py", "--env=HalfCheetah-v5", "--num_workers=2", "--experiment=h", "--device=cpu"]
    cmd += [f"--train_dir={tmp_path}", "--train_for_env_steps=150000", "--report_interval_sec=1"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rewards = _rewards(tmp_path, "h")
    # Random actions score about -300 per 1000-step episode. Measured with this preset: -334 at the start and +133
    # at the end of this 150k run (seed 0); demand a clear climb with room for other seeds.
    assert min(rewards[:3]) < -150, rewards[:5]
    assert max(rewards) > -100, rewards
