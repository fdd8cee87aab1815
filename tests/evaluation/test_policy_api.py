"""sample_factory.evaluation.policy_api on experiments trained here (serial mode, in-process): acting on real env
observations, agreement with the model it wraps, state handling, checkpoint selection."""

from __future__ import annotations

import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.evaluation.policy_api import Policy, load_policy
from tests.policy_helpers import assert_cpu_and_cuda_agree, one_torch_thread, train_tiny

RNN_FLAGS = ["--use_rnn=True", "--rnn_size=16"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("td")
    train_tiny(d, "mlp")
    train_tiny(d, "rnn", *RNN_FLAGS)
    return d


@pytest.fixture(params=["mlp", "rnn"])
def policy(request, train_dir) -> Policy:
    return load_policy(request.param, train_dir=train_dir)


def test_loaded_metadata(policy):
    assert policy.env_steps > 0 and policy.policy_version > 0
    assert policy.checkpoint_path.name.startswith("checkpoint_")
    assert isinstance(policy.action_space, gym.spaces.Discrete) and policy.obs_shape == (4,)
    assert policy.recurrent == (policy.cfg.experiment == "rnn")
    assert policy.rnn_state_size == (16 if policy.recurrent else 0)
    assert not policy.model.training


def test_act_single_in_env(policy):
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    state = policy.initial_state()
    assert state is None if not policy.recurrent else (state.shape == (16,) and not state.any())
    for _ in range(20):
        action, state = policy.act(obs, state)
        assert type(action) is int and action in (0, 1)
        if policy.recurrent:
            assert isinstance(state, np.ndarray) and state.shape == (16,) and state.dtype == np.float32
        else:
            assert state is None
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset()
            state = policy.initial_state()
    assert isinstance(policy.value(obs, state), float)
    env.close()


def test_act_batch_in_vector_env(policy):
    B = 3
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * B)
    obs, _ = envs.reset(seed=0)
    state = policy.initial_state(B)
    for _ in range(10):
        actions, state = policy.act_batch(obs, state)
        assert actions.shape == (B,) and actions.dtype == np.int64
        if policy.recurrent:
            assert state.shape == (B, 16)
        obs, _, term, trunc, _ = envs.step(actions)
        state = policy.reset_state(state, term | trunc)
    values = policy.value(obs, state)
    assert values.shape == (B,) and np.isfinite(values).all()
    envs.close()


def test_deterministic_is_argmax_and_matches_model(policy):
    """Several steps with the state carried along: actions = argmax of the model's logits, state and values equal."""
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((5, 6, 4)).astype(np.float32)  # [T, B, obs]
    state = policy.initial_state(6)
    h = torch.zeros(6, policy.rnn_state_size) if policy.recurrent else None
    for t in range(obs.shape[0]):
        with torch.no_grad():
            logits, values, h_next = policy.model.forward_step(torch.from_numpy(obs[t]), h)
        actions, new_state = policy.act_batch(obs[t], state, deterministic=True)
        np.testing.assert_array_equal(actions, logits.argmax(-1).numpy())
        np.testing.assert_allclose(policy.value(obs[t], state), values.numpy(), rtol=0, atol=1e-6)
        if policy.recurrent:
            np.testing.assert_allclose(new_state, h_next.numpy(), rtol=0, atol=1e-6)
        # The single-observation path gives the same as row 0 of the batch.
        a0, s0 = policy.act(obs[t, 0], None if state is None else state[0], deterministic=True)
        assert a0 == actions[0]
        if policy.recurrent:
            np.testing.assert_allclose(s0, new_state[0], rtol=0, atol=1e-6)
        state, h = new_state, h_next


def test_torch_state_stays_torch(train_dir):
    policy = load_policy("rnn", train_dir=train_dir)
    obs = torch.zeros(2, 4)
    actions, state = policy.act_batch(obs, torch.zeros(2, 16))
    assert isinstance(state, torch.Tensor) and state.shape == (2, 16) and isinstance(actions, np.ndarray)
    actions, state = policy.act_batch(obs, state)  # an inference-mode tensor can be fed back in
    assert isinstance(state, torch.Tensor)


