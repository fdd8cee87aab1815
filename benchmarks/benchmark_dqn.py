"""DQN on CartPole-v1, side by side: this project's Ape-X DQN (--algo=DQN, multi-process) against Stable-Baselines3's
single-process DQN with its rl-zoo tuned CartPole hyperparameters, both until the training return reaches 475
(mean of the last 100 episodes) or the time limit. Prints both runs (seconds and env steps to 475, env steps/s) and
the ratio of times to solve as JSON.

    python -m benchmarks.benchmark_dqn [--venv=/tmp/sb3_venv] [--limit_s=600] [--seeds=1,2,3]

SB3 runs in a throwaway venv that this script creates (stable-baselines3 + gymnasium + torch==2.13.0, pinned by
constraints.txt; with --venv=PATH it is kept there and reused by the next run). The training return is what each
library reports while it trains: SB3's last 100 Monitor episodes (at its final epsilon 0.04 after 16% of the
budget), ours the least-exploring third of the agents (epsilon <= 0.006, RLlib's Ape-X convention;
docs/algorithms.md). SB3's training return at epsilon 0.04 may understate its greedy policy, so SB3 also counts as
solved when a greedy evaluation (--sb3_eval_episodes episodes every --sb3_eval_every env steps, rl-zoo's way of
reporting) reaches 475; the evaluation's time is not counted against SB3.
With several --seeds both libraries run once per seed (ours first, then SB3), and the summary gives the median time
to solve over the seeds that solved, how many solved, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import throwaway_venv

REPO_ROOT = Path(__file__).resolve().parents[1]
TARGET = 475.0

# rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4 there; a larger cap here so a slow start can
# still reach the target).
SB3_HYPERPARAMS = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}
SB3_TIMESTEPS = 200_000

# Runs inside the throwaway venv: prints one JSON line.
SB3_SCRIPT = """
import json, sys, time
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.monitor import Monitor

hp, target, timesteps, limit_s, seed, eval_every, eval_episodes = json.loads(sys.argv[1])
torch.set_num_threads(1)

def greedy_return(model, env, episodes):
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, r, term, trunc, _ = env.step(action)
            total += r
            done = term or trunc
    return total / episodes

class Stop(BaseCallback):
    def __init__(self):
        super().__init__()
        self.t0 = time.monotonic()
        self.eval_s = 0.0  # time spent evaluating: not counted against SB3
        self.solved = None
        self.by = None
        self.best_eval = float("-inf")
        self.eval_env = gym.make("CartPole-v1")

    def clock(self):
        return time.monotonic() - self.t0 - self.eval_s

    def _on_step(self):
        buf = self.model.ep_info_buffer
        if len(buf) >= 100 and np.mean([e["r"] for e in buf]) >= target:
            self.solved, self.by = (self.clock(), self.num_timesteps), "training return"
            return False
        if eval_episodes and self.num_timesteps % eval_every == 0:
            t = time.monotonic()
            g = greedy_return(self.model, self.eval_env, eval_episodes)
            self.eval_s += time.monotonic() - t
            self.best_eval = max(self.best_eval, g)
            if g >= target:
                self.solved, self.by = (self.clock(), self.num_timesteps), "greedy evaluation"
                return False
        return self.clock() < limit_s

env = Monitor(gym.make("CartPole-v1"))
model = DQN("MlpPolicy", env, seed=seed, verbose=0, **hp)
cb = Stop()
model.learn(total_timesteps=timesteps, callback=cb)
elapsed = cb.clock()
best = float(np.mean([e["r"] for e in model.ep_info_buffer])) if model.ep_info_buffer else float("nan")
print(json.dumps({"solved_s": cb.solved[0] if cb.solved else None, "solved_steps": cb.solved[1] if cb.solved else None,
                  "solved_by": cb.by, "env_steps": model.num_timesteps, "elapsed_s": elapsed,
                  "steps_per_s": model.num_timesteps / elapsed, "final_reward": best,
                  "best_greedy_eval": cb.best_eval if eval_episodes else None, "eval_s_excluded": cb.eval_s}))
