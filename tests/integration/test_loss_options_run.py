"""A real CartPole run (2 workers, processes) with the Sample Factory 2 loss options on: symmetric-KL exploration
loss, a KL penalty to the behaviour policy, the unbiased ratio clip, a random start delay per split, and W&B logging
in offline mode (no network). It must learn (mean reward 300, the learning tests' PATH_TARGET, within the feed-forward
learning test's budget; the run stops there), report the new loss terms as finite statistics to TensorBoard and W&B,
and leave no process (W&B's service included) or shared memory behind.

Measured on a 2-core machine: 450 reached at 165k env steps (about 20 s) in a first run."""

from __future__ import annotations

import math
import os

import pytest

from tests.experiment.wandb_files import history_rows, offline_runs
from tests.integration.conftest import progress_samples_trained, tensorboard_tags
from tests.integration.test_learning import ATTEMPTS, BUDGET, PATH_TARGET

LOSS_FLAGS = [
    "--exploration_loss=symmetric_kl",
    "--exploration_loss_coeff=0.003",
    "--kl_loss_coeff=0.1",
    "--ppo_clip_mode=unbiased",
    "--decorrelate_experience_max_seconds=1",
]


@pytest.mark.timeout(800)
def test_loss_options_learn_cartpole_and_log_to_wandb_offline(tmp_path, train_run):
    pytest.importorskip("wandb")
    for attempt in range(1, ATTEMPTS + 1):  # one retry in a fresh folder, as the learning tests (unseeded runs)
        wandb_dir = tmp_path / f"wandb{attempt}"
        wandb_dir.mkdir()
        run = train_run(
            [
                "--num_workers=2",
                f"--train_for_env_steps={BUDGET}",
                f"--stop_at_reward={PATH_TARGET}",
                "--report_interval_sec=1",
                "--experiment_summaries_interval=2",
                "--with_wandb",
                *LOSS_FLAGS,
            ],
            tmp_path / f"attempt{attempt}",
            extra_env={"WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_SILENT": "true"},
        )
        rc = run.wait(timeout=380)
        assert rc == 0, run.describe()
        assert (progress_samples_trained(run) or 0) > 0, run.describe()
        run.assert_no_leftovers()

        tags = tensorboard_tags(run.exp_dir / ".summary/0")
        assert {"train/kl_loss", "train/symmetric_kl", "train/entropy", "train/approx_kl"} <= tags, sorted(tags)
        [run_file] = offline_runs(wandb_dir)
        rows = history_rows(run_file)
        train_rows = [r for r in rows if "train/kl_loss" in r]
        assert train_rows, rows[:3]
        for r in train_rows:
            assert all(math.isfinite(r[k]) for k in ("train/kl_loss", "train/symmetric_kl", "train/loss")), r
            assert r["train/kl_loss"] >= 0 and r["train/symmetric_kl"] >= 0
        assert any("reward/mean" in r and "env_steps" in r for r in rows)

        curve = [(int(r["env_steps"]), float(r["reward_p0"])) for r in run.progress_rows()]
        best = max((r for s, r in curve if s <= BUDGET and not math.isnan(r)), default=float("nan"))
        if best >= PATH_TARGET:
            return
        print(f"attempt {attempt}: best mean reward {best:.1f} < {PATH_TARGET}; curve {curve}")
    raise AssertionError(f"no run reached mean reward {PATH_TARGET} within {BUDGET} env steps")


@pytest.mark.timeout(120)
def test_symmetric_kl_with_box_actions_stops_at_start_with_one_line(tmp_path, train_run):
    run = train_run(["--num_workers=2", "--exploration_loss=symmetric_kl"], tmp_path / "td", env_id="Pendulum-v1")
    rc = run.wait(timeout=90)
    assert rc != 0, run.describe()
    assert "--exploration_loss=symmetric_kl needs discrete actions" in run.output, run.describe()
    assert "Traceback" not in run.output, run.describe()
    assert not (tmp_path / "td" / "x").exists()  # a run that never started leaves no experiment folder
    run.assert_no_leftovers()


@pytest.mark.timeout(120)
def test_a_run_that_never_started_keeps_the_files_of_a_prepared_folder(tmp_path, train_run):
    """A benchmark harness makes the experiment folder and its log before train.py: a run that fails at start removes
    only what it created (it once deleted the harness's log with the folder)."""
    exp = tmp_path / "td" / "x"
    exp.mkdir(parents=True)
    (exp / "benchmark.log").write_text("the harness's log\n")
    run = train_run(["--num_workers=2", "--exploration_loss=symmetric_kl"], tmp_path / "td", env_id="Pendulum-v1")
    rc = run.wait(timeout=90)
    assert rc != 0, run.describe()
    assert os.listdir(exp) == ["benchmark.log"], run.describe()
    run.assert_no_leftovers()
