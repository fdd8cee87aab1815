"""The multi-agent test env TwoAgentTagEnv, and the PettingZoo adapter (sample_factory/envs/pettingzoo_env.py) on
TinyParallelEnv and on real PettingZoo envs where their packages are installed."""

import importlib.util
import re
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from sample_factory.config.extras import install_hint
from tests.envs.multi_agent_envs import TinyParallelEnv, TwoAgentTagEnv

needs_pettingzoo = pytest.mark.skipif(
    importlib.util.find_spec("pettingzoo") is None, reason="pettingzoo is not installed (pip install -e .[pettingzoo])"
)
CFG = SimpleNamespace()


def _has(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def _step_all(env, actions):
    obs, rew, term, trunc, infos = env.step(actions)
    assert len(obs) == len(infos) == env.num_agents
    assert np.shape(rew) == np.shape(term) == np.shape(trunc) == (env.num_agents,)
    return obs, np.asarray(rew), np.asarray(term), np.asarray(trunc), infos


# --- TwoAgentTagEnv -------------------------------------------------------------------------------------------


def test_two_agent_tag_tags_rewards_and_death():
    env = TwoAgentTagEnv(episode_len=6, death_step=2, die_every=2)
    assert env.num_agents == 2 and env.observation_space.shape == (3,) and env.action_space.n == 3
    for episode in (1, 2):
        obs, infos = env.reset(seed=episode)
        assert [o[0] for o in obs] == [0.0, 1.0]  # the tag routes observations
        assert all(info["is_active"] for info in infos)
        dies = episode == 2
        total = np.zeros(2)
        for t in range(1, 7):
            # the rewarded action is bit XOR tag, so the optimal policy needs the right agent's observation
            best = [int(o[1]) ^ int(o[0]) for o in obs]  # an inactive agent's zeros give 0, which is ignored
            obs, rew, term, trunc, infos = _step_all(env, best)
            total += rew
            gone = dies and t > 2
            assert infos[1]["is_active"] == (not gone)
            if gone:
                assert np.all(obs[1] == 0) and rew[1] == 0 and not term[1] and not trunc[1]
                assert env.received_actions[-1][1] == -1
            assert term[1] == (dies and t == 2)
            assert all(o in env.observation_space for o in obs)
        assert trunc[0] and trunc[1] == (not dies) and not term[0]
        assert total[0] == 6 and total[1] == (2 if dies else 6)


def test_two_agent_tag_wrong_routing_costs_reward():
    env = TwoAgentTagEnv(die_every=0)
    obs, _ = env.reset(seed=0)
    swapped = 0.0
    for _ in range(8):
        right = [int(o[1]) ^ int(o[0]) for o in obs]
        obs, rew, *_ = env.step(right[::-1])  # each agent gets the other's optimal action
        swapped += rew.sum()
    # the two bits are equal about half the time, so swapping loses roughly half of the 16 possible
    assert swapped < 16


def test_two_agent_tag_is_deterministic_under_a_seed():
    def rollout():
        env = TwoAgentTagEnv()
        obs, _ = env.reset(seed=123)
        seen = [np.stack(obs)]
        for _ in range(7):
            obs, *_ = env.step([0, 1])
            seen.append(np.stack(obs))
        return np.stack(seen)

    np.testing.assert_array_equal(rollout(), rollout())


def test_two_agent_tag_masked_forbids_action_2():
    env = gym.make("TwoAgentTagMasked-v0").unwrapped  # gym.make hides num_agents behind its wrappers
    assert env.num_agents == 2
    obs, _ = env.reset(seed=0)
    assert set(obs[0]) == {"observation", "action_mask"} and obs[0]["action_mask"].tolist() == [1, 1, 0]
    assert obs[0] in env.observation_space
    env.step([0, 1])
    with pytest.raises(AssertionError, match="forbids"):
        env.step([2, 0])


# --- PettingZoo adapter on TinyParallelEnv ---------------------------------------------------------------------


@needs_pettingzoo
def test_adapter_spaces_reset_and_seed():
    from sample_factory.envs.pettingzoo_env import PettingZooParallelEnv

    tiny = TinyParallelEnv()
    env = PettingZooParallelEnv(tiny)
    assert env.num_agents == 3 and env.agent_ids == ["a0", "a1", "a2"]
    assert env.observation_space == gym.spaces.Box(0.0, 100.0, (2,), np.float32)
    assert env.action_space == gym.spaces.Discrete(3)
    obs, infos = env.reset(seed=42, options={"x": 1})
    assert tiny.last_seed == 42 and tiny.last_options == {"x": 1}
    assert [o.tolist() for o in obs] == [[0, 0], [1, 0], [2, 0]]
    assert [info["is_active"] for info in infos] == [True] * 3 and infos[0]["t"] == 0


@needs_pettingzoo
def test_adapter_routes_actions_and_handles_a_dead_agent():
    from sample_factory.envs.pettingzoo_env import PettingZooParallelEnv

    tiny = TinyParallelEnv(episode_len=5, death_step=2)
    env = PettingZooParallelEnv(tiny)
    env.reset(seed=0)
    obs, rew, term, trunc, infos = _step_all(env, np.array([0, 1, 2]))
    assert tiny.last_actions == {"a0": 0, "a1": 1, "a2": 2}
    assert rew.tolist() == [0.0, 11.0, 22.0] and rew.dtype == np.float32
    assert [o.tolist() for o in obs] == [[0, 1], [1, 1], [2, 1]]
    assert not term.any() and not trunc.any() and not env.episode_over

    obs, rew, term, trunc, infos = _step_all(env, [1, 1, 1])  # a1 dies here
    assert term.tolist() == [False, True, False] and rew.tolist() == [1.0, 11.0, 21.0]
    assert infos[1]["is_active"] and obs[1].tolist() == [1, 2]  # its final observation

    for t in (3, 4):
        obs, rew, term, trunc, infos = _step_all(env, [2, 2, 2])
        assert "a1" not in tiny.last_actions  # a dead agent's action is not passed on
        assert not infos[1]["is_active"] and infos[0]["is_active"] and infos[2]["is_active"]
        assert obs[1].dtype == np.float32 and obs[1].shape == (2,) and not obs[1].any()
        assert rew[1] == 0 and not term[1] and not trunc[1]
        assert obs[0].tolist() == [0, t]

    obs, rew, term, trunc, infos = _step_all(env, [0, 0, 0])
    assert trunc.tolist() == [True, False, True] and not term.any()
    assert env.episode_over  # every agent that was active is done: the caller resets now
    obs, infos = env.reset()
    assert all(info["is_active"] for info in infos) and obs[1].tolist() == [1, 0]


@needs_pettingzoo
def test_adapter_agent_leaving_without_a_flag_is_terminated():
    from sample_factory.envs.pettingzoo_env import PettingZooParallelEnv

    env = PettingZooParallelEnv(TinyParallelEnv(death_step=1, silent_death=True))
    env.reset(seed=0)
    obs, rew, term, trunc, infos = _step_all(env, [0, 1, 2])
    assert term.tolist() == [False, True, False] and rew[1] == 0 and not obs[1].any()
    obs, rew, term, trunc, infos = _step_all(env, [0, 1, 2])
    assert not infos[1]["is_active"] and not term[1]


@needs_pettingzoo
def test_adapter_late_joiner():
    from sample_factory.envs.pettingzoo_env import PettingZooParallelEnv

    tiny = TinyParallelEnv(late_joiner=True, death_step=3)
    env = PettingZooParallelEnv(tiny)
    obs, infos = env.reset(seed=0)
    assert not infos[2]["is_active"] and not obs[2].any()
    obs, rew, term, trunc, infos = _step_all(env, [1, 1, 1])
    assert "a2" not in tiny.last_actions and rew[2] == 0
    assert not infos[2]["is_active"] and obs[2].tolist() == [2, 1]  # joined: acts on this observation next
    obs, rew, term, trunc, infos = _step_all(env, [1, 1, 1])
    assert tiny.last_actions["a2"] == 1 and infos[2]["is_active"] and rew[2] == 21


@needs_pettingzoo
def test_adapter_action_mask_dict():
    from sample_factory.envs.pettingzoo_env import PettingZooParallelEnv

    env = PettingZooParallelEnv(TinyParallelEnv(masked=True, death_step=1))
    space = env.observation_space
    assert isinstance(space, gym.spaces.Dict) and set(space.spaces) == {"observation", "action_mask"}
    assert space["action_mask"].dtype == np.int8 and space["action_mask"].shape == (3,)
    obs, _ = env.reset(seed=0)
    assert obs[0]["action_mask"].tolist() == [0, 1, 1] and obs[0]["action_mask"].dtype == np.int8  # as given
    obs, rew, term, trunc, infos = _step_all(env, [1, 1, 1])
    assert obs[0]["action_mask"].tolist() == [1, 0, 1] and term[1]
    obs, *_ = _step_all(env, [0, 0, 0])
    # an inactive agent: all zeros, the mask included
    assert not obs[1]["observation"].any() and obs[1]["observation"].dtype == np.float32
    assert obs[1]["action_mask"].tolist() == [0, 0, 0] and obs[1]["action_mask"].dtype == np.int8
    assert all(o in space for o in obs)


@needs_pettingzoo
def test_adapter_rejects_spaces_that_differ():
    from sample_factory.envs.pettingzoo_env import PettingZooParallelEnv

    with pytest.raises(ValueError, match=r"observation spaces differ.*'a0'.*'a2'"):
        PettingZooParallelEnv(TinyParallelEnv(odd_space=True))


@needs_pettingzoo
def test_adapter_render_close_and_action_count():
    from sample_factory.envs.pettingzoo_env import PettingZooParallelEnv

    tiny = TinyParallelEnv(render_mode="rgb_array")
    env = PettingZooParallelEnv(tiny)
    assert env.render_mode == "rgb_array"
    env.reset(seed=0)
    assert env.render().shape == (4, 4, 3)
    with pytest.raises(ValueError, match="expected 3 actions"):
        env.step([0, 0])
    env.close()
    assert tiny.closed


# --- names ---------------------------------------------------------------------------------------------------


@needs_pettingzoo
@pytest.mark.parametrize(
    "name,match",
    [
        ("pettingzoo.butterfly", "look like pettingzoo.<family>.<env_module>"),
        ("pettingzoo.nofamily.foo_v1", "unknown PettingZoo family 'nofamily'.*butterfly"),
        ("pettingzoo.sisl.pursuit_v4", r"unknown PettingZoo env.*did you mean pettingzoo\.sisl\.pursuit_v5"),
        ("pettingzoo.classic.tictactoe_v3", "no parallel_env"),
    ],
)
def test_make_errors(name, match):
    from sample_factory.envs.pettingzoo_env import make_pettingzoo_env

    if name.endswith("tictactoe_v3") and not _has("pygame"):
        pytest.skip("tictactoe needs pygame")
    with pytest.raises(ValueError, match=match):
        make_pettingzoo_env(CFG, name)


def test_is_pettingzoo_name():
    from sample_factory.envs.pettingzoo_env import is_pettingzoo_name

    assert is_pettingzoo_name("pettingzoo.butterfly.pistonball_v6")
    assert not is_pettingzoo_name("CartPole-v1") and not is_pettingzoo_name("pettingzoo")


def test_missing_pettingzoo_names_the_extra(monkeypatch):
    import sys

    from sample_factory.envs.pettingzoo_env import make_pettingzoo_env

    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # makes `import pettingzoo` fail
    with pytest.raises(ValueError, match=re.escape(install_hint("pettingzoo"))):
        make_pettingzoo_env(CFG, "pettingzoo.butterfly.pistonball_v6")


# --- real PettingZoo envs ------------------------------------------------------------------------------------


def _random_episode(env, seed: int, max_steps: int = 2000) -> tuple[int, int]:
    """Random actions until every agent is done; checks the interface on the way. Returns (steps, inactive steps)."""
    obs, infos = env.reset(seed=seed)
    assert len(obs) == env.num_agents and all(o in env.observation_space for o in obs)
    active = np.array([info["is_active"] for info in infos])
    steps = inactive_steps = 0
    while active.any() and steps < max_steps:
        obs, rew, term, trunc, infos = _step_all(env, [env.action_space.sample() for _ in range(env.num_agents)])
        steps += 1
        for i, info in enumerate(infos):
            if not info["is_active"]:
                inactive_steps += 1
                assert rew[i] == 0 and not term[i] and not trunc[i] and not np.any(obs[i])
            assert obs[i].shape == env.observation_space.shape
        active &= ~(term | trunc)
    assert not active.any() and env.episode_over
    return steps, inactive_steps


@needs_pettingzoo
@pytest.mark.skipif(not _has("pygame"), reason="knights_archers_zombies needs pygame-ce (pettingzoo[butterfly])")
def test_real_knights_archers_zombies():
    from sample_factory.envs.pettingzoo_env import make_pettingzoo_env

    env = make_pettingzoo_env(CFG, "pettingzoo.butterfly.knights_archers_zombies_v11")
    assert env.num_agents == 4 and env.action_space == gym.spaces.Discrete(6)
    assert env.observation_space.shape == (27, 5)
    env.action_space.seed(0)
    inactive = 0
    for seed in range(10):  # agents often die one by one in KAZ, which makes inactive steps
        inactive += _random_episode(env, seed)[1]
        if inactive and seed >= 2:
            break
    assert inactive > 0
    env.close()


@needs_pettingzoo
@pytest.mark.skipif(not _has("mpe2", "pygame"), reason="MPE needs the mpe2 package (pip install mpe2)")
def test_real_mpe_simple_spread():
    from sample_factory.envs.pettingzoo_env import make_pettingzoo_env

    env = make_pettingzoo_env(CFG, "pettingzoo.mpe.simple_spread_v3", render_mode="rgb_array")
    assert env.num_agents == 3 and env.observation_space.shape == (18,) and env.action_space.n == 5
    steps, inactive = _random_episode(env, 0)
    assert steps == 25 and inactive == 0  # the default max_cycles, all agents truncated together
    assert env.render().ndim == 3
    env.close()
    with pytest.raises(ValueError, match="observation spaces differ.*adversary_0.*agent_0"):
        make_pettingzoo_env(CFG, "pettingzoo.mpe.simple_tag_v3")
