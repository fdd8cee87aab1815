"""VectorEnvGroup (--env_backend=gymnasium_vector): gymnasium's CartPole dynamics, same-step autoreset, truncation
with the final observation, episode statistics, the decorrelation steps, seeding and the checks at the boundary."""

import pickle

import gymnasium as gym
import numpy as np
import pytest

from sample_factory.config import Config
from sample_factory.envs.env_group import EnvError
from sample_factory.envs.env_utils import make_env
from sample_factory.envs.vector_group import SameStepCartPole, VectorEnvGroup, make_vector_group, vector_spaces


def _group(n: int, seed: int | None = 0, **kw) -> VectorEnvGroup:
    return VectorEnvGroup(SameStepCartPole(num_envs=n, **kw), seed=seed)


def test_spaces_equal_the_gymnasium_env():
    for name in ("CartPole-v1", "CartPole-v0"):
        env = make_env(Config.from_dict(dict(env=name)))
        assert vector_spaces(Config.from_dict(dict(env=name, env_backend="gymnasium_vector"))) == (
            env.observation_space,
            env.action_space,
        )
    with pytest.raises(ValueError, match="no batched implementation.*--env_backend=gymnasium"):
        vector_spaces(Config.from_dict(dict(env="Acrobot-v1")))


def test_steps_follow_gymnasium_cartpole_dynamics():
    """Each column, started from the state of a python CartPole-v1 and given the same actions, sees the same
    observations, rewards and terminations (float32 observations of the same float64 state)."""
    n, rng = 6, np.random.default_rng(3)
    group = _group(n)
    group.reset()
    singles = [gym.make("CartPole-v1") for _ in range(n)]
    for i, env in enumerate(singles):
        env.reset(seed=i)
        env.unwrapped.state = group.env.state[:, i].copy()
    alive = np.ones(n, dtype=bool)
    for _ in range(60):
        actions = rng.integers(0, 2, size=n)
        before = group.env.state.copy()
        finished = group.step(actions)
        ended = {c for c in group.finished_columns}
        for i, env in enumerate(singles):
            if not alive[i]:
                continue
            o, r, term, trunc, _ = env.step(int(actions[i]))
            assert group.rewards[i] == r and bool(group.dones[i]) == (term or trunc)
            if term:
                assert i in ended and not group.truncated[i]
                alive[i] = False  # its column restarted: a new state, compared no further
                assert np.all(np.abs(group.obs["obs"][i]) <= 0.05)
            else:
                np.testing.assert_array_equal(group.obs["obs"][i], o)
                np.testing.assert_array_equal(group.env.state[:, i], env.unwrapped.state)
        assert len(finished) == len(ended)
        assert not np.array_equal(before, group.env.state)
    assert not alive.all(), "random actions end some episodes within 60 steps"


def test_same_step_autoreset_and_episode_statistics():
    group = _group(4, max_episode_steps=500)
    group.reset()
    ends, steps = [], 0
    lengths = np.zeros(4, dtype=int)
    while len(ends) < 10:
        finished = group.step(np.zeros(4, dtype=np.int64))  # always push left: falls within ~10 steps
        steps += 1
        lengths += 1
        for (ret, length), c in zip(finished, group.finished_columns, strict=True):
            assert ret == length == lengths[c]  # reward 1 per step, counted from the episode's first step
            assert group.dones[c] and group.first[c] and group.env_reset[c] and not group.truncated[c]
            assert np.all(np.abs(group.obs["obs"][c]) <= 0.05)  # already the next episode's first observation
            lengths[c] = 0
            ends.append(length)
        assert len(finished) == int(group.dones.sum())
        assert group.active.all()
    assert steps < 100 and min(ends) >= 5


def test_truncation_keeps_the_final_observation():
    """A time limit of 3 steps: no fall that soon, so every episode is truncated; its last observation goes to
    final_obs, its row of obs starts the next episode."""
    group = _group(3, max_episode_steps=3)
    group.reset()
    for t in range(1, 7):
        actions = np.array([0, 1, 0])
        state_before = group.env.state.copy()
        finished = group.step(actions)
        if t % 3:
            assert not finished and not group.dones.any()
            continue
        assert finished == [(3.0, 3)] * 3 and group.truncated.all() and group.dones.all()
        # the final observation is one Euler step from the state before: its position moved by tau * velocity
        np.testing.assert_allclose(
            group.final_obs["obs"][:, 0], state_before[0] + 0.02 * state_before[1], rtol=1e-5, atol=1e-7
        )
        assert not np.array_equal(group.final_obs["obs"], group.obs["obs"])
        assert np.all(np.abs(group.obs["obs"]) <= 0.05)


