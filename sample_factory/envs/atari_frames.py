"""The Atari observation pipeline on the actor's hot path: frame skipping with max-pooling, no-op starts, 84x84
grayscale screens, and a stack of the last frames. The same observations, rewards and episode ends as gymnasium's
AtariPreprocessing + FrameStackObservation (tests/envs/test_atari_frames.py steps both side by side), for less work
per env step:

- `AleFrameSkip` calls the emulator (`ale.act`) for the skipped frames. AtariPreprocessing goes through the
  gymnasium env's `step` for each of them, and that step reads a full screen and an info dict per emulator frame
  which AtariPreprocessing drops: 4 screens and 4 dicts per env step, about a tenth of an actor's time in Pong.
- `FrameStack` shifts one array instead of concatenating a deque and deep-copying the result.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np


def ale_env(env: gym.Env) -> Any:
    """The ALE env under the wrappers (ale_py's AtariEnv, untyped: its `ale` emulator, `get_action_meanings`)."""
    return env.unwrapped


class AleFrameSkip(gym.Wrapper):
    """An ALE env made with frameskip=1 (grayscale observations make its resets cheaper) -> uint8 [size, size]
    observations, each the max of the last two of `frame_skip` emulator frames, resized with area interpolation;
    rewards summed over the skipped frames; `noop_max` >= 1: 1..noop_max NOOP frames after each reset (drawn with
    the env's generator)."""

    def __init__(self, env: gym.Env, frame_skip: int = 4, noop_max: int = 30, size: int = 84):
        super().__init__(env)
        if env.spec is not None and env.spec.kwargs.get("frameskip", 1) != 1:
            raise ValueError("AleFrameSkip skips frames itself: make the ALE env with frameskip=1")
        self._bind_emulator()
        self.frame_skip, self.noop_max, self.size = frame_skip, noop_max, (size, size)
        h, w = self.ale.getScreenDims()
        self.screens = np.empty((2, h, w), dtype=np.uint8)  # [0]: the last frame, [1]: the one before
        self.observation_space = gym.spaces.Box(0, 255, (size, size), np.uint8)

    def _bind_emulator(self) -> None:
        self.ale = ale_env(self.env).ale
        # the env's action index -> ALE action: the game's minimal set, or all 18 (full_action_space=True)
        minimal = self.ale.getMinimalActionSet()
        assert isinstance(self.env.action_space, gym.spaces.Discrete)
        self.actions = minimal if len(minimal) == self.env.action_space.n else self.ale.getLegalActionSet()

    def __getstate__(self) -> dict[str, Any]:
        # Serial-mode snapshots pickle the envs. The ALE env pickles as its constructor arguments (a new game), so the
        # emulator's state (with its sticky-action RNG) and the env's generator (no-op counts) travel here.
        state = {k: v for k, v in self.__dict__.items() if k not in ("ale", "actions")}
        state["emulator"] = self.ale.cloneState(include_rng=True)
        state["np_random"] = self.env.unwrapped.np_random
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        emulator, np_random = state.pop("emulator"), state.pop("np_random")
        self.__dict__.update(state)
        self._bind_emulator()
        self.ale.restoreState(emulator)
        self.env.unwrapped.np_random = np_random

    def _observation(self) -> np.ndarray:
        if self.frame_skip > 1:
            np.maximum(self.screens[0], self.screens[1], out=self.screens[0])
        import cv2  # the [atari] extra's, imported where it is used (as AtariPreprocessing does); an attribute
        # holding the module would make the env unpicklable

        return cv2.resize(self.screens[0], self.size, interpolation=cv2.INTER_AREA)

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        ale, a, skip = self.ale, self.actions[action], self.frame_skip
        reward = 0.0
        terminated = truncated = False
        for t in range(skip):
            reward += ale.act(a)
            terminated = ale.game_over(with_truncation=False)
            truncated = ale.game_truncated()
            if terminated or truncated:
                break
            if t == skip - 2:
                ale.getScreenGrayscale(self.screens[1])
            elif t == skip - 1:
                ale.getScreenGrayscale(self.screens[0])
        info = {
            "lives": ale.lives(),
            "episode_frame_number": ale.getEpisodeFrameNumber(),
            "frame_number": ale.getFrameNumber(),
        }
        return self._observation(), reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        _, info = self.env.reset(seed=seed, options=options)
        noops = int(self.env.unwrapped.np_random.integers(1, self.noop_max + 1)) if self.noop_max > 0 else 0
        for _ in range(noops):
            _, _, terminated, truncated, step_info = self.env.step(0)
            info.update(step_info)
            if terminated or truncated:
                _, info = self.env.reset(seed=seed, options=options)
        self.ale.getScreenGrayscale(self.screens[0])
        self.screens[1].fill(0)
        return self._observation(), info


class FrameStack(gym.Wrapper):
    """[*shape] observations -> [k, *shape], oldest first; after a reset every position holds the reset frame."""

    def __init__(self, env: gym.Env, k: int):
        super().__init__(env)
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box), "FrameStack stacks Box observations"
        self.frames = np.zeros((k, *space.shape), dtype=space.dtype)
        self.observation_space = gym.spaces.Box(
            np.stack([space.low] * k), np.stack([space.high] * k), None, space.dtype
        )

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.frames[:-1] = self.frames[1:]
        self.frames[-1] = obs
        return self.frames.copy(), reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self.frames[:] = obs
        return self.frames.copy(), info
