"""MultiDiscrete and Tuple actions end to end: serial training stores actions of the right shape, the envs receive
well-formed actions (they assert it), log-probs are finite, and a learning step changes the weights."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import tests.envs.action_envs  # noqa: F401  (registers the envs)
from sample_factory.algo.distributions import make_distribution, num_action_params
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.train import main as train_main


@pytest.mark.parametrize(
    "space,k",
    [
        (gym.spaces.MultiDiscrete([3, 4]), 2),
        (gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32))), 3),
    ],
)
def test_composite_distribution_shapes_and_log_prob(space, k):
    torch.manual_seed(0)
    params = torch.randn(5, num_action_params(space))
    log_std = torch.zeros(2)
    dist = make_distribution(space, params, log_std)
    a = dist.sample()
    assert a.shape == (5, k)
    lp = dist.log_prob(a)
    assert lp.shape == (5,) and torch.isfinite(lp).all()
    assert dist.entropy().shape == (5,)
    assert torch.allclose(dist.kl(dist), torch.zeros(5), atol=1e-6)
    # the parts are independent: the joint log-prob is the sum of the parts'
    if isinstance(space, gym.spaces.MultiDiscrete):
        ref = torch.log_softmax(params[:, :3], -1).gather(1, a[:, :1]).squeeze(1)
        ref = ref + torch.log_softmax(params[:, 3:], -1).gather(1, a[:, 1:]).squeeze(1)
        torch.testing.assert_close(lp, ref)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("env", ["MultiDiscreteTarget-v0", "MultiDiscrete2DTarget-v0", "TupleTarget-v0"])
def test_serial_training_with_composite_actions(tmp_path, env):
    argv = [
        f"--env=tests.envs.action_envs:{env}",
        "--serial_mode=True",
        "--num_workers=1",
        "--num_envs_per_worker=4",
        "--rollout=16",
        "--batch_size=64",
        "--use_rnn=False",
        "--encoder_mlp_layers=16",
        "--train_for_env_steps=1024",
        "--seed=0",
        f"--train_dir={tmp_path}",
        "--experiment=x",
    ]
    assert train_main(argv) == 0
    ckpts = list_checkpoints(tmp_path / "x" / "checkpoint_p0")
    state = torch.load(ckpts[-1], weights_only=False)
    assert state["policy_version"] > 0  # SGD steps happened
    head = state["model"]["policy_head.weight"]
    assert torch.isfinite(head).all()


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.MultiDiscrete([[2, 3], [4, 5]]),
        gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.MultiDiscrete([[2, 3], [4, 5]]))),
        gym.spaces.Tuple((gym.spaces.MultiDiscrete([[2], [3]]), gym.spaces.Box(-1.0, 1.0, (2,), np.float32))),
    ],
)
def test_multi_dimensional_multidiscrete_reaches_the_env_in_its_shape(space):
    """A flat stored action row becomes an action inside the env's space (nvec of shape (2, 2): a (2, 2) array),
    also nested in a Tuple; random (masked) samples are in the space too."""
    from sample_factory.envs.actions import action_converter, sample_action

    k = sum(int(np.prod(getattr(s, "shape", ()) or (1,))) for s in getattr(space, "spaces", (space,)))
    rng = np.random.default_rng(0)
    for _ in range(20):
        row = np.concatenate([_flat_sample(s, rng) for s in getattr(space, "spaces", (space,))])
        if isinstance(space, gym.spaces.MultiDiscrete):
            row = row.astype(np.int64)  # the buffers' dtype for integer-only action spaces
        assert row.shape == (k,)
        convert = action_converter(space)
        action = convert(row) if convert else row
        assert space.contains(action), (space, action)
        n_discrete = sum(
            int(np.sum(s.nvec)) if isinstance(s, gym.spaces.MultiDiscrete) else int(getattr(s, "n", 0))
            for s in getattr(space, "spaces", (space,))
        )
        assert space.contains(sample_action(space, np.ones(n_discrete, np.int8)))


def _flat_sample(space: gym.Space, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, gym.spaces.MultiDiscrete):
        return np.array([rng.integers(n) for n in space.nvec.reshape(-1)], dtype=np.float64)
    if isinstance(space, gym.spaces.Discrete):
        return np.array([rng.integers(space.n)], dtype=np.float64)
    return rng.uniform(-1, 1, space.shape)
