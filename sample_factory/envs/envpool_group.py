"""EnvPool backend (`--env_backend=envpool`, the [envpool] extra): the envs of one split are one EnvPool batch that
is stepped with one call, instead of n python envs stepped in a loop.

`EnvPoolGroup` has the interface of `EnvGroup` (obs, final_obs, rewards, dones, truncated, active; reset,
random_steps, step, close), so the actor worker can use either. Names: `atari_<game>` / `ALE/<Game>-v5` (envpool's
C++ Atari wrappers, configured like envs/atari.py) and the MuJoCo v5 envs (`mujoco_<name>` or the gymnasium id).

EnvPool resets an env on the call *after* the one that ended its episode (next-step autoreset: that call ignores the
action and returns the reset observation). Our engine needs same-step autoreset, so `step` makes that resetting call
at once, for the envs that just finished only. Using the env's own autoreset rather than an explicit
`reset(env_id)` matters for Atari with episodic life: an explicit reset always starts a new game, the autoreset
continues the game after a lost life.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from sample_factory.config import Config
from sample_factory.config.env_defaults import MUJOCO_NAMES, env_name, gym_env_name
from sample_factory.config.extras import install_hint
from sample_factory.envs.atari import atari_env_id, episodic_life_enabled
from sample_factory.envs.env_group import BatchedEnvGroup, EnvError
from sample_factory.envs.spaces import OBS_KEY

# ALE v5 ends a game after 108,000 emulator frames (gymnasium's max_num_frames_per_episode); envpool counts agent
# steps, so the same limit is 108,000 / frame skip.
_ALE_MAX_FRAMES = 108_000
_INSTALL_HINT = f"--env_backend=envpool needs an optional package: {install_hint('envpool')}"


def _import_envpool() -> Any:
    try:
        import envpool
    except ImportError:
        raise ValueError(_INSTALL_HINT) from None
    return envpool


def envpool_task(cfg: Config) -> tuple[str, str, dict[str, Any]]:
    """(envpool task id, family "atari" or "mujoco", keyword arguments for envpool.make) for `cfg.env`."""
    name = env_name(cfg)
    ale_id = atari_env_id(name)
    if ale_id is not None:
        task = ale_id[len("ALE/") :]
        if not task.endswith("-v5"):
            raise ValueError(f"env {name!r}: --env_backend=envpool supports only the v5 Atari envs (ALE/<Game>-v5)")
        frameskip = int(cfg.env_frameskip)
        # Training only, as the gymnasium pipeline: evaluation plays whole games.
        episodic_life = episodic_life_enabled(cfg)
        kwargs: dict[str, Any] = dict(
            img_height=84,
            img_width=84,
            gray_scale=True,
            use_inter_area_resize=True,  # cv2.INTER_AREA, as gymnasium's AtariPreprocessing
            stack_num=int(cfg.env_framestack),
            frame_skip=frameskip,
            noop_max=30,
            repeat_action_probability=float(cfg.env_sticky_actions),
            use_fire_reset=True,  # envpool applies it only to games that have FIRE, like our FireReset
            episodic_life=episodic_life,
            reward_clip=False,  # the learner clips (atari preset); episode returns stay unclipped
            full_action_space=False,
            max_episode_steps=_ALE_MAX_FRAMES // frameskip,
        )
        family = "atari"
    else:
        gym_id = gym_env_name(cfg)
        if gym_id not in MUJOCO_NAMES.values():
            raise ValueError(
                f"env {name!r} is not supported by --env_backend=envpool (atari_<game>, ALE/<Game>-v5 and "
                f"mujoco_<name> are); use --env_backend=gymnasium"
            )
        task, kwargs, family = gym_id, {}, "mujoco"  # envpool has the same v5 ids, spaces and time limits
        if cfg.max_episode_steps:
            kwargs["max_episode_steps"] = cfg.max_episode_steps
    envpool = _import_envpool()
    if task not in envpool.list_all_envs():
        raise ValueError(f"env {name!r}: envpool {envpool.__version__} has no task {task!r}")
    return task, family, kwargs


def envpool_spaces(cfg: Config) -> tuple[gym.Space, gym.Space]:
    """Observation and action space of one env (not batched), equal to those of the gymnasium pipeline."""
    task, family, kwargs = envpool_task(cfg)
    spec = _import_envpool().make_spec(task, **kwargs)
    return spec.gymnasium_observation_space, _action_space(spec.gymnasium_action_space, family)


def _action_space(space: gym.Space, family: str) -> gym.spaces.Discrete | gym.spaces.Box:
    if family == "mujoco":
        assert isinstance(space, gym.spaces.Box)
        # envpool declares float64 actions, gymnasium's MuJoCo envs float32 (what the buffers and the model use).
        return gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
    assert isinstance(space, gym.spaces.Discrete)  # Atari
    return space


def make_envpool_group(
    cfg: Config, num_envs: int, base_seed: int | None, env_ids: list[int], **overrides: Any
) -> EnvPoolGroup:
    """One EnvPool batch of `num_envs` envs for the split whose global env indices are `env_ids`. Env i is seeded
    with base_seed + env_ids[i], as in the gymnasium pipeline (random seeds when base_seed is None). `overrides`
    go to envpool.make (tests use them for short time limits)."""
    if len(env_ids) != num_envs:
        raise ValueError(f"{len(env_ids)} env ids for {num_envs} envs")
    task, family, kwargs = envpool_task(cfg)
    envpool = _import_envpool()
    if base_seed is None:
        seeds = np.random.default_rng().integers(0, 2**31 - 1, num_envs)
    else:
        seeds = (base_seed + np.asarray(env_ids, dtype=np.int64)) % (2**31 - 1)  # envpool seeds are C++ ints
    kwargs.update(overrides)
    env = envpool.make(
        task,
        env_type="gymnasium",
        num_envs=num_envs,
        batch_size=num_envs,  # sync mode: every call returns exactly the envs it was given
        num_threads=1,  # an actor worker uses one core; its splits are stepped one at a time
        seed=int(seeds[0]),
        env_seed=[int(s) for s in seeds],
        **kwargs,
    )
    rng_seed = None if base_seed is None else base_seed + env_ids[0]
    return EnvPoolGroup(env, family, bool(kwargs.get("episodic_life", False)), env_ids, rng_seed)


def info_row(info: dict, j: int) -> dict:
    """Row j of EnvPool's batched info (arrays [rows, ...], nested dicts of them, e.g. info["players"])."""
    return {k: info_row(v, j) if isinstance(v, dict) else v[j] for k, v in info.items()}