def test_random_steps_take_each_env_its_count():
    group = _group(5)
    group.reset()
    group.random_steps([0, 1, 3, 6, 2])  # fewer steps than any random CartPole episode lasts
    assert group.episode_len.tolist() == [0, 1, 3, 6, 2]
    assert group.episode_return.tolist() == [0.0, 1.0, 3.0, 6.0, 2.0]
    assert not group.dones.any() and not group.rewards.any()
    assert np.array_equal(group.env.steps, [0, 1, 3, 6, 2])  # the env's time limit counts the same steps
    group.random_steps([300] * 5)  # episodes end on the way: only the running one is counted
    assert (group.episode_len < 300).all() and (group.episode_len == group.env.steps).all()


def test_episodes_begun_with_random_steps_are_not_reported():
    group = _group(4)
    group.reset()
    group.random_steps([0, 3, 0, 5])  # fewer steps than any random CartPole episode lasts
    ends, reported = np.zeros(4, dtype=int), np.zeros(4, dtype=int)
    for _ in range(100):
        finished = group.step(np.ones(4, dtype=np.int64))  # always push right: each episode ends in ~10 steps
        ends += group.dones
        for c in group.finished_columns:
            reported[c] += 1
        assert len(finished) == len(group.finished_columns)
    assert (ends >= 3).all()
    assert (reported == ends - np.array([0, 1, 0, 1])).all(), (ends, reported)  # the random-begun first ones


def test_seeding_is_deterministic_per_split():
    cfg = Config.from_dict(dict(env="CartPole-v1", env_backend="gymnasium_vector"))
    runs = []
    for _ in range(2):
        group = make_vector_group(cfg, 4, 100, [8, 9, 10, 11])
        group.reset()
        group.random_steps([5, 0, 2, 7])
        obs = [group.obs["obs"].copy()]
        for _ in range(40):
            group.step(np.ones(4, dtype=np.int64))
            obs.append(group.obs["obs"].copy())
        runs.append(np.stack(obs))
    np.testing.assert_array_equal(runs[0], runs[1])
    other = make_vector_group(cfg, 4, 100, [12, 13, 14, 15])  # the next split: another generator
    other.reset()
    assert not np.array_equal(other.obs["obs"], runs[0][0])
    with pytest.raises(ValueError, match="3 env ids for 4 envs"):
        make_vector_group(cfg, 4, 0, [0, 1, 2])


def test_bad_actions_and_observations_raise_env_error():
    group = _group(3)
    group.env_ids = [20, 21, 22]
    group.reset()
    with pytest.raises(EnvError, match="env 21: action 2 outside Discrete"):
        group.step(np.array([0, 2, 1]))
    group.env.state[2, 1] = np.nan  # a NaN angle: the next observation of env 21 is NaN
    with pytest.raises(EnvError, match="env 21: step returned a NaN or inf observation"):
        group.step(np.array([0, 0, 0]))


def test_group_pickles_for_serial_snapshots():
    group = _group(3, seed=5)
    group.reset()
    group.step(np.array([1, 0, 1]))
    copy = pickle.loads(pickle.dumps(group))
    actions = np.array([0, 1, 1])
    for _ in range(30):
        group.step(actions)
        copy.step(actions)
    np.testing.assert_array_equal(copy.obs["obs"], group.obs["obs"])
    np.testing.assert_array_equal(copy.episode_len, group.episode_len)


def test_a_fall_on_the_time_limits_last_step_is_a_termination():
    probe = _group(1, seed=9)
    probe.reset()
    steps = 1
    while not probe.step(np.zeros(1, dtype=np.int64)):
        steps += 1
    group = _group(1, seed=9, max_episode_steps=steps)  # the same fall, now on the last step allowed
    group.reset()
    for _ in range(steps - 1):
        assert not group.step(np.zeros(1, dtype=np.int64))
    assert group.step(np.zeros(1, dtype=np.int64)) == [(float(steps), steps)]
    assert group.dones[0] and not group.truncated[0]  # no value bootstrapped past the fall


def test_auto_backend_is_resolved_by_the_env():
    from sample_factory.config import parse_cfg
    from sample_factory.envs.env_utils import env_backend

    assert parse_cfg(["--env=CartPole-v1"]).env_backend == "auto"  # the default; cfg.json keeps it
    assert env_backend(parse_cfg(["--env=CartPole-v1"])) == "gymnasium_vector"
    assert env_backend(parse_cfg(["--env=CartPole-v0"])) == "gymnasium_vector"
    assert env_backend(parse_cfg(["--env=Acrobot-v1"])) == "gymnasium"
    assert env_backend(parse_cfg(["--env=CartPole-v1", "--env_backend=gymnasium"])) == "gymnasium"
    assert env_backend(Config.from_dict(dict(env="my_pkg:CartPole-v1"))) == "gymnasium"
