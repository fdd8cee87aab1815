"""Every observation kind x action kind trains serially on the small envs of tests/envs/space_envs.py: actions
reach the env well-formed (and never masked), log-probs of stored actions are finite and have one value per
sample, and the learner's updates change the weights."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.envs.spaces import ACTION_MASK_KEY, with_dict_observations
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runner import Runner
from tests.envs.space_envs import SpaceComboEnv, combinations


def _argv(tmp_path, env_id: str) -> list[str]:
    return [
        f"--env=tests.envs.space_envs:{env_id}",
        "--serial_mode=True",
        "--num_workers=1",
        "--num_envs_per_worker=4",
        "--rollout=8",
        "--batch_size=32",
        "--num_batches_per_epoch=1",  # the space defaults take 8: no update within the budget
        "--use_rnn=False",
        "--encoder_mlp_layers=16",
        "--train_for_env_steps=192",
        "--seed=0",
        f"--train_dir={tmp_path}",
        "--experiment=x",
    ]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("obs_kind,act_kind", combinations(), ids=[f"{o}-{a}" for o, a in combinations()])
def test_space_combination_trains(tmp_path, obs_kind, act_kind):
    cfg = parse_cfg(_argv(tmp_path, f"SpaceCombo-{obs_kind}-{act_kind}-v0"))
    runner = Runner(cfg)
    assert runner.run() == 0
    env = with_dict_observations(SpaceComboEnv(obs_kind, act_kind))
    # The initial weights: the runner seeds torch with --seed right before building the model.
    torch.manual_seed(cfg.seed)
    initial = ActorCritic(cfg, env.observation_space, env.action_space)
    state = torch.load(list_checkpoints(tmp_path / "x" / "checkpoint_p0")[-1], weights_only=False)
    assert state["policy_version"] > 0
    trained = ActorCritic(cfg, env.observation_space, env.action_space)
    trained.load_state_dict(state["model"])
    changed = [k for k, v in initial.state_dict().items() if not torch.equal(v, state["model"][k])]
    assert any(k.startswith("policy_head") for k in changed) and any(k.startswith("value_head") for k in changed)

    # Stored actions of the last rollouts: one finite log-prob per sample under the trained policy.
    b = runner.parts.buffers
    obs = {k: v[:, :-1].reshape(-1, *v.shape[3:]) for k, v in b.obs.items()}  # {key: [S*T*n, *shape]}
    actions = b.actions[:, :-1].reshape(-1, *b.actions.shape[3:])
    with torch.no_grad():
        params, values, _ = trained.forward_step(obs, None)
        dist = trained.distribution(params, obs.get(ACTION_MASK_KEY))
        log_probs = dist.log_prob(actions)
    N = actions.shape[0]
    assert params.shape[0] == N and values.shape == (N,) and log_probs.shape == (N,)
    written = b.policy_version[:, :-1].reshape(-1) > 0  # positions acted on after the first update
    assert written.any() and torch.isfinite(log_probs[written]).all()
    sampled = dist.sample()
    assert sampled.shape == actions.shape
    if ACTION_MASK_KEY in obs:  # sampling never picks a masked action
        mask = obs[ACTION_MASK_KEY].bool()
        first = sampled if sampled.dim() == 1 else sampled[:, 0]
        assert mask[torch.arange(N), first.long()].all()


def test_dict_observation_space_keys_reach_the_encoder():
    env = SpaceComboEnv("dict", "discrete")
    cfg = parse_cfg(["--env=CartPole-v1", "--encoder_mlp_layers=8"])
    model = ActorCritic(cfg, env.observation_space, env.action_space)
    enc = model.towers[0].encoder
    assert set(enc.encoders) == {"screen", "vars", "room"}
    obs = {k: torch.as_tensor(np.stack([env.observation_space[k].sample() for _ in range(2)])) for k in enc.encoders}
    params, values, _ = model.forward_step(obs, None)
    assert params.shape == (2, 3) and values.shape == (2,)


def test_action_mask_is_not_encoded_and_masks_all_parts():
    env = SpaceComboEnv("dict_mask", "multidiscrete")
    cfg = parse_cfg(["--env=CartPole-v1", "--encoder_mlp_layers=8"])
    model = ActorCritic(cfg, env.observation_space, env.action_space)
    assert model.encoded_keys == ["obs"]
    mask = torch.zeros(64, 7, dtype=torch.int8)
    mask[:, 2] = 1  # part 0: only action 2
    mask[:, 3 + 1] = 1  # part 1: only action 1
    obs = {"obs": torch.randn(64, 4), ACTION_MASK_KEY: mask}
    params, _, _ = model.forward_step(obs, None)
    dist = model.distribution(params, mask)
    a = dist.sample()
    assert (a[:, 0] == 2).all() and (a[:, 1] == 1).all()
    assert torch.allclose(dist.entropy(), torch.zeros(64), atol=1e-5)  # one allowed action per part
    assert isinstance(env.observation_space, gym.spaces.Dict)


def test_tuple_observations_become_a_dict_keyed_by_position():
    env = with_dict_observations(SpaceComboEnv("tuple", "discrete"))
    assert env.observation_space == gym.spaces.Dict(
        {"0": gym.spaces.Discrete(5), "1": gym.spaces.Box(-1.0, 1.0, (4,), np.float32)}
    )
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"0", "1"} and env.observation_space.contains(obs)
    obs, *_ = env.step(1)
    assert env.observation_space.contains(obs)
    many = gym.spaces.Tuple([gym.spaces.Discrete(2)] * 12)  # keys zero-padded: they sort in the Tuple's order
    wrapped = with_dict_observations(gym.make("SpaceCombo-vector-discrete-v0"))
    assert wrapped.observation_space == gym.make("SpaceCombo-vector-discrete-v0").observation_space  # untouched
    wrapped.unwrapped.observation_space = many
    assert list(with_dict_observations(wrapped).observation_space) == [f"{i:02d}" for i in range(12)]
