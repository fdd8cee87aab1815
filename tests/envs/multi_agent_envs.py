"""Small deterministic multi-agent envs for tests (the interface is in docs/environments.md).

- `TwoAgentTagEnv` implements the multi-agent interface directly. Registered on import as `TwoAgentTag-v0` and
  `TwoAgentTagMasked-v0` (usable from worker processes via `--env=tests.envs.multi_agent_envs:TwoAgentTag-v0`;
  note that gym.make wraps it, so read `num_agents` through `env.unwrapped` or `env.get_wrapper_attr`).
- `TinyParallelEnv` is a PettingZoo-style ParallelEnv for testing the adapter in sample_factory/envs/pettingzoo_env.py
  without any PettingZoo family package (it subclasses pettingzoo.ParallelEnv when pettingzoo is installed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from sample_factory.workers.policy_mapping import register_policy_mapping

try:
    from pettingzoo import ParallelEnv as _ParallelBase
except ImportError:  # the adapter only duck-types; its tests skip without pettingzoo anyway
    _ParallelBase = object


class TwoAgentTagEnv(gym.Env):
    """Two agents, `episode_len` steps per episode. Agent i observes [i, bit_i, t / episode_len] (float32): the
    first entry is its tag, so a test can tell whose observation it got. Reward 1 when the action equals
    bit_i XOR i, else 0: the right action depends on the tag, so observations or actions routed to the wrong agent
    cost reward, and a policy that reads both inputs learns to score 1 per active step.

    In every `die_every`-th episode (the 2nd, 4th, ... with the default 2) agent 1 terminates at step `death_step`
    and is inactive afterwards (zero observation, reward 0, flags False, info is_active False). The episode ends at
    `episode_len` steps with truncated=True for the agents still active.

    Actions are Discrete(3); action 2 is never rewarded. With `masked=True` the observation is a Dict
    {"observation": [3] float32, "action_mask": [3] int8} that forbids action 2, and receiving action 2 from an
    active agent raises, so a test sees at once if masked actions are sampled. An inactive agent's observation is
    all zeros, its mask included."""

    metadata = {"render_modes": ["rgb_array"]}
    num_agents = 2

    def __init__(
        self,
        episode_len: int = 8,
        death_step: int = 3,
        die_every: int = 2,
        masked: bool = False,
        render_mode: str | None = None,
    ):
        assert 0 < death_step < episode_len
        self.episode_len, self.death_step, self.die_every, self.masked = episode_len, death_step, die_every, masked
        self.render_mode = render_mode
        vec = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        if masked:
            mask = gym.spaces.Box(0, 1, (3,), np.int8)
            self.observation_space = gym.spaces.Dict({"observation": vec, "action_mask": mask})
        else:
            self.observation_space = vec
        self.episodes = 0  # resets so far
        self.t = 0
        self.bits = np.zeros(2, dtype=np.int64)
        self.active = [True, True]
        self.dies_this_episode = False
        self.received_actions: list[list[int]] = []  # per step, the actions of the active agents (-1: inactive)

    def _agent_obs(self, i: int) -> Any:
        vec = np.array([i, self.bits[i], self.t / self.episode_len], dtype=np.float32)
        if not self.active[i]:
            vec = np.zeros(3, dtype=np.float32)
        if not self.masked:
            return vec
        mask = np.array([1, 1, 0] if self.active[i] else [0, 0, 0], dtype=np.int8)
        return {"observation": vec, "action_mask": mask}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[list, list[dict]]:
        super().reset(seed=seed)
        self.episodes += 1
        self.t = 0
        self.active = [True, True]
        self.dies_this_episode = self.die_every > 0 and self.episodes % self.die_every == 0
        self.bits = self.np_random.integers(0, 2, size=2)
        self.received_actions = []
        return [self._agent_obs(i) for i in range(2)], [{"is_active": True} for _ in range(2)]

    def step(self, actions: Sequence[Any]) -> tuple[list, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        assert len(actions) == 2, actions
        if not any(self.active):
            raise RuntimeError("step() after the episode ended: reset() first")
        rewards = np.zeros(2, dtype=np.float32)
        received = []
        for i in range(2):
            if not self.active[i]:
                received.append(-1)
                continue
            a = int(np.asarray(actions[i]).item())
            assert 0 <= a < 3, a
            if self.masked and a == 2:
                raise AssertionError(f"agent {i} chose action 2, which its action_mask forbids")
            received.append(a)
            rewards[i] = float(a == (int(self.bits[i]) ^ i))
        self.received_actions.append(received)
        self.t += 1
        terminated = np.zeros(2, dtype=bool)
        truncated = np.zeros(2, dtype=bool)
        was_active = list(self.active)
        if self.dies_this_episode and self.t == self.death_step and self.active[1]:
            terminated[1] = True
            self.active[1] = False
        if self.t >= self.episode_len:
            for i in range(2):
                if self.active[i]:
                    truncated[i] = True
            self.active = [False, False]
        self.bits = self.np_random.integers(0, 2, size=2)
        obs, infos = [], []
        for i in range(2):
            # the agent that just finished still reports its final observation (for bootstrapping)
            if was_active[i] and not self.active[i]:
                self.active[i] = True
                obs.append(self._agent_obs(i))
                self.active[i] = False
            else:
                obs.append(self._agent_obs(i))
            infos.append({"is_active": was_active[i]})
        return obs, rewards, terminated, truncated, infos

    def render(self) -> np.ndarray:
        return np.zeros((8, 8, 3), dtype=np.uint8)


gym.register("TwoAgentTag-v0", entry_point=TwoAgentTagEnv, disable_env_checker=True)
gym.register("TwoAgentTagMasked-v0", entry_point=TwoAgentTagEnv, kwargs={"masked": True}, disable_env_checker=True)


class TinyParallelEnv(_ParallelBase):
    """A PettingZoo ParallelEnv with agents "a0", "a1", "a2" and episodes of `episode_len` steps.

    Agent ai observes [i, t] (float32, or the Dict {"observation", "action_mask"} with `masked`); actions are
    Discrete(3); the reward is 10 * i + action, so rewards show which action reached which agent. "a1" terminates
    at step `death_step` and leaves `agents` (with `silent_death` it leaves without any flag); the others are
    truncated at `episode_len`. With `late_joiner`, "a2" is absent at reset and joins after the first step.
    `odd_space` gives "a2" a different observation space. The last seed, options and actions are recorded."""

    metadata = {"name": "tiny_parallel_v0", "render_modes": ["rgb_array"]}

    def __init__(
        self,
        episode_len: int = 5,
        death_step: int = 2,
        masked: bool = False,
        silent_death: bool = False,
        late_joiner: bool = False,
        odd_space: bool = False,
        render_mode: str | None = None,
    ):
        self.possible_agents = ["a0", "a1", "a2"]
        self.agents: list[str] = []
        self.episode_len, self.death_step = episode_len, death_step
        self.masked, self.silent_death, self.late_joiner = masked, silent_death, late_joiner
        self.render_mode = render_mode
        vec = gym.spaces.Box(0.0, 100.0, (2,), np.float32)
        self._obs_space: gym.Space = vec
        if masked:
            self._obs_space = gym.spaces.Dict({"observation": vec, "action_mask": gym.spaces.Box(0, 1, (3,), np.int8)})
        self._odd_space = gym.spaces.Box(0.0, 100.0, (5,), np.float32) if odd_space else None
        self._action_space = gym.spaces.Discrete(3)
        self.t = 0
        self.last_seed: int | None = None
        self.last_options: dict | None = None
        self.last_actions: dict[str, int] = {}
        self.closed = False

    def observation_space(self, agent: str) -> gym.Space:
        return self._odd_space if agent == "a2" and self._odd_space is not None else self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._action_space

    def _obs(self, agent: str) -> Any:
        i = self.possible_agents.index(agent)
        vec = np.array([i, self.t], dtype=np.float32)
        if not self.masked:
            return vec
        mask = np.ones(3, dtype=np.int8)
        mask[self.t % 3] = 0  # a different action is forbidden each step
        return {"observation": vec, "action_mask": mask}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.last_seed, self.last_options = seed, options
        self.t = 0
        self.agents = ["a0", "a1"] if self.late_joiner else list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {"t": 0} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)
        self.last_actions = {a: int(v) for a, v in actions.items()}
        self.t += 1
        rewards = {a: 10.0 * self.possible_agents.index(a) + actions[a] for a in self.agents}
        terms = {a: False for a in self.agents}
        truncs = {a: False for a in self.agents}
        obs = {a: self._obs(a) for a in self.agents}
        infos = {a: {"t": self.t} for a in self.agents}
        if self.t == self.death_step and "a1" in self.agents:
            self.agents.remove("a1")
            if self.silent_death:
                for d in (terms, truncs, obs, infos, rewards):
                    d.pop("a1")
            else:
                terms["a1"] = True
        if self.t >= self.episode_len:
            for a in self.agents:
                truncs[a] = True
            self.agents = []
        elif self.late_joiner and self.t == 1:
            self.agents.append("a2")
            obs["a2"] = self._obs("a2")
            infos["a2"] = {"t": self.t}
        return obs, rewards, terms, truncs, infos

    def render(self) -> np.ndarray:
        return np.full((4, 4, 3), 7, dtype=np.uint8)

    def close(self) -> None:
        self.closed = True


def _agent_index_mapping(env_index: int, num_agents: int, num_policies: int, rng: np.random.Generator) -> list[int]:
    """Agent i -> policy i % num_policies: lets tests check that each agent's steps reach its policy's learner."""
    return [a % num_policies for a in range(num_agents)]


register_policy_mapping("by_agent", _agent_index_mapping)