def test_reset_state_zeroes_rows():
    state = np.arange(12, dtype=np.float32).reshape(3, 4) + 1
    out = Policy.reset_state(state, np.array([True, False, True]))
    assert not out[0].any() and not out[2].any()
    np.testing.assert_array_equal(out[1], state[1])
    assert out.dtype == np.float32 and state.all()  # the input is not modified
    t = torch.from_numpy(state)
    out_t = Policy.reset_state(t, [False, True, False])
    assert isinstance(out_t, torch.Tensor) and not out_t[1].any() and torch.equal(out_t[0], t[0])
    assert Policy.reset_state(None, [True]) is None


def test_bad_shapes_are_reported(train_dir):
    policy = load_policy("rnn", train_dir=train_dir)
    with pytest.raises(ValueError, match="observations of shape"):
        policy.act_batch(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="rnn state of shape"):
        policy.act_batch(np.zeros((2, 4), np.float32), np.zeros((3, 16), np.float32))


def test_checkpoint_selection(train_dir, tmp_path):
    exp = tmp_path / "mlp"
    shutil.copytree(train_dir / "mlp", exp)
    ckpt_dir = exp / "checkpoint_p0"
    with pytest.raises(FileNotFoundError, match=r"best_\*\.pth"):
        load_policy(exp, checkpoint="best")  # a folder path works without train_dir
    latest = sorted(ckpt_dir.glob("checkpoint_*.pth"))[-1]
    best = ckpt_dir / "best_000000001_64_reward_20.0.pth"
    state = torch.load(latest, weights_only=False)
    state["env_steps"] = 64
    torch.save(state, best)
    loaded = load_policy(exp, checkpoint="best")
    assert loaded.checkpoint_path == best and loaded.env_steps == 64
    assert load_policy(exp).checkpoint_path == latest  # 'latest' ignores best_*.pth
    explicit = load_policy("mlp", train_dir=tmp_path, checkpoint=str(best))
    assert explicit.checkpoint_path == best
    # a checkpoint file as the first argument, as SB3's PPO.load(path) (issue 53: the path was doubled)
    assert load_policy(str(best)).checkpoint_path == best and load_policy(latest).checkpoint_path == latest
    assert load_policy(best.relative_to(tmp_path), train_dir=tmp_path).checkpoint_path == tmp_path / best.relative_to(
        tmp_path
    )
    with pytest.raises(ValueError, match="give one"):
        load_policy(best, checkpoint="best")
    with pytest.raises(FileNotFoundError, match="no experiment"):
        load_policy("missing", train_dir=tmp_path)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_cuda_missing_is_reported(train_dir):
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        load_policy("mlp", train_dir=train_dir, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda(train_dir):
    gpu, obs = assert_cpu_and_cuda_agree("rnn", train_dir, batch=4)
    _, s_t = gpu.act_batch(obs, torch.zeros(4, 16, device="cuda"))
    assert s_t.device.type == "cuda"


def test_a_tuple_observation_env_is_acted_on_with_its_raw_observations(tmp_path):
    """Blackjack's Tuple observations are a Dict keyed by position inside (envs/spaces.py TupleAsDict); the policy
    takes the raw tuples of a plain gym.make env, one or a batch (a tuple of one array per part)."""
    train_tiny(tmp_path, "bj", env="Blackjack-v1")
    policy = load_policy("bj", train_dir=tmp_path)
    assert set(policy.obs_shape) == {"0", "1", "2"}
    env = gym.make("Blackjack-v1")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, tuple)
    for _ in range(10):
        action, _ = policy.act(obs)
        assert action in (0, 1)
        obs, _, term, trunc, _ = env.step(action)
        if term or trunc:
            obs, _ = env.reset()
    batch = (np.array([14, 20]), np.array([10, 3]), np.array([0, 1]))
    actions, _ = policy.act_batch(batch)
    assert actions.shape == (2,)
    single = [policy.act((int(s), int(d), int(a)), deterministic=True)[0] for s, d, a in zip(*batch, strict=True)]
    assert list(policy.act_batch(batch, deterministic=True)[0]) == single
    env.close()
