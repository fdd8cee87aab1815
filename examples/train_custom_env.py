"""Train on an env and with an encoder defined here, without touching the library.

    python examples/train_custom_env.py --experiment=guess --train_dir=./train_dir [any train.py flag]

The registrations run at import time, so every worker process (which imports this file as its main module)
knows the env and the encoder too.
"""

import sys

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from sample_factory.envs.env_utils import register_env
from sample_factory.model.encoders import register_encoder
from sample_factory.train import main as train_main


class GuessTheSignEnv(gym.Env):
    """Observe a noisy number; action 1 pays +1 when it is positive, action 0 when it is not. 50 steps."""

    observation_space = gym.spaces.Box(-3.0, 3.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, noise: float = 0.1):
        self.noise, self.t, self.x = noise, 0, 0.0

    def _obs(self) -> np.ndarray:
        return (self.x + self.noise * self.np_random.standard_normal(4)).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.x = 0, float(self.np_random.uniform(-1, 1))
        return self._obs(), {}

    def step(self, action):
        reward = 1.0 if (action == 1) == (self.x > 0) else 0.0
        self.t += 1
        self.x = float(self.np_random.uniform(-1, 1))
        return self._obs(), reward, False, self.t >= 50, {}


class TinyEncoder(nn.Module):
    """Features: the observation's mean and a small learned projection."""

    def __init__(self, cfg, obs_space):
        super().__init__()
        self.proj = nn.Linear(obs_space.shape[0], 15)
        self.out_size = 16

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        obs = obs.float()
        return torch.cat([obs.mean(dim=1, keepdim=True), torch.tanh(self.proj(obs))], dim=1)


register_env("guess_the_sign", lambda cfg, env_config: GuessTheSignEnv())
register_encoder("tiny", TinyEncoder)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    defaults = ["--env=guess_the_sign", "--encoder_custom=tiny", "--use_rnn=False", "--num_envs_per_worker=8"]
    # Each step is an independent guess (a contextual bandit), hence gamma 0.
    defaults += ["--learning_rate=3e-3", "--num_epochs=4", "--exploration_loss_coeff=0.0", "--gamma=0.0"]
    return train_main(defaults + argv)  # flags given later win


if __name__ == "__main__":
    sys.exit(main())
