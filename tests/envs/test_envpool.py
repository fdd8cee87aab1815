"""EnvPoolGroup (--env_backend=envpool): spaces equal to the gymnasium pipeline's, the EnvGroup interface, same-step
autoreset without dropped actions, whole-game episode statistics with episodic life."""

import pickle
import re
import sys

import numpy as np
import pytest

from sample_factory.config import Config
from sample_factory.config.extras import install_hint
from sample_factory.envs.envpool_group import EnvPoolGroup, envpool_spaces, envpool_task, make_envpool_group

envpool = pytest.importorskip(
    "envpool", reason="envpool is not installed (the [envpool] extra: pip install -e .[envpool])"
)


def _cfg(env: str, **kw) -> Config:
    base = dict(env=env, env_frameskip=4, env_framestack=4, env_sticky_actions=0.25, env_episodic_life=True)
    return Config.from_dict({**base, **kw})


@pytest.mark.parametrize("name", ["atari_pong", "atari_breakout", "ALE/SpaceInvaders-v5"])
def test_atari_spaces_equal_gymnasium_pipeline(name):
    pytest.importorskip("ale_py", reason="the gymnasium Atari pipeline needs the [atari] extra")
    from sample_factory.envs.env_utils import make_env

    env = make_env(_cfg(name))
    try:
        assert envpool_spaces(_cfg(name)) == (env.observation_space, env.action_space)
    finally:
        env.close()


@pytest.mark.parametrize("name", ["mujoco_halfcheetah", "mujoco_humanoid", "Hopper-v5"])
def test_mujoco_spaces_equal_gymnasium_pipeline(name):
    pytest.importorskip("mujoco", reason="the gymnasium MuJoCo pipeline needs the [mujoco] extra")
    from sample_factory.envs.env_utils import make_env

    env = make_env(_cfg(name))
    try:
        obs_space, act_space = envpool_spaces(_cfg(name))
        assert (obs_space, act_space) == (env.observation_space, env.action_space)
        assert act_space.dtype == np.float32 and np.array_equal(act_space.low, env.action_space.low)
    finally:
        env.close()


def test_unsupported_names_and_missing_package(monkeypatch):
    for name in ("CartPole-v1", "my_pkg:MyEnv-v0", "doom_basic"):
        with pytest.raises(ValueError, match="not supported by --env_backend=envpool"):
            envpool_task(_cfg(name))
    with pytest.raises(ValueError, match="v5"):
        envpool_task(_cfg("ALE/Pong-v4"))
    with pytest.raises(ValueError, match="no task"):
        envpool_task(_cfg("atari_no_such_game"))
    monkeypatch.setitem(sys.modules, "envpool", None)  # import envpool now raises ImportError
    with pytest.raises(ValueError, match=re.escape(install_hint("envpool"))):
        envpool_spaces(_cfg("atari_pong"))


def test_atari_config_follows_cfg():
    _, family, kw = envpool_task(_cfg("atari_pong", env_frameskip=3, env_framestack=2, env_sticky_actions=0.0))
    assert family == "atari"
    assert (kw["frame_skip"], kw["stack_num"], kw["repeat_action_probability"]) == (3, 2, 0.0)
    assert kw["max_episode_steps"] == 36_000 and kw["noop_max"] == 30
    assert kw["episodic_life"] and not kw["reward_clip"] and not kw["full_action_space"]
    assert not envpool_task(_cfg("atari_pong", env_episodic_life=False))[2]["episodic_life"]
    assert not envpool_task(_cfg("atari_pong", evaluation_run=True))[2]["episodic_life"]


