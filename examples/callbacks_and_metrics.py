"""User hooks and custom episode metrics, without touching the library (docs/callbacks-and-metrics.md).

    python examples/callbacks_and_metrics.py --experiment=hooks --train_dir=./train_dir [any train.py flag]

- The env reports `success` (the pole stayed up for 200 steps) in the info of an episode's last step, and the
  distance the cart travelled in `info["episode_extra_stats"]` (Sample Factory's convention): with
  `--episode_info_keys=success` both are averaged per policy (TensorBoard policy_stats/*, progress.csv columns
  success_p0 and cart_travel_p0, the final summary).
- `ExampleCallbacks` adds a metric from `on_episode_end` (runs in the actor workers), a key to every training result
  (in the learner), appends every checkpoint to <experiment>/checkpoints.log (in the learner) and prints a line at
  the end (in the runner).

The registration runs at import time, so every worker process (which imports this file as its main module) knows
the name `example_hooks` too.
"""

import sys
from pathlib import Path

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from sample_factory.config.presets import PRESETS
from sample_factory.envs.env_utils import register_env
from sample_factory.experiment.callbacks import Callbacks, register_callbacks
from sample_factory.train import main as train_main


class CartPoleWithStats(CartPoleEnv):
    """CartPole-v1 (500 steps at most) that reports how the episode went in its last info."""

    def reset(self, **kwargs):
        self.steps, obs_info = 0, super().reset(**kwargs)
        self.start_x = float(self.state[0])
        return obs_info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        truncated = truncated or self.steps >= 500
        if terminated or truncated:
            info = dict(info)
            info["success"] = self.steps >= 200
            info["episode_extra_stats"] = {"cart_travel": abs(float(self.state[0]) - self.start_x)}
        return obs, reward, terminated, truncated, info


class ExampleCallbacks(Callbacks):
    def on_episode_end(self, episode):
        # actor worker process: cheap, no I/O
        return {"fell_early": float(episode.length < 50)}

    def on_training_result(self, policy_id, result):
        # learner process: numbers added here are logged as train/<key>
        result["lag_spread"] = result.get("policy_lag_max", 0.0) - result.get("policy_lag_min", 0.0)

    def on_checkpoint(self, policy_id, path, kind):
        # learner process: after the file is written; .../<experiment>/checkpoint_p0/<file>
        with open(Path(path).parent.parent / "checkpoints.log", "a") as f:
            f.write(f"policy {policy_id} {kind} {Path(path).name}\n")

    def on_experiment_end(self, cfg, exp_dir, result):
        # runner process, once
        stats = ", ".join(f"{k} {v:.3f}" for k, v in result["episode_stats"][0].items())
        print(f"example hooks: stopped ({result['stop_reason']}), policy 0 episode stats: {stats}", flush=True)


register_env("cartpole_with_stats", lambda cfg, env_config: CartPoleWithStats())
gym.register("CartPoleWithStats-v0", entry_point=CartPoleWithStats)
register_callbacks("example_hooks", ExampleCallbacks)


def _flag(name: str, value) -> str:
    return f"--{name}={','.join(map(str, value)) if isinstance(value, list) else value}"


if __name__ == "__main__":
    defaults = ["--env=cartpole_with_stats", "--callbacks=example_hooks", "--episode_info_keys=success"]
    # a custom env name gets no preset: take CartPole's (flags typed on the command line win)
    defaults += [_flag(k, v) for k, v in PRESETS["classic_control"].items()]
    typed = {a.split("=", 1)[0] for a in sys.argv[1:]}
    sys.exit(train_main([d for d in defaults if d.split("=", 1)[0] not in typed] + sys.argv[1:]))
