"""Data-parallel learner groups in real runs (2 CPU ranks over gloo): DQN with its replay buffer on rank 0 trains,
checkpoints (buffer and counters included) and resumes; two policies get a group each."""

from __future__ import annotations

import torch

GROUP = ["--num_workers=2", "--learners_per_policy=2", "--device=cpu", "--report_interval_sec=2"]


def test_dqn_group_trains_checkpoints_and_resumes(tmp_path, train_run):
    dqn = [*GROUP, "--algo=DQN", "--learning_starts=2000", "--save_replay_buffer=True", "--batch_size=64"]
    # Budgets count collected env steps, and actors run ahead of the learner by the trajectory slots: 8 slots x 8 envs
    # x rollout 32 = 2,048 samples with 16 envs per worker (the preset's 64 made it 8,192, so a learner group slow to
    # start on a loaded CI VM had trained on nothing when 8,000 were collected). So the learner must have taken in
    # >= 5,952 samples, past --learning_starts in an iteration it finished, and the resume trains on likewise.
    dqn += ["--num_envs_per_worker=16"]
    run = train_run([*dqn, "--train_for_env_steps=8000"], tmp_path)
    assert run.wait(timeout=150) == 0, run.describe()
    assert "placement: learners 0.0: cpu, 0.1: cpu | policy workers 0.0: cpu | policy 0: 2 ranks over gloo" in (
        run.output
    ), run.describe()
    run.assert_no_leftovers()
    state = torch.load(run.checkpoints()[-1], weights_only=False)
    counters = state["algo"]["counters"]
    assert state["policy_version"] > 0 and counters["replayed"] > 0, counters
    assert "replay" in state["algo"]

    resumed = train_run([*dqn, "--train_for_env_steps=12000"], tmp_path)
    assert resumed.wait(timeout=150) == 0, resumed.describe()
    assert "policy 0 resumed from" in resumed.output, resumed.describe()
    resumed.assert_no_leftovers()
    after = torch.load(resumed.checkpoints()[-1], weights_only=False)
    assert after["policy_version"] > state["policy_version"]
    assert after["algo"]["counters"]["sampled"] > counters["sampled"]


def test_two_policies_get_a_group_each(tmp_path, train_run):
    # An env-step budget per policy (was 12 s, which a slow VM could spend starting the 4 ranks: a learner that has
    # not started when the run stops writes no checkpoint)
    run = train_run([*GROUP, "--num_policies=2", "--train_for_env_steps=8000"], tmp_path)
    assert run.wait(timeout=150) == 0, run.describe()
    assert "policy 0: 2 ranks over gloo, policy 1: 2 ranks over gloo" in run.output, run.describe()
    assert {"sf_learner_0_1", "sf_learner_1_1"} <= run.names_seen(), run.describe()
    run.assert_no_leftovers()
    for p in (0, 1):
        assert list((run.exp_dir / f"checkpoint_p{p}").glob("checkpoint_*.pth")), run.describe()