def test_reset_step_shapes_and_dtypes():
    group = make_envpool_group(_cfg("atari_pong"), 3, 7, [3, 4, 5])
    try:
        assert group.n == 3
        group.reset()
        assert list(group.obs) == ["obs"] and list(group.final_obs) == ["obs"]
        assert group.obs["obs"].shape == (3, 4, 84, 84) and group.obs["obs"].dtype == np.uint8
        assert group.obs["obs"].any()
        finished = group.step(np.array([0, 1, 2], dtype=np.int64))
        assert finished == []
        assert group.rewards.shape == (3,) and group.rewards.dtype == np.float32
        for a in (group.dones, group.truncated, group.active):
            assert a.shape == (3,) and a.dtype == bool
        assert group.active.all() and not group.dones.any()
        group.random_steps([0, 5, 2])
        assert not group.dones.any()
        from sample_factory.envs import envpool_group

        with pytest.raises(envpool_group.EnvError, match="outside Discrete"):
            group.step(np.array([0, 6, 0]))
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(group)
    finally:
        group.close()


def test_seeds_follow_env_ids():
    cfg = _cfg("mujoco_halfcheetah")
    a, b, c = (make_envpool_group(cfg, 2, 100, ids) for ids in ([0, 1], [0, 1], [1, 2]))
    try:
        for g in (a, b, c):
            g.reset()
        assert np.array_equal(a.obs["obs"], b.obs["obs"])
        assert np.array_equal(a.obs["obs"][1], c.obs["obs"][0])  # env 1 is seeded alike in both splits
        assert not np.array_equal(a.obs["obs"][0], a.obs["obs"][1])
    finally:
        for g in (a, b, c):
            g.close()


def test_same_step_autoreset_drops_no_action():
    """Against raw envpool with its next-step autoreset: the group's step k must equal the reference's step k plus
    one extra (action-ignoring) reset call per ended episode. Hopper env 0 falls (terminated), env 1 hits the time
    limit (truncated)."""
    seeds, limit = [11, 12], 30
    group = make_envpool_group(_cfg("mujoco_hopper"), 2, 0, [11, 12], max_episode_steps=limit)
    ref = envpool.make("Hopper-v5", env_type="gymnasium", num_envs=2, env_seed=seeds, num_threads=1,
                       max_episode_steps=limit)  # fmt: skip
    try:
        group.reset()
        ref_obs, _ = ref.reset()
        np.testing.assert_array_equal(group.obs["obs"], ref_obs)
        rng = np.random.default_rng(0)
        kinds, lengths, returns, ref_return = set(), [], [], np.zeros(2)
        for _ in range(100):
            actions = np.stack([np.ones(3), rng.uniform(-0.1, 0.1, 3)]).astype(np.float32)
            prev = group.obs["obs"].copy()
            finished = group.step(actions)
            o, r, te, tr, _ = ref.step(actions.astype(np.float64))
            np.testing.assert_array_equal(group.rewards, r)
            np.testing.assert_array_equal(group.dones, te | tr)
            np.testing.assert_array_equal(group.truncated, tr & ~te)
            ref_return += r
            ended = np.flatnonzero(te | tr)
            for i in np.flatnonzero(tr & ~te):
                np.testing.assert_array_equal(group.final_obs["obs"][i], o[i])  # last obs, for the bootstrap
            alive = np.flatnonzero(~(te | tr))
            np.testing.assert_array_equal(group.obs["obs"][alive], o[alive])
            if len(ended):
                kinds |= {"terminated" if te[i] else "truncated" for i in ended}
                # The reference resets on its next call, ignoring that call's action.
                o2, r2, *_ = ref.step(np.full((len(ended), 3), 0.7), ended.astype(np.int32))
                np.testing.assert_array_equal(r2, 0.0)
                np.testing.assert_array_equal(group.obs["obs"][ended], o2)  # already the new episode's first obs
                assert not np.array_equal(group.obs["obs"][ended], prev[ended])
                returns += [float(ref_return[i]) for i in ended]
                ref_return[ended] = 0.0
                lengths += [length for _, length in finished]
            assert len(finished) == len(ended)
            if finished:
                np.testing.assert_allclose([ret for ret, _ in finished], returns[-len(finished) :], rtol=1e-6)
        assert kinds == {"terminated", "truncated"}
        assert limit in lengths and min(lengths) < limit
    finally:
        group.close()
        ref.close()


