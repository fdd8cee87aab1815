import os
import sys

import gymnasium as gym
import numpy as np
import psutil
import pytest

from sample_factory.config import Config, parse_cfg
from sample_factory.envs import env_utils, process_tree
from sample_factory.envs.env_group import EnvGroup
from sample_factory.envs.env_utils import make_env, probe_env, register_env


class ThreeStepEnv(gym.Env):
    """Obs = [number of resets so far, step in episode]. Truncates after 3 steps; action 2 terminates.
    Reward of a step = step index + 0.5 * action, so returns identify exactly which steps were summed."""

    TERMINATE = 2
    MAX_STEPS = 3

    def __init__(self, offset: float = 0.0):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.offset = offset
        self.resets = 0
        self.t = 0

    def _obs(self):
        return np.array([self.resets + self.offset, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.resets += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        action = int(action)
        reward = self.t + 0.5 * action
        terminated = action == self.TERMINATE
        truncated = self.t >= self.MAX_STEPS
        return self._obs(), reward, terminated, truncated, {}


def _step(group, actions):
    return group.step(np.asarray(actions))


def test_env_group_same_step_autoreset_custom_env():
    group = EnvGroup([ThreeStepEnv(), ThreeStepEnv(offset=100.0)], seeds=[0, 1])
    obs = group.reset()
    np.testing.assert_array_equal(obs["obs"], [[1, 0], [101, 0]])

    # Step 1: env 1 terminates (action 2) -> its row is the reset observation at once.
    finished = _step(group, [0, 2])
    np.testing.assert_array_equal(group.obs["obs"], [[1, 1], [102, 0]])
    np.testing.assert_array_equal(group.rewards, [1.0, 2.0])
    np.testing.assert_array_equal(group.dones, [False, True])
    np.testing.assert_array_equal(group.truncated, [False, False])
    np.testing.assert_array_equal(group.final_obs["obs"], np.zeros((2, 2)))  # termination: nothing to bootstrap
    assert finished == [(2.0, 1)]

    # Step 2: nothing ends; flags are cleared.
    finished = _step(group, [0, 0])
    np.testing.assert_array_equal(group.obs["obs"], [[1, 2], [102, 1]])
    np.testing.assert_array_equal(group.dones, [False, False])
    np.testing.assert_array_equal(group.truncated, [False, False])
    assert finished == []

    # Step 3: env 0 hits the time limit -> truncated, final obs kept, row reset.
    finished = _step(group, [1, 0])
    np.testing.assert_array_equal(group.obs["obs"], [[2, 0], [102, 2]])
    np.testing.assert_array_equal(group.rewards, [3.5, 2.0])
    np.testing.assert_array_equal(group.dones, [True, False])
    np.testing.assert_array_equal(group.truncated, [True, False])
    np.testing.assert_array_equal(group.final_obs["obs"][0], [1, 3])
    assert finished == [(1.0 + 2.0 + 3.5, 3)]

    # Step 4: env 1 terminates and truncates on the same step: a termination (no bootstrap), not a truncation.
    finished = _step(group, [0, 2])
    np.testing.assert_array_equal(group.obs["obs"], [[2, 1], [103, 0]])
    np.testing.assert_array_equal(group.dones, [False, True])
    np.testing.assert_array_equal(group.truncated, [False, False])
    np.testing.assert_array_equal(group.final_obs["obs"][1], [0, 0])
    assert finished == [(1.0 + 2.0 + 4.0, 3)]

    # Steps 5-7: env 0 truncates again at step 6; both envs end on step 7 and are reported in env order.
    assert _step(group, [0, 0]) == []
    finished = _step(group, [0, 1])
    np.testing.assert_array_equal(group.obs["obs"], [[3, 0], [103, 2]])
    np.testing.assert_array_equal(group.final_obs["obs"][0], [2, 3])
    assert finished == [(1.0 + 2.0 + 3.0, 3)]
    finished = _step(group, [2, 1])  # env 0 terminates at its step 1, env 1 truncates at its step 3
    np.testing.assert_array_equal(group.obs["obs"], [[4, 0], [104, 0]])
    np.testing.assert_array_equal(group.dones, [True, True])
    np.testing.assert_array_equal(group.truncated, [False, True])
    np.testing.assert_array_equal(group.final_obs["obs"][1], [103, 3])
    assert finished == [(2.0, 1), (1.0 + 2.5 + 3.5, 3)]
    group.close()


def test_env_group_reset_clears_episode_stats():
    group = EnvGroup([ThreeStepEnv()], seeds=[None])
    group.reset()
    _step(group, [1])
    _step(group, [1])
    group.reset()
    assert _step(group, [2]) == [(2.0, 1)]


def test_env_group_episodes_begun_with_random_steps_are_not_reported():
    """Decorrelation steps are random actions: the episode they start is not the policy's and is not reported (its
    counted part alone, the steps after them, once gave a grid walk -5 where -13 is the best possible)."""
    group = EnvGroup([ThreeStepEnv(), ThreeStepEnv(offset=100.0)], seeds=[0, 1])
    group.envs[0].action_space = gym.spaces.Discrete(2)  # the random step never draws TERMINATE (unseeded draw)
    group.reset()
    group.random_steps([1, 0])  # env 0: one random step into its first episode; env 1: none
    assert _step(group, [0, 0]) == []
    assert _step(group, [0, 0]) == [] and group.dones.tolist() == [True, False]  # env 0's first episode: unreported
    assert _step(group, [0, 0]) == [(6.0, 3)] and group.finished_columns == [1]  # env 1's whole first episode
    assert _step(group, [0, 0]) == []
    assert _step(group, [0, 0]) == [(6.0, 3)] and group.finished_columns == [0]  # env 0's next episode is reported
    group.close()


def test_env_group_reset_calls_between_before_each_env_but_the_first():
    """An actor starting its envs reads STOP there: an exception from `between` ends the reset (and random_steps)
    before the next env's."""
    envs = [gym.make("CartPole-v1") for _ in range(3)]
    group = EnvGroup(envs, seeds=[0, 1, 2])
    calls = []
    group.reset(between=lambda: calls.append(sum(e.unwrapped.state is not None for e in envs)))
    assert calls == [1, 2]  # before env 1 (env 0 reset) and before env 2
    group.random_steps([1, 1, 1], between=lambda: calls.append("step"))
    assert calls == [1, 2, "step", "step"]

    class Stop(Exception):
        pass

    def stop():
        raise Stop

    fresh = EnvGroup([gym.make("CartPole-v1") for _ in range(2)], seeds=[0, 1])
    with pytest.raises(Stop):
        fresh.reset(between=stop)
    assert fresh.envs[0].unwrapped.state is not None and fresh.envs[1].unwrapped.state is None
    group.close()
    fresh.close()


def test_env_group_matches_reference_cartpole():
    """Same-step autoreset on CartPole-v1 (with a short time limit so truncations happen), checked against
    twin envs stepped by hand with the same seeds and actions."""
    n, steps, limit = 3, 150, 15
    seeds = [11, 12, 13]
    group = EnvGroup([gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(n)], seeds)
    refs = [gym.make("CartPole-v1", max_episode_steps=limit) for _ in range(n)]
    ref_obs = np.stack([r.reset(seed=s)[0] for r, s in zip(refs, seeds)])
    np.testing.assert_array_equal(group.reset()["obs"], ref_obs)

    rng = np.random.default_rng(0)
    ret, length = np.zeros(n), np.zeros(n, dtype=int)
    n_term = n_trunc = 0
    for _ in range(steps):
        actions = rng.integers(0, 2, size=n)
        finished = group.step(actions)
        expected_finished = []
        for i, ref in enumerate(refs):
            o, r, term, trunc, _ = ref.step(int(actions[i]))
            ret[i] += r
            length[i] += 1
            assert group.rewards[i] == r
            assert group.dones[i] == (term or trunc)
            assert group.truncated[i] == (trunc and not term)
            if term or trunc:
                expected_finished.append((ret[i], length[i]))
                ret[i], length[i] = 0.0, 0
                if trunc and not term:
                    n_trunc += 1
                    np.testing.assert_array_equal(group.final_obs["obs"][i], o)
                else:
                    n_term += 1
                o, _ = ref.reset()
            np.testing.assert_array_equal(group.obs["obs"][i], o)
        assert finished == [(float(r), int(ln)) for r, ln in expected_finished]
    # The run exercised both kinds of episode end.
    assert n_term > 0 and n_trunc > 0
    group.close()


def test_make_env_gymnasium_id():
    env = make_env(Config.from_dict(dict(env="CartPole-v1")))
    assert env.action_space == gym.spaces.Discrete(2)
    assert env.observation_space.shape == (4,)
    env.close()


def test_make_env_unknown_suggests_close_match():
    with pytest.raises(ValueError, match="unknown env 'CartPol-v1'") as exc:
        make_env(Config.from_dict(dict(env="CartPol-v1")))
    assert "did you mean" in str(exc.value)
    assert "CartPole-v1" in str(exc.value)


def test_make_env_unknown_without_close_match():
    with pytest.raises(ValueError, match="unknown env") as exc:
        make_env(Config.from_dict(dict(env="qqqqqqqqqqqqqqqqqqqq")))
    assert "did you mean" not in str(exc.value)


@pytest.fixture
def registered_env():
    name = "sf_test_three_step"
    calls = []

    def factory(cfg, env_config):
        calls.append((cfg, env_config))
        return ThreeStepEnv(offset=env_config.get("offset", 0.0))

    register_env(name, factory)
    yield name, calls
    env_utils._ENV_REGISTRY.pop(name, None)


def test_register_env(registered_env):
    name, calls = registered_env
    cfg = Config.from_dict(dict(env=name))
    env = make_env(cfg, {"offset": 7.0})
    assert isinstance(env, ThreeStepEnv)
    assert calls == [(cfg, {"offset": 7.0})]
    np.testing.assert_array_equal(env.reset()[0], [8, 0])
    env = make_env(cfg)
    assert calls[-1] == (cfg, {})  # missing env_config becomes an empty dict
    assert isinstance(env, ThreeStepEnv)
    # Registered names take part in the suggestion.
    with pytest.raises(ValueError, match=name):
        make_env(Config.from_dict(dict(env="sf_test_three_stp")))
    # In-process probing works with registered envs.
    obs_space, action_space, num_agents = probe_env(cfg, False)[:3]
    assert num_agents == 1
    assert obs_space.shape == (2,) and action_space == gym.spaces.Discrete(3)


def test_registered_env_overrides_gymnasium_id():
    name = "CartPole-v1"
    register_env(name, lambda cfg, env_config: ThreeStepEnv())
    try:
        assert isinstance(make_env(Config.from_dict(dict(env=name))), ThreeStepEnv)
    finally:
        env_utils._ENV_REGISTRY.pop(name)
    assert not isinstance(make_env(Config.from_dict(dict(env=name))), ThreeStepEnv)


def test_probe_env_subprocess():
    cfg = Config.from_dict(dict(env="CartPole-v1", probe_env_timeout_sec=20.0))
    obs_space, action_space, num_agents = probe_env(cfg)[:3]
    assert num_agents == 1
    assert isinstance(obs_space, gym.spaces.Box) and obs_space.shape == (4,)
    assert obs_space.dtype == np.float32
    assert action_space == gym.spaces.Discrete(2)


def test_a_hung_env_probe_leaves_no_process_behind(monkeypatch):
    """The probe of an env that hangs is killed; what the env had started (a simulator's server) is killed with it
    once it had LEFT_BEHIND_GRACE_SEC (shortened here) to exit by itself, not left running."""
    seconds = f"599.{os.getpid()}"  # the server's command line, ours alone
    monkeypatch.setenv("SF_TEST_SERVER_SECONDS", seconds)
    monkeypatch.setattr(env_utils, "LEFT_BEHIND_GRACE_SEC", 0.5)
    cfg = Config.from_dict(dict(env="tests.reliability.fault_envs:ServerHangsInInit-v0", probe_env_timeout_sec=3.0))
    try:
        with pytest.raises(RuntimeError, match="took longer than 3.0 s"):
            probe_env(cfg)
        servers = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", seconds]]
        assert not [p for p in servers if process_tree.running(p)], "the hung probe's env server outlived it"
    finally:
        for p in psutil.process_iter(["cmdline"]):
            if p.info["cmdline"] == ["sleep", seconds]:
                p.kill()


def test_probe_env_subprocess_unknown_env():
    cfg = Config.from_dict(dict(env="CartPol-v1", probe_env_timeout_sec=20.0))
    with pytest.raises(RuntimeError, match="could not create env 'CartPol-v1'") as exc:
        probe_env(cfg)
    msg = str(exc.value)
    assert "ValueError" in msg and "CartPole-v1" in msg  # the child's error, with its suggestion
    assert "\n" not in msg  # one clear line, not a traceback


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("CartPole-v1", None),
        ("atari_pong", None),
        ("atari_space_invaders", None),
        ("atari_spaceinvaders", None),  # Sample Factory's spelling
        ("ALE/Pong-v5", None),
        ("mujoco_hopper", None),
        ("doom_basic", None),
        ("some.module:Env-v0", None),  # needs the module: make_env checks it
        ("atari_pongg", "unknown env 'atari_pongg'; did you mean atari_pong,"),
        ("ALE/Breakot-v5", "unknown env 'ALE/Breakot-v5'; did you mean ALE/Breakout-v5"),
        ("mujoco_hoper", "unknown env 'mujoco_hoper'; did you mean mujoco_hopper"),
        ("doom_basik", "unknown env 'doom_basik'; did you mean doom_basic?"),
        ("CartPol-v1", "unknown env 'CartPol-v1'; did you mean CartPole-v1"),
        ("BreakoutNoFrameskip-v4", None),  # CleanRL's and SB3's ids
        ("PongNoFrameskip-v4", None),
        ("BreakotNoFrameskip-v4", "unknown env 'BreakotNoFrameskip-v4'; did you mean BreakoutNoFrameskip-v4"),
        # ALE's ids with another frame skip or sticky actions: the names that make the game here
        ("Breakout-v5", "unknown env 'Breakout-v5'; did you mean BreakoutNoFrameskip-v4 (CleanRL's and SB3's id"),
        ("Pong-v4", "unknown env 'Pong-v4'; did you mean PongNoFrameskip-v4 (CleanRL's and SB3's id: no sticky "),
        ("BreakoutDeterministic-v4", "unknown env 'BreakoutDeterministic-v4'; did you mean BreakoutNoFrameskip-v4"),
    ],
)
def test_unknown_env_message(name, expected):
    pytest.importorskip("ale_py")
    msg = env_utils.unknown_env_message(name)
    assert msg == expected if expected is None else msg.startswith(expected), msg


@pytest.mark.parametrize("env_id", ["LunarLander-v3", "BipedalWalker-v3", "CarRacing-v3"])
def test_a_missing_box2d_names_our_extra(env_id, monkeypatch):
    """gymnasium's own message asks for swig and gymnasium[box2d] (issue 53); ours names the box2d extra."""
    for name in [m for m in sys.modules if m.startswith("gymnasium.envs.box2d")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "Box2D", None)  # import Box2D fails as where it is not installed
    with pytest.raises(ValueError) as exc:
        env_utils.make_env(parse_cfg([f"--env={env_id}"]))
    msg = str(exc.value)
    assert msg.endswith("-c constraints.txt -e '.[box2d]'") and "swig" not in msg, msg


@pytest.mark.parametrize(
    ("env_id", "extra"), [("MiniGrid-NoSuchEnv-v0", "minigrid"), ("popgym-NoSuchEnv-v0", "popgym")]
)
def test_an_env_package_not_installed_names_our_extra(env_id, extra, monkeypatch):
    monkeypatch.setattr(env_utils, "_installed", lambda module: False)
    msg = env_utils.unknown_env_message(env_id)
    assert msg.endswith(f"-e '.[{extra}]'"), msg
