"""A CartPole that renders rgb_array frames with numpy alone (gymnasium's classic-control renderer needs pygame,
which is not installed), for the video tests: `--env=tests.render_envs:SFRenderCartPole-v1`.

Its spaces and dynamics are CartPole-v1's, so a policy trained on CartPole-v1 plays it. Frames are 63 x 95: odd
on purpose, enjoy.py pads them to even sizes (64 x 96) for the video encoder.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

ENV_ID = "SFRenderCartPole-v1"
FRAME_SHAPE = (63, 95, 3)


class NumpyRenderCartPole(CartPoleEnv):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def render(self):
        if self.render_mode != "rgb_array" or self.state is None:
            return None
        h, w, _ = FRAME_SHAPE
        frame = np.full(FRAME_SHAPE, 255, dtype=np.uint8)
        x, _, theta, _ = self.state
        cx = int(np.clip((x + self.x_threshold) / (2 * self.x_threshold) * (w - 1), 0, w - 1))
        frame[h - 12 : h - 6, max(cx - 6, 0) : cx + 7] = (40, 40, 40)  # the cart
        for r in np.linspace(0.0, 30.0, 31):  # the pole, from the cart's top
            px, py = int(cx + r * np.sin(theta)), int(h - 12 - r * np.cos(theta))
            if 0 <= px < w and 0 <= py < h:
                frame[py, px] = (200, 120, 60)
        return frame


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=NumpyRenderCartPole, max_episode_steps=500)