class EnvPoolGroup(BatchedEnvGroup):
    """One EnvPool batch with the semantics of `EnvGroup`: after `step`, `obs[OBS_KEY][i]` is what env i acts on
    next (the first observation of a new episode where dones[i]); `final_obs` holds the last observation of
    episodes that ended by truncation. Episode statistics are per whole game: with episodic life a lost life ends
    the training episode (dones) but not the game."""

    source = "envpool"

    def __init__(
        self, env: Any, family: str, episodic_life: bool, env_ids: list[int] | None = None, seed: int | None = None
    ):
        self.env = env
        n = int(env.config["num_envs"])
        self._init_arrays(n, env.observation_space.shape, env.observation_space.dtype, env_ids, seed)
        self.atari = family == "atari"
        self.episodic_life = episodic_life and self.atari
        self.action_space = _action_space(env.action_space, family)
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        # Placeholder actions of the resetting call (envpool ignores them).
        self._idle_actions = np.zeros(
            (n, *(self.action_space.shape or ())), dtype=np.int32 if self.discrete else np.float64
        )

    def __getstate__(self) -> dict:
        raise TypeError("an EnvPool group cannot be pickled (serial-mode snapshots need --env_backend=gymnasium)")

    # --- the group's API --------------------------------------------------------------------------------------

    def reset(self, between: Callable[[], None] | None = None) -> None:
        """Start a new episode (a new game) in every env."""
        obs, info = self.env.reset()
        rows = info["env_id"]
        self._put_obs(rows, obs, "reset")
        self._clear_step(episodes=True)

    def random_steps(self, counts: list[int], between: Callable[[], None] | None = None) -> None:
        """Env i takes counts[i] random actions (decorrelates episodes). Neither the episodes (games) that end on
        the way nor the ones left running are reported (random steps are not the policy's)."""
        steps = np.asarray(counts, dtype=np.int64)
        for k in range(int(steps.max(initial=0))):
            ids = np.flatnonzero(steps > k).astype(np.int32)
            self._step_ids(self._random_actions(len(ids)), ids)
        self._clear_step()
        self.unreported[steps > 0] = True

    def step(self, actions: np.ndarray) -> list[tuple[float, int]]:
        """Step every env with actions [n, *act_shape]; return (return, length) of the episodes (whole games) that
        ended at this step."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            actions = np.asarray(actions)
            if actions.size and (actions.min() < 0 or actions.max() >= space.n):
                bad = int(np.flatnonzero((actions < 0) | (actions >= space.n))[0])
                raise EnvError(f"env {self.env_ids[bad]}: action {actions[bad]} outside {self.action_space}")
        return self._step_ids(actions, None)

    def close(self) -> None:
        self.env.close()

    # --- internals ----------------------------------------------------------------------------------------------

    def _step_ids(self, actions: np.ndarray, ids: np.ndarray | None) -> list[tuple[float, int]]:
        """Step the envs `ids` (all when None), then reset those whose episode ended."""
        obs, rew, term, trunc, info = self.env.step(actions, ids)
        rows = info["env_id"]  # which env each returned row belongs to
        term, trunc = np.asarray(term, dtype=bool), np.asarray(trunc, dtype=bool)
        if self.atari:
            # envpool reports truncation when the game ends on the time limit's last step: the game over wins.
            game_over = info["terminated"].astype(bool)
            term, trunc = term | game_over, trunc & ~game_over
        # A termination on the time limit's last step (a fall, a game over) is reported as both: it wins, so the
        # learner does not bootstrap a value past the end of the episode.
        time_limit, trunc = trunc, trunc & ~term  # the game ends at the time limit either way
        done = term | trunc
        if not np.isfinite(rew).all():
            bad = int(rows[np.argmin(np.isfinite(rew))])
            raise EnvError(f"env {self.env_ids[bad]}: step returned a NaN or inf reward")
        self.rewards[rows] = rew
        self.dones[rows] = done
        self.truncated[rows] = trunc
        self.episode_return[rows] += rew
        self.episode_len[rows] += 1
        self._put_obs(rows, obs, "step")
        if trunc.any():
            self.final_obs[OBS_KEY][rows[trunc]] = obs[trunc]
        finished: list[tuple[float, int]] = []
        self.finished_columns, self.finished_infos = [], []
        if done.any():
            ended = rows[done]
            # A lost life (episodic life) ends the episode, not the game: statistics go on until the game ends.
            game_end = ended[game_over[done] | time_limit[done]] if self.episodic_life else ended
            position = {int(r): j for j, r in enumerate(rows)}  # env -> its row of this step's batched info
            for i in game_end[~self.unreported[game_end]]:
                finished.append((float(self.episode_return[i]), int(self.episode_len[i])))
                self.finished_columns.append(i)
                self.finished_infos.append(info_row(info, position[int(i)]))
            self.unreported[game_end] = False
            self.episode_return[game_end] = 0.0
            self.episode_len[game_end] = 0
            # Same-step autoreset: envpool's resetting call, made now for the finished envs only.
            obs, _, _, _, info = self.env.step(self._idle_actions[: len(ended)], ended.astype(np.int32))
            self._put_obs(info["env_id"], obs, "reset")
        return finished

    def _random_actions(self, k: int) -> np.ndarray:
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return self.rng.integers(0, space.n, size=k).astype(np.int32)
        return self.rng.uniform(space.low, space.high, size=(k, *space.shape))
