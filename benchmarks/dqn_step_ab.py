"""Before/after of the DQN learner step: `python -m benchmarks.dqn_step_ab --old=<commit> [--env=MinAtar/Breakout-v1]
[--iterations=6] [--full] [--train_flags="..."]`.

Takes algo/replay.py and algo/dqn.py as they were at --old (`git show`; every other module is the working tree's)
beside the working tree's own, builds one algorithm from each with the same seeds (the env's preset model, as
benchmarks/learner_loop.py builds it), trains both on the same batches, their iterations alternated, and prints
each one's CPU time per SGD step (the process's: another job on a shared machine hardly moves it), the ratio,
`ReplayBuffer.sample` alone, and whether the two models' weights, the iterations' statistics and the replay
priorities are bit-identical at the end: a change meant to keep the step's math must print True. The buffer holds 8
iterations' transitions, or with --full the preset's whole --replay_buffer_capacity, filled first. The last line
printed is one JSON object."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import torch

from benchmarks import learner_loop
from sample_factory.algo import dqn as dqn_now
from sample_factory.config import parse_cfg
from sample_factory.model.actor_critic import ActorCritic

ROOT = Path(__file__).resolve().parent.parent


def module_at(commit: str, path: str, name: str, replace: tuple[tuple[str, str], ...] = ()) -> types.ModuleType:
    """The module at `path` as it was at `commit`, imported as `name` (its imports, after `replace`, resolve to the
    working tree's modules)."""
    source = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for a, b in replace:
        source = source.replace(a, b)
    module = types.ModuleType(name)
    module.__file__ = f"{commit}:{path}"
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def old_dqn(commit: str) -> types.ModuleType:
    """algo/dqn.py at `commit`, with algo/replay.py of the same commit."""
    module_at(commit, "sample_factory/algo/replay.py", "_old_replay")
    replay_import = ("from sample_factory.algo.replay import", "from _old_replay import")
    return module_at(commit, "sample_factory/algo/dqn.py", "_old_dqn", (replay_import,))


def build(module: types.ModuleType, env: str, full: bool, flags: list[str]):
    """(cfg, algorithm, two batches) for the env's preset, the buffer filled to --learning_starts (or to capacity)."""
    cfg = parse_cfg([f"--env={env}", "--algo=DQN", "--seed=1", "--device=cpu", *flags])
    obs_space, action_space = learner_loop.spaces_for(env)
    torch.manual_seed(0)
    algo = module.DQNAlgorithm(cfg, ActorCritic(cfg, obs_space, action_space).train(), torch.device("cpu"))
    rows = cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout
    cfg.learning_starts = min(cfg.learning_starts, rows * cfg.rollout)
    if not full:
        cfg.replay_buffer_capacity = min(cfg.replay_buffer_capacity, 8 * rows * cfg.rollout)
    batches = [learner_loop.make_batch(cfg, obs_space, action_space, rows, seed) for seed in range(2)]
    if full:
        for i in range(-(-cfg.replay_buffer_capacity // (rows * cfg.rollout))):
            algo.add_rollouts(batches[i % 2], 0)
    return cfg, algo, batches


def compare(old: str, env: str, iterations: int, full: bool = False, flags: list[str] | None = None) -> dict:
    """Trains the --old and the working tree's algorithm side by side; see the module's docstring."""
    sides = {"old": build(old_dqn(old), env, full, flags or []), "new": build(dqn_now, env, full, flags or [])}
    version = dict.fromkeys(sides, 1)
    cpu: dict[str, list[float]] = {k: [] for k in sides}
    stats: dict[str, list[dict]] = {k: [] for k in sides}
    steps = dict.fromkeys(sides, 0)
    for i in range(iterations + 2):  # two warm-up iterations, not timed
        for name in sides if i % 2 == 0 else reversed(list(sides)):
            _, algo, batches = sides[name]
            torch.manual_seed(100 + i)  # torch's RNG (one-time replay's shuffles) alike on both sides
            t0 = time.process_time()
            out, new_version = algo.train(batches[i % 2], version[name], 0)
            if i >= 2:
                cpu[name].append(time.process_time() - t0)
                steps[name] += new_version - version[name]
            version[name] = new_version
            stats[name].append(out)
    a, b = sides["old"][1], sides["new"][1]
    batch = sides["new"][0].batch_size
    sample: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(50):
        for name in sides:
            t0 = time.process_time()
            sides[name][1].replay.sample(batch, 0.4)
            sample[name].append(time.process_time() - t0)
    per_step = {k: sum(cpu[k]) / max(steps[k], 1) * 1e3 for k in sides}
    per_sample = {k: statistics.median(sample[k]) * 1e3 for k in sides}
    return {
        "old": old,
        "env": env,
        "full_buffer": full,
        "replay_size": len(b.replay),
        "minibatch": batch,
        "sgd_steps": steps["new"],
        "cpu_ms_per_sgd_step": {k: round(v, 3) for k, v in per_step.items()},
        "new_over_old": round(per_step["new"] / per_step["old"], 3),
        "sample_cpu_ms": {k: round(v, 4) for k, v in per_sample.items()},
        "sample_new_over_old": round(per_sample["new"] / per_sample["old"], 3),
        "identical_weights": all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters())),
        "identical_stats": stats["old"] == stats["new"],
        "identical_priorities": bool((a.replay.tree.tree == b.replay.tree.tree).all()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", required=True, help="The commit whose algo/replay.py and algo/dqn.py are the baseline.")
    p.add_argument("--env", default="MinAtar/Breakout-v1", help="Whose --algo=DQN preset gives model and batches.")
    p.add_argument("--iterations", type=int, default=6, help="Timed training iterations per side.")
    p.add_argument("--full", action="store_true", help="Fill the preset's whole replay buffer first.")
    p.add_argument("--train_flags", default="", help="train.py flags on top of the preset.")
    p.add_argument("--threads", type=int, default=1, help="torch threads.")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    r = compare(args.old, args.env, args.iterations, args.full, args.train_flags.split())
    ms = r["cpu_ms_per_sgd_step"]
    print(
        f"DQN step, {args.env}, minibatch {r['minibatch']}, replay {r['replay_size']:,}: {ms['old']} ms at "
        f"{args.old}, {ms['new']} ms now ({r['new_over_old']}x, CPU time per SGD step over {r['sgd_steps']}); "
        f"replay.sample {r['sample_new_over_old']}x; bit-identical weights {r['identical_weights']}, statistics "
        f"{r['identical_stats']}, priorities {r['identical_priorities']}"
    )
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