"""


def make_venv(path: Path, constraints: Path) -> Path:
    """A venv at `path` with stable-baselines3, gymnasium and torch (versions from `constraints`); its python."""
    return throwaway_venv.make_venv(path, [["torch==2.13.0", "gymnasium", "stable-baselines3"]], constraints)


def run_sb3(py: Path, limit_s: float, seed: int, eval_every: int = 5000, eval_episodes: int = 10) -> dict:
    args = json.dumps([SB3_HYPERPARAMS, TARGET, SB3_TIMESTEPS, limit_s, seed, eval_every, eval_episodes])
    out = subprocess.run([str(py), "-c", SB3_SCRIPT, args], capture_output=True, text=True, timeout=limit_s + 120)
    if out.returncode != 0:
        raise RuntimeError(f"SB3 run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_ours(train_dir: Path, limit_s: float, num_workers: int, seed: int) -> dict:
    """train.py --algo=DQN until 475 (--stop_at_reward) or the limit; times from progress.csv (time_s: since the
    workers started)."""
    cmd = [
        sys.executable,
        "-m",
        "sample_factory.train",
        "--env=CartPole-v1",
        "--algo=DQN",
        f"--num_workers={num_workers}",
        f"--stop_at_reward={TARGET}",
        f"--train_for_seconds={limit_s}",
        "--train_for_env_steps=10000000",
        "--report_interval_sec=1",
        f"--seed={seed}",
        f"--train_dir={train_dir}",
        "--experiment=dqn_cartpole",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, timeout=limit_s + 120)
    with open(train_dir / "dqn_cartpole" / "progress.csv", newline="") as f:
        rows = [(float(r["time_s"]), int(r["env_steps"]), float(r["reward_p0"])) for r in csv.DictReader(f)]
    solved = next(((t, s) for t, s, r in rows if r >= TARGET), None)
    t_end, s_end, r_end = rows[-1]
    return {
        "solved_s": solved[0] if solved else None,
        "solved_steps": solved[1] if solved else None,
        "env_steps": s_end,
        "elapsed_s": t_end,
        "steps_per_s": s_end / max(t_end, 1e-9),
        "final_reward": r_end,
    }


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(runs: dict[int, dict]) -> dict:
    """Per library: seeds solved, median seconds / env steps to solve over those, median env steps/s; and the ratio
    of SB3's median time to solve to ours (None unless both solved at least once)."""
    out: dict = {}
    for lib in ("sample_factory_dqn", "sb3_dqn"):
        rs = [r[lib] for r in runs.values() if lib in r]
        if not rs:
            continue
        solved = [r for r in rs if r["solved_s"] is not None]
        out[lib] = {
            "solved": f"{len(solved)}/{len(rs)}",
            "median_solved_s": median_or_none([r["solved_s"] for r in solved]),
            "median_solved_steps": median_or_none([r["solved_steps"] for r in solved]),
            "median_steps_per_s": median_or_none([r["steps_per_s"] for r in rs]),
        }
    if "sb3_dqn" in out:
        ours, sb3 = out["sample_factory_dqn"]["median_solved_s"], out["sb3_dqn"]["median_solved_s"]
        out["speedup_to_solve"] = sb3 / ours if ours and sb3 else None
        out["steps_per_s_ratio"] = (
            out["sample_factory_dqn"]["median_steps_per_s"] / out["sb3_dqn"]["median_steps_per_s"]
        )
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--venv", type=Path, default=None, help="create (or reuse) the SB3 venv here and keep it (default: a temp dir)"
    )
    p.add_argument("--constraints", type=Path, default=REPO_ROOT / "constraints.txt")
    p.add_argument("--limit_s", type=float, default=600.0, help="wall-clock limit per run")
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--seeds", default="1", help="comma-separated seeds; each runs both libraries")
    p.add_argument("--sb3_eval_every", type=int, default=5000, help="SB3's greedy evaluation period (env steps)")
    p.add_argument("--sb3_eval_episodes", type=int, default=10, help="0: no greedy evaluation of SB3")
    p.add_argument("--skip_sb3", action="store_true", help="only our run (no venv)")
    args = p.parse_args(argv)
    seeds = [int(x) for x in args.seeds.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="benchmark_dqn_"))
    try:
        result: dict = {"target": TARGET, "machine_cpus": os.cpu_count(), "runs": {}}
        t0 = time.monotonic()
        py = None if args.skip_sb3 else make_venv(args.venv or tmp / "venv", args.constraints)
        for seed in seeds:
            run: dict = {
                "sample_factory_dqn": run_ours(tmp / f"train_dir_{seed}", args.limit_s, args.num_workers, seed)
            }
            if py is not None:
                run["sb3_dqn"] = run_sb3(py, args.limit_s, seed, args.sb3_eval_every, args.sb3_eval_episodes)
            result["runs"][seed] = run
            print(json.dumps({"seed": seed, **run}), flush=True)
        result["summary"] = summarize(result["runs"])
        result["total_s"] = time.monotonic() - t0
        print(json.dumps(result["summary"], indent=1))
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
