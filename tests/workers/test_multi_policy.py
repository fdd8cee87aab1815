"""Several policies in one run (serial mode, so everything is inspectable): split rotation for single-agent envs,
and two policies mixed in one multi-agent env, where each agent's steps must reach its own policy's learner and
inactive steps must be masked."""

from __future__ import annotations

import numpy as np
import pytest

import tests.envs.multi_agent_envs  # noqa: F401  (registers the envs and the "by_agent" mapping)
from sample_factory.algo.appo import APPOAlgorithm
from sample_factory.config import parse_cfg
from sample_factory.evaluation.policy_api import load_policy
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.runner import Runner

BASE = [
    "--serial_mode=True",
    "--num_workers=1",
    "--rollout=16",
    "--batch_size=256",
    "--use_rnn=False",
    "--encoder_mlp_layers=32",
    "--seed=3",
    "--experiment=x",
]


def _capture_training(monkeypatch) -> list[tuple[int, dict]]:
    """Record (policy id, batch) of every training call."""
    calls = []
    train = APPOAlgorithm.train

    def spy(self, batch, version, policy_id=None):
        calls.append((policy_id, {k: v for k, v in batch.items()}))
        return train(self, batch, version, policy_id)

    monkeypatch.setattr(APPOAlgorithm, "train", spy)
    return calls


@pytest.mark.timeout(180)
def test_two_policies_mixed_in_one_env_route_each_agent_to_its_learner(tmp_path, monkeypatch):
    calls = _capture_training(monkeypatch)
    argv = [
        "--env=tests.envs.multi_agent_envs:TwoAgentTag-v0",
        *BASE,
        "--num_envs_per_worker=8",
        "--num_policies=2",
        "--policy_mapping=by_agent",
        "--learning_rate=3e-3",
        "--num_epochs=4",
        "--value_bootstrap=False",
        "--train_for_env_steps=10000",  # per policy (8,000 learned the rule for seeds 3-6, 4,000 missed one)
        f"--train_dir={tmp_path}",
    ]
    assert Runner(parse_cfg(argv)).run() == 0
    T = 16
    seen = {0: 0, 1: 0}
    masked_inactive = 0
    for pid, batch in calls:
        tags = batch["obs"]["obs"][:, :T, 0]  # [M, T] the agent index the env wrote into the observation
        mine = batch["policy_id"][:, :T] == pid
        active = batch["active"][:, :T]
        trained = mine & active
        assert trained.any()
        # every step of this policy belongs to agent `pid` (by_agent mapping): nothing of the other agent leaked
        assert (tags[trained] == pid).all(), pid
        # the other agent's steps are in the batch (shared slots) but not this policy's
        assert (batch["policy_id"][:, :T][(tags == 1 - pid) & active] != pid).all()  # (inactive obs are zeros)
        seen[pid] += int(trained.sum())
        masked_inactive += int((mine & ~active).sum())
    assert seen[0] > 0 and seen[1] > 0
    assert masked_inactive > 0  # agent 1 dies early in every second episode: its inactive steps exist and are masked

    # each policy learned its own agent's rule (reward when action == bit XOR agent index)
    for pid in (0, 1):
        policy = load_policy("x", tmp_path, policy_id=pid)
        for bit in (0, 1):
            action, _ = policy.act(np.array([pid, bit, 0.5], np.float32), deterministic=True)
            assert action == bit ^ pid, (pid, bit, action)


@pytest.mark.timeout(180)
def test_env_rotation_gives_every_policy_a_fair_share_of_whole_episodes(tmp_path, monkeypatch):
    calls = _capture_training(monkeypatch)
    argv = [
        "--env=CartPole-v1",
        *BASE,
        "--num_envs_per_worker=8",
        "--worker_num_splits=2",
        "--num_policies=3",
        "--train_for_env_steps=4000",  # per policy: some 150 episodes each
        f"--train_dir={tmp_path}",
    ]
    runner = Runner(parse_cfg(argv))
    assert runner.run() == 0
    # an env passes to the next policy at every episode start: the policies play equal numbers of episodes
    episodes = runner.parts.progress.num_episodes
    assert min(episodes) >= 0.9 * max(episodes) and min(episodes) > 50, episodes
    assert min(runner.parts.progress.env_frames) > 0, runner.parts.progress.env_frames
    for pid, batch in calls:
        mine = batch["policy_id"][:, :-1] == pid  # [M, T]
        assert mine.any(1).all()  # the learner copied out only trajectories its policy acted in
        # a trajectory changes hands only where an episode starts (is_first): every episode has one policy
        changes = batch["policy_id"][:, 1:] != batch["policy_id"][:, :-1]  # [M, T]
        assert batch["is_first"][:, 1:][changes].all()
    for p in range(3):
        assert list_checkpoints(tmp_path / "x" / f"checkpoint_p{p}")


@pytest.mark.timeout(120)
def test_sync_mode_trains_every_policy_on_each_whole_iteration(tmp_path, monkeypatch):
    """--async_rl=False with two policies: each learner gets every slot of an iteration and trains on its own
    columns of all of them, so the two learners' batches together are exactly the iteration (4 slots of 4 x 16)."""
    calls = _capture_training(monkeypatch)
    argv = ["--env=CartPole-v1", *BASE, "--async_rl=False", "--num_envs_per_worker=4", "--num_policies=2"]
    argv += ["--batch_size=64", "--num_batches_per_epoch=4", "--worker_num_splits=1", "--train_for_env_steps=600"]
    assert Runner(parse_cfg([*argv, f"--train_dir={tmp_path}"])).run() == 0
    by_policy = {0: [c for c in calls if c[0] == 0], 1: [c for c in calls if c[0] == 1]}
    assert len(by_policy[0]) == len(by_policy[1]) >= 2, [p for p, _ in calls]
    for (_, b0), (_, b1) in zip(by_policy[0], by_policy[1], strict=True):
        assert (b0["policy_id"][:, :-1] == 0).any(1).all() and (b1["policy_id"][:, :-1] == 1).any(1).all()
        own = (b0["policy_id"][:, :-1] == 0).sum() + (b1["policy_id"][:, :-1] == 1).sum()
        assert int(own) == 4 * 4 * 16  # every step of the iteration, trained by the policy that took it


@pytest.mark.timeout(120)
def test_enjoy_evaluates_the_chosen_policy(tmp_path, capsys):
    from sample_factory.evaluation.enjoy import main as enjoy_main

    argv = ["--env=CartPole-v1", *BASE, "--num_envs_per_worker=4", "--num_policies=2", "--train_for_env_steps=1000"]
    assert Runner(parse_cfg([*argv, f"--train_dir={tmp_path}"])).run() == 0
    common = ["--experiment=x", f"--train_dir={tmp_path}", "--no_render=True", "--max_num_episodes=2"]
    assert enjoy_main([*common, "--policy_index=1"]) == 0
    assert "checkpoint_p1" in capsys.readouterr().out
    assert enjoy_main([*common, "--policy_index=2"]) == 1
    assert "the experiment has 2 policies" in capsys.readouterr().err
