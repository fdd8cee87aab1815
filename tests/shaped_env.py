"""A CartPole whose reward is scaled by a tunable reward-shaping coefficient, exposed the way PBT expects
(`get_default_reward_shaping` / `set_reward_shaping`). Registered as `ShapedCartPole-v0` on import."""

from __future__ import annotations

import gymnasium as gym


class ShapedCartPole(gym.Wrapper):
    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))
        self.coefficients = self.get_default_reward_shaping()

    def get_default_reward_shaping(self) -> dict[str, float]:
        return {"alive_bonus": 1.0}

    def set_reward_shaping(self, coefficients: dict[str, float], agent_idx: int) -> None:
        self.coefficients = dict(coefficients)

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        return obs, reward * self.coefficients["alive_bonus"], term, trunc, info


gym.register("ShapedCartPole-v0", entry_point=ShapedCartPole)
