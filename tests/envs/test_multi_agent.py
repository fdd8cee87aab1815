"""Multi-agent envs (num_agents > 1) through the engine: one column per agent, inactive steps masked, and a single
policy controlling every agent learns the tag task of tests/envs/multi_agent_envs.py."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.envs.env_group import EnvGroup, env_num_agents
from sample_factory.envs.env_utils import make_env
from sample_factory.runner import Runner
from tests.envs.multi_agent_envs import TwoAgentTagEnv


def test_env_group_columns_tags_and_inactive_steps():
    envs = [TwoAgentTagEnv(episode_len=6, death_step=2, die_every=1) for _ in range(3)]
    group = EnvGroup(envs, seeds=[0, 1, 2])
    assert group.n == 6 and group.num_agents == 2
    group.reset()
    tags = group.obs["obs"][:, 0]
    np.testing.assert_array_equal(tags, [0, 1, 0, 1, 0, 1])  # column c is agent c % 2
    history = []
    for _ in range(12):
        bits = group.obs["obs"][:, 1].astype(np.int64)
        actions = bits ^ np.array([0, 1] * 3)  # the rewarded action of every agent
        group.step(actions)
        history.append((group.rewards.copy(), group.dones.copy(), group.active.copy()))
    rewards = np.stack([h[0] for h in history])
    active = np.stack([h[2] for h in history])
    dones = np.stack([h[1] for h in history])
    # agent 1 dies at step 2 of every episode: inactive for steps 3..6, never rewarded there
    assert not active[2:6, 1::2].any() and active[:, 0::2].all()
    assert (rewards[active] == 1).all() and (rewards[~active] == 0).all()
    assert dones[1, 1::2].all() and dones[5, 0::2].all()  # agent 1 at its death, agent 0 at the episode end
    assert not dones[5, 1::2].any()  # a dead agent does not finish twice
    np.testing.assert_array_equal(group.obs["obs"][:, 0], [0, 1, 0, 1, 0, 1])  # after the autoreset


def test_num_agents_seen_through_gym_make_wrappers():
    cfg = parse_cfg(["--env=tests.envs.multi_agent_envs:TwoAgentTag-v0"])
    assert env_num_agents(make_env(cfg)) == 2


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env", ["TwoAgentTag-v0", "TwoAgentTagMasked-v0"])
def test_single_policy_learns_multi_agent_tag(tmp_path, env):
    argv = [
        f"--env=tests.envs.multi_agent_envs:{env}",
        "--serial_mode=True",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--rollout=16",
        "--batch_size=256",
        "--use_rnn=False",
        "--encoder_mlp_layers=32",
        "--learning_rate=3e-3",
        "--num_epochs=4",
        "--value_bootstrap=False",  # the 8-step episodes really end at the time limit
        "--train_for_env_steps=40000",
        "--seed=1",
        f"--train_dir={tmp_path}",
        "--experiment=x",
    ]
    runner = Runner(parse_cfg(argv))
    assert runner.run() == 0
    b = runner.parts.buffers
    assert b.spec.agents_per_split == 2 * 4  # 4 envs per split x 2 agents
    assert not b.active.all()  # agent 1 died in some episodes: masked steps exist
    with open(tmp_path / "x" / "progress.csv") as f:
        rewards = [float(r["reward_p0"]) for r in csv.DictReader(f) if not math.isnan(float(r["reward_p0"]))]
    # Mean per-agent episode return: random play scores about 2.3 (3.4 with the mask), optimal play 6.75.
    assert rewards and max(rewards) > 5.0, rewards
    assert torch.isfinite(b.log_probs).all()


@pytest.mark.timeout(120)
def test_enjoy_plays_every_agent_of_a_multi_agent_env(tmp_path, capsys):
    from sample_factory.evaluation.enjoy import main as enjoy_main

    env = "--env=tests.envs.multi_agent_envs:TwoAgentTagMasked-v0"  # the env raises if a masked action arrives
    argv = [env, "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=2", "--rollout=8"]
    argv += ["--batch_size=32", "--use_rnn=True", "--rnn_size=16", "--train_for_env_steps=512"]
    assert Runner(parse_cfg([*argv, f"--train_dir={tmp_path}", "--experiment=x"])).run() == 0
    enjoy_argv = ["--experiment=x", f"--train_dir={tmp_path}", "--no_render=True", "--max_num_episodes=6"]
    assert enjoy_main([*enjoy_argv, "--seed=0"]) == 0
    out = capsys.readouterr().out
    lengths = [int(line.rsplit("length ", 1)[1]) for line in out.splitlines() if line.startswith("episode ")]
    # one episode per agent: 8 steps, or 3 for agent 1 when it dies early
    assert len(lengths) == 6 and set(lengths) <= {3, 8} and 3 in lengths
