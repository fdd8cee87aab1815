"""`EnvGroup`: the envs of one split stepped in lockstep with same-step autoreset into preallocated arrays, and the
checks at the env boundary.

Columns: a split of E envs with A agents each (A = env.num_agents, 1 for single-agent envs) has n = E * A columns;
column c is agent c % A of env c // A. Single-agent and multi-agent envs go through the same code path.

Multi-agent env interface (docs/environments.md): reset() -> (list of A observations, list of A infos);
step(list of A actions) -> (observations, rewards [A], terminated [A], truncated [A], infos) with no autoreset;
an agent that finished before the others is reported with infos[a]["is_active"] = False on every later step until
the episode ends (its action is ignored).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from sample_factory.envs.actions import action_converter, sample_action
from sample_factory.envs.spaces import ACTION_MASK_KEY, OBS_KEY, alloc_obs, as_obs_dict, obs_fields


class EnvError(RuntimeError):
    """An env raised or returned something invalid; the message names the env and the field."""


def env_num_agents(env: gym.Env) -> int:
    # gymnasium's wrappers (gym.make adds some) do not forward attributes; get_wrapper_attr looks through them.
    try:
        return int(env.get_wrapper_attr("num_agents") or 1)
    except AttributeError:
        return 1


class SplitEnvs(Protocol):
    """What an actor worker steps for one split: `EnvGroup`, or a batched env's group (envpool_group.py,
    vector_group.py). Arrays have one row per column (agent) unless named per env."""

    n: int  # columns: num_envs * num_agents
    num_envs: int
    num_agents: int
    env_ids: list[int]  # global env ids (also the seed offsets)
    obs: dict[str, np.ndarray]  # key -> [n, *shape]: what each column acts on next
    final_obs: dict[str, np.ndarray]  # key -> [n, *shape]: the final observation of a truncated episode
    rewards: np.ndarray  # [n] float32
    dones: np.ndarray  # [n] bool
    truncated: np.ndarray  # [n] bool
    active: np.ndarray  # [n] bool: took part in the last step
    first: np.ndarray  # [n] bool: obs starts an episode
    env_reset: np.ndarray  # [num_envs] bool: reset at the last step
    finished_columns: list[int]  # the column of each episode the last step returned
    finished_infos: list[dict]  # ... and the info of its last step
    episode_return: np.ndarray  # [n] float64
    episode_len: np.ndarray  # [n] int64
    unreported: np.ndarray  # [n] bool: the episode began with random decorrelation steps

    # between: called between two envs' start-up steps (STOP is read there); a batched env has none
    def reset(self, between: Callable[[], None] | None = None) -> object: ...

    def random_steps(self, counts: list[int], between: Callable[[], None] | None = None) -> None: ...

    def step(self, actions: np.ndarray) -> list[tuple[float, int]]:
        """The (return, length) of each episode that ended, in `finished_columns` order."""
        ...

    def close(self) -> None: ...


class EnvGroup:
    """After `step`, `obs[k][c]` is what column c acts on next: the reset observation where the episode ended
    (same-step autoreset); the final observation of a truncated episode is kept in `final_obs[k][c]` for value
    bootstrapping; `active[c]` is False when agent c did not take part in the step (it finished before the
    others in its env; such steps are masked in training). Everything an env returns is checked here: a wrong key,
    shape or dtype, NaN/inf observations or rewards raise EnvError naming the env.

    An env that ends a training episode while its game goes on (Atari episodic life) sets info["game_over"] =
    False: episode statistics then continue until the real end of the game."""

    def __init__(
        self,
        envs: list[gym.Env],
        seeds: list[int | None],
        env_ids: list[int] | None = None,
        action_bounds: str = "clip",
    ):
        self.envs = envs
        self.env_ids = env_ids if env_ids is not None else list(range(len(envs)))
        self.num_agents = env_num_agents(envs[0])
        if any(env_num_agents(e) != self.num_agents for e in envs):
            raise EnvError("all envs of a split must have the same num_agents")
        self.multi_agent = self.num_agents > 1
        A = self.num_agents
        self.num_envs = len(envs)
        self.n = n = len(envs) * A
        self.obs_space = envs[0].observation_space
        self.fields = obs_fields(self.obs_space)
        self.float_keys = [k for k, f in self.fields.items() if f.dtype.kind == "f"]
        self.plain_key = None if isinstance(self.obs_space, gym.spaces.Dict) else next(iter(self.fields))
        self.obs = alloc_obs(self.fields, n)  # key -> [n, *shape]
        self.final_obs = alloc_obs(self.fields, n)
        self.rewards = np.zeros(n, dtype=np.float32)
        self.dones = np.zeros(n, dtype=bool)
        self.truncated = np.zeros(n, dtype=bool)
        self.active = np.ones(n, dtype=bool)
        self.first = np.zeros(n, dtype=bool)  # obs[c] starts an episode (its env was reset, or the agent finished)
        self.env_reset = np.zeros(len(envs), dtype=bool)  # env i was reset at the last step
        self.finished_columns: list[int] = []  # the column of each episode the last step() returned
        self.finished_infos: list[dict] = []  # ... and the info of its last step
        self.agent_done = np.zeros(n, dtype=bool)  # finished within the current episode of its env
        self.episode_return = np.zeros(n, dtype=np.float64)
        self.episode_len = np.zeros(n, dtype=np.int64)
        # columns whose episode began with random decorrelation steps: its end is not reported (not the policy's)
        self.unreported = np.zeros(n, dtype=bool)
        self.seeds = seeds
        self.convert_action = action_converter(envs[0].action_space, action_bounds)

    # --- env calls, normalized to per-agent lists ---------------------------------------------------------------

    def _call(self, i: int, where: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise EnvError(f"env {self.env_ids[i]} raised in {where}: {type(e).__name__}: {e}") from e

    def _reset_env(self, i: int, seed: int | None = None) -> tuple[list, list[dict]]:
        kwargs = {"seed": seed} if seed is not None else {}
        o, info = self._call(i, "reset", self.envs[i].reset, **kwargs)
        return (list(o), list(info)) if self.multi_agent else ([o], [info])

    def _step_env(self, i: int, actions: list) -> tuple[list, Any, Any, Any, list[dict]]:
        env = self.envs[i]
        if self.multi_agent:
            o, r, term, trunc, info = self._call(i, "step", env.step, actions)
            if len(o) != self.num_agents:
                raise EnvError(
                    f"env {self.env_ids[i]}: step returned {len(o)} observations for {self.num_agents} agents"
                )
            return list(o), r, term, trunc, list(info)
        o, r, term, trunc, info = self._call(i, "step", env.step, actions[0])
        return [o], (r,), (term,), (trunc,), [info]

    def _put_obs(self, target: dict[str, np.ndarray], c: int, o: Any, i: int, where: str) -> None:
        """Check one observation against the space and write it into row c of `target`."""
        if self.plain_key is not None:  # the common case, on the hot path: no dict to build
            target[self.plain_key][c] = self._checked(self.plain_key, o, i, where)
            return
        d = as_obs_dict(o, self.obs_space)
        if len(d) != len(self.fields) or any(k not in d for k in self.fields):
            raise EnvError(
                f"env {self.env_ids[i]}: {where} returned observation keys {sorted(d)}, expected {sorted(self.fields)}"
            )
        for k in self.fields:
            target[k][c] = self._checked(k, d[k], i, where)

    def _checked(self, k: str, v: Any, i: int, where: str) -> Any:
        f = self.fields[k]
        shape = getattr(v, "shape", None)
        if shape is None:
            v = np.asarray(v)
            shape = v.shape
        if shape != f.shape and tuple(shape) != f.shape:
            name = "an observation" if self.plain_key else f"observation {k!r}"
            raise EnvError(
                f"env {self.env_ids[i]}: {where} returned {name} of shape {tuple(shape)}, expected {f.shape}"
            )
        dtype = getattr(v, "dtype", None)
        if dtype is not None and dtype != f.dtype and not np.can_cast(dtype, f.dtype, "same_kind"):
            name = "an observation" if self.plain_key else f"observation {k!r}"
            raise EnvError(f"env {self.env_ids[i]}: {where} returned {name} of dtype {dtype}, expected {f.dtype}")
        return v

    def _check_finite_obs(self, where: str) -> None:
        for k in self.float_keys:
            x = self.obs[k]
            if not np.isfinite(x).all():
                bad = int(np.argwhere(~np.isfinite(x.reshape(self.n, -1)))[0][0]) // self.num_agents
                raise EnvError(f"env {self.env_ids[bad]}: {where} returned a NaN or inf observation")

    def _sample_actions(self, i: int) -> list:
        """Random actions for the agents of env i, allowed by their current action masks."""
        space, A = self.envs[i].action_space, self.num_agents
        masks = self.obs.get(ACTION_MASK_KEY)
        return [sample_action(space, None if masks is None else masks[i * A + a]) for a in range(A)]

    # --- the group's API --------------------------------------------------------------------------------------

    def reset(self, between: Callable[[], None] | None = None) -> dict[str, np.ndarray]:
        """`between`: called before each env's reset but the first (a starting actor reads STOP there: the first
        reset of a VizDoom env starts its engine)."""
        A = self.num_agents
        for i in range(len(self.envs)):
            if between is not None and i:
                between()
            obs, _ = self._reset_env(i, self.seeds[i])
            for a in range(A):
                self._put_obs(self.obs, i * A + a, obs[a], i, "reset")
        self._check_finite_obs("reset")
        self.agent_done[:] = False
        self.unreported[:] = False
        self.episode_return[:] = 0
        self.episode_len[:] = 0
        return self.obs

    def random_steps(self, counts: list[int], between: Callable[[], None] | None = None) -> None:
        """Step env i `counts[i]` times with random actions (decorrelates episodes), with the same checks;
        `between` as in `reset`. The episodes that take random actions are not reported when they end: their return
        is not the policy's (only its steps were counted, so a grid walk could end at -5 where -13 is the best)."""
        A = self.num_agents
        for i in range(len(self.envs)):
            if between is not None and i:
                between()
            for _ in range(counts[i]):
                obs, _, term, trunc, infos = self._step_env(i, self._sample_actions(i))
                done = np.logical_or(term, trunc)
                self.agent_done[i * A : (i + 1) * A] |= done
                if self.agent_done[i * A : (i + 1) * A].all():
                    obs, infos = self._reset_env(i)
                    self.agent_done[i * A : (i + 1) * A] = False
                for a in range(A):  # every step: the next random actions respect the current action mask
                    self._put_obs(self.obs, i * A + a, obs[a], i, "step")
            if counts[i]:
                self.unreported[i * A : (i + 1) * A] = True
        self._check_finite_obs("step")

    def step(self, actions: np.ndarray) -> list[tuple[float, int]]:
        """Step every env with actions [n, ...]; return the (return, length) of the episodes that ended (one per
        agent in multi-agent envs)."""
        if not self.multi_agent:
            finished = self._step_single_agent(actions)
        else:
            finished = self._step_multi_agent(actions)
        if not np.isfinite(self.rewards).all():
            bad = int(np.argmin(np.isfinite(self.rewards))) // self.num_agents
            raise EnvError(f"env {self.env_ids[bad]}: step returned a NaN or inf reward")
        self._check_finite_obs("step")
        return finished

    def _step_single_agent(self, actions: np.ndarray) -> list[tuple[float, int]]:
        """The multi-agent loop below specialised to one agent per env: this is the hot path of cheap envs
        (CartPole steps in ~10 us; the general loop's per-agent bookkeeping cost a third of the throughput)."""
        finished, self.finished_columns, self.finished_infos = [], [], []
        rewards, dones, truncated = self.rewards, self.dones, self.truncated
        ep_return, ep_len, convert = self.episode_return, self.episode_len, self.convert_action
        unreported = self.unreported
        for i, env in enumerate(self.envs):
            a = actions[i] if convert is None else convert(actions[i])
            o, r, term, trunc, info = self._call(i, "step", env.step, a)
            rewards[i] = r
            ep_return[i] += r
            ep_len[i] += 1
            where = "step"
            if term or trunc:
                if not info or info.get("game_over", True):
                    if unreported[i]:
                        unreported[i] = False
                    else:
                        finished.append((float(ep_return[i]), int(ep_len[i])))
                        self.finished_columns.append(i)
                        self.finished_infos.append(info or {})
                    ep_return[i], ep_len[i] = 0.0, 0
                if trunc and not term:
                    self._put_obs(self.final_obs, i, o, i, "step")
                o, _ = self._call(i, "reset", env.reset)
                where = "reset"
            self._put_obs(self.obs, i, o, i, where)
            dones[i] = term or trunc
            truncated[i] = trunc and not term
        self.first[:] = dones
        self.env_reset[:] = dones
        return finished

    def _step_multi_agent(self, actions: np.ndarray) -> list[tuple[float, int]]:
        finished = []
        self.finished_columns, self.finished_infos = [], []
        A = self.num_agents
        rewards, dones, truncated = self.rewards, self.dones, self.truncated
        convert = self.convert_action
        for i in range(len(self.envs)):
            rows = actions[i * A : (i + 1) * A]
            acts = [convert(r) for r in rows] if convert is not None else list(rows)
            obs, r, term, trunc, infos = self._step_env(i, acts)
            game_over = True
            for a in range(A):
                c = i * A + a
                te, tr = bool(term[a]), bool(trunc[a])
                self.active[c] = infos[a].get("is_active", True) if infos[a] else True
                rewards[c] = r[a]
                dones[c] = te or tr
                truncated[c] = tr and not te
                if self.active[c]:
                    self.episode_return[c] += r[a]
                    self.episode_len[c] += 1
                if te or tr:
                    self.agent_done[c] = True
                    game_over = infos[a].get("game_over", True) if infos[a] else True
                    if game_over:
                        if self.unreported[c]:
                            self.unreported[c] = False
                        else:
                            finished.append((float(self.episode_return[c]), int(self.episode_len[c])))
                            self.finished_columns.append(c)
                            self.finished_infos.append(infos[a] or {})
                        self.episode_return[c] = 0.0
                        self.episode_len[c] = 0
                    if tr and not te:
                        self._put_obs(self.final_obs, c, obs[a], i, "step")
            reset = bool(self.agent_done[i * A : (i + 1) * A].all())
            self.env_reset[i] = reset
            if reset:
                obs, _ = self._reset_env(i)
                self.agent_done[i * A : (i + 1) * A] = False
            self.first[i * A : (i + 1) * A] = reset
            where = "reset" if reset else "step"
            for a in range(A):
                self._put_obs(self.obs, i * A + a, obs[a], i, where)
        self.first |= dones  # an agent that finished early starts its inactive stretch from a fresh core state
        return finished

    def close(self) -> None:
        for env in self.envs:
            env.close()


