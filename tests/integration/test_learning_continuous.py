"""Continuous control learns: Pendulum-v1 (Box actions, both normalizers, the continuous_control preset, with and
without gSDE) and MuJoCo's HalfCheetah-v5 (the mujoco preset, synchronous PPO) improve their mean episode reward by a
clear margin within short multi-process runs.

All three are claims about a preset's learning quality, which the benchmark suites also measure
(benchmarks/learning_suites.py, docs/results.md): they are marked slow (`make test-slow`). On a VM with half
the CPU (`taskset -c 0`) the Pendulum run took 85-119 s of the suite (22 s on 2 cores): a learning run is CPU-bound,
so it grows with the missing CPU where most tests do not (benchmarks/notebook.md, "Where the CPU goes"). `make test`
keeps the same code paths:
- Box actions and both normalizers: a multi-process run in tests/integration/test_env_smoke.py::test_mujoco_smoke
  (HalfCheetah with the mujoco preset), serial Pendulum-v1 runs (tests/integration/test_runs.py, bit-reproducible;
  tests/experiment/test_checkpoints_resume.py, exact resume), the APPO learner loop on Pendulum-v1
  (tests/benchmarks/test_benchmark_learner.py) and the Gaussian's math (tests/algo);
- gSDE: serial runs (tests/integration/test_runs.py, tests/experiment/test_checkpoints_resume.py) and its parts
  (tests/algo/test_sde.py, tests/workers);
- synchronous PPO: tests/integration/test_runs.py::test_sync_mode_zero_lag."""

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
@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize(
    "sde",
    # gsde: the noise of held exploration matrices (--use_sde, algo/sde.py) through the whole multi-process path:
    # -400 at 206k and 235k env steps (seeds 0, 1); 30 s on 2 cores and 134 s on one (`taskset -c 0`).
    [False, True],
    ids=["gaussian", "gsde"],
)
def test_pendulum_improves(tmp_path, sde):
    # The run stops once its mean reward over 100 episodes reaches -400 (--stop_at_reward; 400k env steps at most).
    flags = ["--env=Pendulum-v1", "--train_for_env_steps=400000", "--stop_at_reward=-400", f"--use_sde={sde}"]
    rewards = _train_rewards(tmp_path, flags, timeout=400)
    # A random policy scores about -1200 per episode; the trained one reaches about -200 in 400k env steps. Demand a
    # clear margin and a climb on the curve itself: its lowest point comes before its highest, 300 below it. The first
    # rows average only the first few episodes and say little (-889, then -1179, -1228 in one fresh-clone CI run; -635
    # for the first 5k env steps, then -1195 at 56k in a run stopped at -400 at 170k steps, 2026-11-26).
    assert max(rewards) > -500, rewards
    low, high = rewards.index(min(rewards)), rewards.index(max(rewards))
    assert low < high and rewards[high] - rewards[low] > 300, (low, high, rewards)


@pytest.mark.slow
@pytest.mark.timeout(520)
def test_halfcheetah_improves_with_the_mujoco_preset(tmp_path):
    pytest.importorskip("mujoco", reason="MuJoCo needs the [mujoco] extra: pip install -e .[mujoco]")
    flags = ["--env=HalfCheetah-v5", "--device=cpu", "--train_for_env_steps=150000"]
    rewards = _train_rewards(tmp_path, flags, timeout=500)
    # Random actions score about -300 per 1000-step episode. Measured with this preset: -334 at the start and +133
    # at the end of this 150k run (seed 0); demand a clear climb with room for other seeds.
    assert max(rewards) > -100, rewards
    assert min(rewards[:3]) < max(rewards) - 200, rewards[:5]  # a climb on the curve, whenever its first rows come
