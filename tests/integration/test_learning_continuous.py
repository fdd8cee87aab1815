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


# Time bounds catch hangs only: beside a full test suite on the same 2 cores (a slow machine) the Pendulum run took
# 180 s and the HalfCheetah run 224 s (45 s and 99 s in CI).
@pytest.mark.timeout(420)
def test_pendulum_improves(tmp_path):
    rewards = _train_rewards(tmp_path, ["--env=Pendulum-v1", "--train_for_env_steps=400000"], timeout=400)
    # A random policy scores about -1200 per episode; the trained one reaches about -200 here. Demand a clear margin
    # and a climb on the curve itself. The first rows average only the first few episodes (one fresh-clone CI run:
    # -889, then -1179, -1228), and on a slow machine they come later in env steps (beside a full test suite on the
    # same 2 cores: -568, -810, -821), so the start is the worst of the first three rows.
    assert max(rewards) > -500, rewards
    assert min(rewards[:3]) < max(rewards) - 300, rewards[:5]


@pytest.mark.timeout(520)
def test_halfcheetah_improves_with_the_mujoco_preset(tmp_path):
    pytest.importorskip("mujoco", reason="MuJoCo needs the [mujoco] extra: pip install -e .[mujoco]")
    flags = ["--env=HalfCheetah-v5", "--device=cpu", "--train_for_env_steps=150000"]
    rewards = _train_rewards(tmp_path, flags, timeout=500)
    # Random actions score about -300 per 1000-step episode. Measured with this preset: -334 at the start and +133
    # at the end of this 150k run (seed 0); demand a clear climb with room for other seeds.
    assert max(rewards) > -100, rewards
    assert min(rewards[:3]) < max(rewards) - 200, rewards[:5]  # a climb on the curve, whenever its first rows come