def test_atari_truncation_keeps_final_obs():
    group = make_envpool_group(_cfg("atari_pong"), 2, 3, [0, 1], max_episode_steps=10)
    try:
        group.reset()
        for t in range(1, 11):
            prev = group.obs["obs"].copy()
            finished = group.step(np.array([2, 3]))
            if t < 10:
                assert not group.dones.any() and finished == []
        assert group.dones.all() and group.truncated.all()
        assert finished == [(0.0, 10), (0.0, 10)]
        # The final observation continues the frame stack of the previous one; the reset obs starts a new stack.
        np.testing.assert_array_equal(group.final_obs["obs"][:, :-1], prev[:, 1:])
        for i in range(2):
            assert all(np.array_equal(group.obs["obs"][i, 0], group.obs["obs"][i, k]) for k in range(1, 4))
    finally:
        group.close()


@pytest.mark.parametrize("episodic_life", [True, False])
def test_atari_episode_stats_are_whole_games(episodic_life):
    """Breakout has 5 lives: with episodic life a game is 5 training episodes; the reported return and length
    are those of the whole game."""
    group = make_envpool_group(_cfg("atari_breakout", env_episodic_life=episodic_life), 1, 5, [0])
    try:
        group.reset()
        rng = np.random.default_rng(1)
        games, dones, ret, length = [], 0, 0.0, 0
        while len(games) < 2:
            finished = group.step(rng.integers(0, 4, 1))
            ret += float(group.rewards[0])
            length += 1
            dones += int(group.dones[0])
            assert not group.truncated[0]
            if finished:
                assert finished == [(ret, length)]
                assert dones == (5 if episodic_life else 1)
                # the game's final info row, for --episode_info_keys: no lives left at the end of the game
                (info,) = group.finished_infos
                assert int(info["env_id"]) == 0 and int(info["lives"]) == 0, info
                games.append(finished[0])
                ret, length, dones = 0.0, 0, 0
            assert length < 5000
        assert all(length > 50 for _, length in games)
    finally:
        group.close()


def test_close_and_direct_construction():
    env = envpool.make("InvertedPendulum-v5", env_type="gymnasium", num_envs=2, num_threads=1)
    group = EnvPoolGroup(env, "mujoco", episodic_life=False)
    group.reset()
    group.random_steps([3, 40])
    assert group.obs["obs"].shape == (2, 4) and group.obs["obs"].dtype == np.float64
    group.close()


class _FallOnTheLastStep:
    """Wraps an envpool env: every step reports both terminated and truncated, as envpool does when a MuJoCo
    robot falls on the time limit's last step."""

    def __init__(self, env):
        self.env = env

    def step(self, actions, ids=None):
        obs, rew, term, trunc, info = self.env.step(actions, ids)
        return obs, rew, np.ones_like(term), np.ones_like(trunc), info

    def __getattr__(self, name):
        return getattr(self.env, name)


def test_mujoco_termination_on_the_last_step_is_not_a_truncation():
    """A fall is a termination even on the last allowed step: no value bootstrap (truncated False)."""
    group = make_envpool_group(_cfg("Hopper-v5"), 2, 3, [0, 1])
    try:
        group.reset()
        group.env = _FallOnTheLastStep(group.env)
        group.step(np.zeros((2, 3), dtype=np.float32))
        assert group.dones.all() and not group.truncated.any()
    finally:
        group.close()


def test_mujoco_episode_cap_follows_cfg():
    assert "max_episode_steps" not in envpool_task(_cfg("mujoco_hopper"))[2]  # envpool's own: gymnasium's 1,000
    assert envpool_task(_cfg("mujoco_hopper", max_episode_steps=50))[2]["max_episode_steps"] == 50