class BatchedEnvGroup:
    """What the groups of one batched single-agent env share (envs/envpool_group.py, envs/vector_group.py): the
    arrays of `EnvGroup`'s interface with one row per env, and the checks of the observations a batch returns.
    `source` names the batch in error messages."""

    source = "a batched env"

    def _init_arrays(self, n: int, obs_shape: tuple, obs_dtype: Any, env_ids: list[int] | None, seed: int | None):
        self.n = self.num_envs = n
        self.num_agents = 1
        self.env_ids = env_ids if env_ids is not None else list(range(n))
        self.obs_shape, self.obs_dtype = tuple(obs_shape), np.dtype(obs_dtype)
        self.check_finite = np.issubdtype(self.obs_dtype, np.floating)
        self.obs = {OBS_KEY: np.zeros((n, *self.obs_shape), dtype=self.obs_dtype)}
        self.final_obs = {OBS_KEY: np.zeros((n, *self.obs_shape), dtype=self.obs_dtype)}
        self.rewards = np.zeros(n, dtype=np.float32)
        self.dones = np.zeros(n, dtype=bool)
        self.truncated = np.zeros(n, dtype=bool)
        self.active = np.ones(n, dtype=bool)
        self.first = self.dones  # single-agent: an episode starts exactly where one ended
        self.env_reset = self.dones
        self.finished_columns: list[int] = []
        self.finished_infos: list[dict] = []
        self.episode_return = np.zeros(n, dtype=np.float64)
        self.episode_len = np.zeros(n, dtype=np.int64)
        self.unreported = np.zeros(n, dtype=bool)  # as in EnvGroup: the episode began with random steps
        self.rng = np.random.default_rng(seed)

    def _clear_step(self, episodes: bool = False) -> None:
        """No step outcome pending (after a reset or the decorrelation steps); `episodes`: the statistics too."""
        self.rewards[:] = 0.0
        self.dones[:] = False
        self.truncated[:] = False
        if episodes:
            self.episode_return[:] = 0.0
            self.episode_len[:] = 0
            self.unreported[:] = False

    def _put_obs(self, rows: np.ndarray | None, obs: np.ndarray, where: str) -> None:
        """Check a batch of observations [k, *shape] and write them into `obs` at `rows` (every row when None)."""
        if obs.shape[1:] != self.obs_shape or obs.dtype != self.obs_dtype:
            raise EnvError(
                f"{self.source} {where} returned observations {obs.dtype}{list(obs.shape[1:])}, "
                f"expected {self.obs_dtype}{list(self.obs_shape)}"
            )
        if self.check_finite and not np.isfinite(obs).all():
            bad = int(np.argwhere(~np.isfinite(obs.reshape(len(obs), -1)))[0][0])
            env = self.env_ids[bad if rows is None else int(rows[bad])]
            raise EnvError(f"env {env}: {where} returned a NaN or inf observation")
        if rows is None:
            self.obs[OBS_KEY][:] = obs
        else:
            self.obs[OBS_KEY][rows] = obs
