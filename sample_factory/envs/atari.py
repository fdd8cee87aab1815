"""Atari through ale-py (the [atari] extra): no-op reset, frame skip 4 with max-pooling, 84x84 grayscale, frame stack
4, sticky actions (atari_frames.py: gymnasium's AtariPreprocessing and FrameStackObservation, the same frames for less
work); plus episodic-life and fire-reset wrappers.
Frames stay uint8 until the model scales them.

Names: `atari_<game>` (atari_pong, atari_breakout, atari_space_invaders, ...), any `ALE/<Game>-v5` id, or CleanRL's
and SB3's `<Game>NoFrameskip-v4` (v4's protocol: no sticky actions, which the atari preset sets for every name; the
same ALE game, so it is made as ALE/<Game>-v5 with --env_sticky_actions). Training as CleanRL's PPO does: a lost life
ends the training episode (EpisodicLife), episode returns are reported per whole game, evaluation plays whole games.

Wrapper order: ALE -> AleFrameSkip -> EpisodicLife (training only) -> FireReset -> FrameStack.
FireReset sits above EpisodicLife so that FIRE is pressed after every lost life, not only after a new game.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym

from sample_factory.config import Config
from sample_factory.config.env_defaults import ATARI_V4_ID
from sample_factory.config.extras import install_hint
from sample_factory.envs.atari_frames import AleFrameSkip, FrameStack, ale_env

NOOP = 0  # ALE's minimal action sets start with NOOP (AtariPreprocessing checks it)


def register_ale_envs() -> bool:
    """Register ale_py's ALE/* ids with gymnasium; False when ale_py is not installed."""
    try:
        import ale_py
    except ImportError:
        return False
    # ALE prints its banner (version, "Powered by Stella") from every process that creates an env: the main
    # process's probe and each actor worker. Warnings and errors still show.
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    gym.register_envs(ale_py)
    return True


def atari_env_id(name: str) -> str | None:
    """The ALE id for an atari_*, ALE/* or *NoFrameskip-v4 name, None for other envs."""
    if name.startswith("ALE/"):
        return name
    if v4 := ATARI_V4_ID.match(name):
        return f"ALE/{v4.group(1)}-v5"
    if name.startswith("atari_"):
        game = "".join(part.capitalize() for part in name[len("atari_") :].split("_"))
        # Sample Factory's names run the words together (atari_beamrider, atari_spaceinvaders): match ALE's
        # registered ids without case where ale_py has registered them, so both spellings work.
        wanted = game.lower()
        register_ale_envs()  # without ale_py nothing matches: the id below, and make_atari_env says what is missing
        for env_id in gym.registry:
            if env_id.startswith("ALE/") and env_id.endswith("-v5") and env_id[4:-3].lower() == wanted:
                return env_id
        return f"ALE/{game}-v5"
    return None


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for the learner while the game goes on.

    On such a step `terminated` is True and `info["game_over"]` is False; the env group then keeps accumulating the
    episode statistics until the real end of the game (where `info["game_over"]` is True). The next `reset()` does
    not restart the game: it makes one NOOP step and returns that frame (a reset with a seed or options, or after
    the real game over, is a real reset). gymnasium's `terminal_on_life_loss` is not used because its next reset
    restarts the whole game, so the agent would never see the later lives.

    Rewards of the NOOP steps made inside `reset()` are added to the next step's reward, so the per-game return
    stays exact.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True  # the first reset starts a game
        self.pending_reward = 0.0

    def _lives(self) -> int:
        return int(ale_env(self.env).ale.lives())

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        reward = float(reward) + self.pending_reward
        self.pending_reward = 0.0
        lives = self._lives()
        self.game_over = bool(terminated or truncated)
        if self.game_over:
            info["game_over"] = True
        elif 0 < lives < self.lives:
            # The last life (lives 0) is not a life loss: the game's own terminal flag ends it.
            terminated = True
            info["game_over"] = False
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None or options:
            obs, info = self.env.reset(seed=seed, options=options)
            self.pending_reward = 0.0
        else:
            obs, reward, terminated, truncated, info = self.env.step(NOOP)
            if terminated or truncated:  # the game ended during the NOOP: its reward belongs to the old game
                obs, info = self.env.reset()
                self.pending_reward = 0.0
            else:
                self.pending_reward += float(reward)
        self.game_over = False
        self.lives = self._lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Games that wait for FIRE after a reset (Breakout, ...) would otherwise idle until the agent finds it. Above
    EpisodicLife, this also launches the game again after every lost life. The FIRE step's reward is added to the
    next step's reward."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.fire = ale_env(env).get_action_meanings().index("FIRE")
        self.pending_reward = 0.0

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        reward = float(reward) + self.pending_reward
        self.pending_reward = 0.0
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self.pending_reward = 0.0
        obs, info = self.env.reset(**kwargs)
        obs, reward, terminated, truncated, info = self.env.step(self.fire)
        if terminated or truncated:
            obs, info = self.env.reset()
        else:
            self.pending_reward = float(reward)
        return obs, info


def episodic_life_enabled(cfg: Config) -> bool:
    """Training only: evaluation (enjoy, periodic evaluation) always plays whole games."""
    return cfg.env_episodic_life and not cfg.evaluation_run


def make_atari_env(cfg: Config, ale_id: str, render_mode: str | None = None) -> gym.Env:
    """The ALE env `ale_id` with the wrappers above; observations are uint8 [framestack, 84, 84]."""
    if not register_ale_envs():
        raise ValueError(f"env {ale_id!r} needs an optional package: {install_hint('atari')}")
    # Frame skipping (with max-pooling of the last two frames) is done by AleFrameSkip, so the ALE env itself must
    # not skip. AleFrameSkip reads the screens it keeps from the emulator; the env's own observation is read only at
    # resets, where grayscale is cheaper than RGB (rendering still reads RGB).
    env = gym.make(
        ale_id,
        frameskip=1,
        repeat_action_probability=cfg.env_sticky_actions,
        full_action_space=False,
        render_mode=render_mode,
        obs_type="grayscale",
    )
    env = AleFrameSkip(env, frame_skip=cfg.env_frameskip, noop_max=30, size=84)
    if episodic_life_enabled(cfg):
        env = EpisodicLife(env)
    if "FIRE" in ale_env(env).get_action_meanings():
        env = FireReset(env)
    return FrameStack(env, cfg.env_framestack)
