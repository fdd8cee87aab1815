"""Continuous control learns: Pendulum-v1 (Box actions, both normalizers, the continuous_control preset) and MuJoCo's
HalfCheetah-v5 (the mujoco preset, synchronous PPO) improve their mean episode reward by a clear margin within short
multi-process runs."""

import csv
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _train_rewards(tmp_path: Path, flags: list[str], timeout: float) -> list[float]:
    """Run train.py with `flags` (2 workers) to its end; the mean-reward column of its progress.csv."""
    cmd = [sys.executable, "train.py", "--num_workers=2", "--experiment=x", f"--train_dir={tmp_path}"]
    out = subprocess.run(
        [*cmd, "--report_interval_sec=1", *flags], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [r for r in csv.DictReader(open(tmp_path / "x" / "progress.csv")) if r["reward_p0"] != "nan"]
    return [float(r["reward_p0"]) for r in rows]


@pytest.mark.timeout(240)
def test_pendulum_improves(tmp_path):
    rewards = _train_rewards(tmp_path, ["--env=Pendulum-v1", "--train_for_env_steps=400000"], timeout=220)
    # A random policy scores about -1200 per episode; the trained one reaches about -200 here. Demand a clear margin.
    # The first row averages only the first few episodes (one fresh-clone CI run: -889, then -1179, -1228), so the
    # start is the best of the first three rows.
    assert min(rewards[:3]) < -900, rewards[:5]
    assert max(rewards) > -500, rewards


@pytest.mark.timeout(300)
def test_halfcheetah_improves_with_the_mujoco_preset(tmp_path):
    pytest.importorskip("mujoco", reason="MuJoCo needs the [mujoco] extra: pip install -e .[mujoco]")
    flags = ["--env=HalfCheetah-v5", "--device=cpu", "--train_for_env_steps=150000"]
    rewards = _train_rewards(tmp_path, flags, timeout=280)
    # Random actions score about -300 per 1000-step episode. Measured with this preset: -334 at the start and +133
    # at the end of this 150k run (seed 0); demand a clear climb with room for other seeds.
    assert min(rewards[:3]) < -150, rewards[:5]
    assert max(rewards) > -100, rewards
