"""Atari through ale-py (the [atari] extra) and gymnasium's own wrappers: no-op reset, fire reset, frame skip 4 with
max-pooling, 84x84 grayscale, frame stack 4, sticky actions. Frames stay uint8 until the model scales them.

Names: `atari_<game>` (atari_pong, atari_breakout, atari_space_invaders, ...) or any `ALE/<Game>-v5` id.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym


def atari_env_id(name: str) -> str | None:
    """The ALE id for an atari_* or ALE/* name, None for other envs."""
    if name.startswith("ALE/"):
        return name
    if name.startswith("atari_"):
        game = "".join(part.capitalize() for part in name[len("atari_") :].split("_"))
        return f"ALE/{game}-v5"
    return None


class FireReset(gym.Wrapper):
    """Games that wait for FIRE after a reset (Breakout, ...) would otherwise idle until the agent finds it."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        return obs, info


def make_atari_env(cfg: Any, ale_id: str, render_mode: str | None = None) -> gym.Env:
    try:
        import ale_py
    except ImportError:
        raise ValueError(f"env {ale_id!r} needs an optional package: pip install -e .[atari]") from None
    gym.register_envs(ale_py)
    # Frame skipping (with max-pooling of the last two frames) is done by AtariPreprocessing, so the ALE env
    # itself must not skip.
    env = gym.make(
        ale_id,
        frameskip=1,
        repeat_action_probability=cfg.env_sticky_actions,
        full_action_space=False,
        render_mode=render_mode,
    )
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=30, frame_skip=cfg.env_frameskip, screen_size=84, grayscale_obs=True, scale_obs=False
    )
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    return gym.wrappers.FrameStackObservation(env, cfg.env_framestack)
