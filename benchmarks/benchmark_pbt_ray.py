"""PBT across nodes vs in-process PBT: `python -m benchmarks.benchmark_pbt_ray [--budget_env_steps=N]
[--period=N] [--seeds=0,1] [--ray_address=HOST:PORT] [--output_dir=DIR]`.

For each seed it trains the same CartPole-v1 population of 4 policies twice, with the same flags, budget (env steps
per policy) and seed:

    python train.py --env=CartPole-v1 --num_workers=2 --num_envs_per_worker=16 --num_policies=4 --with_pbt=True
        --pbt_period_env_steps=P --pbt_start_mutation=P --train_for_env_steps=N --seed=S
    ... the same + --pbt_backend=ray --pbt_cpus_per_member=1 [--ray_address=...]

once in one process (in-process PBT), once as 4 member runs placed by Ray (a local Ray when no address is given).
Then it prints each policy's final mean episode reward (the last row of the in-process run's progress.csv; each
member's last progress.csv row, as population.json reports it), the population's best and mean, the PBT decisions
and the wall time, and writes them to <output_dir>/results.json. Both use one --stats_avg window (100 episodes)
for the final reward; a member's window covers its last segment, which on CartPole holds >= 100 episodes once the
policy is poor enough to need them, and fewer only for policies near the 500 cap.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.benchmark import REPO
from benchmarks.benchmark_pbt import pbt_events, read_progress_csv

POLICIES = 4


def common_flags(args: argparse.Namespace, seed: int, experiment: str) -> list[str]:
    return [
        "--env=CartPole-v1",
        "--num_workers=2",
        f"--num_envs_per_worker={args.num_envs_per_worker}",
        f"--num_policies={POLICIES}",
        "--with_pbt=True",
        f"--pbt_period_env_steps={args.period}",
        f"--pbt_start_mutation={args.period}",
        f"--train_for_env_steps={args.budget_env_steps}",
        f"--seed={seed}",
        f"--train_dir={args.output_dir}",
        f"--experiment={experiment}",
        "--restart_behavior=overwrite",
        "--report_interval_sec=5",
    ]


def run(cmd: list[str], log_path: Path, timeout: float) -> tuple[int, float]:
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        try:
            rc = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = -1
    return rc, time.monotonic() - t0


def decisions(events: dict[int, list[dict[str, Any]]]) -> dict[str, int]:
    kinds = [e["kind"] for h in events.values() for e in h]
    return {"mutations": kinds.count("mutation"), "replacements": kinds.count("replacement")}


def in_process(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    name = f"inproc_s{seed}"
    rc, wall = run([sys.executable, "train.py", *common_flags(args, seed, name)], args.output_dir / f"{name}.log", 900)
    exp = args.output_dir / name
    rows = read_progress_csv(exp / "progress.csv") if (exp / "progress.csv").exists() else []
    rewards = [rows[-1].get(f"reward_p{p}", math.nan) for p in range(POLICIES)] if rows else [math.nan] * POLICIES
    return {
        "backend": "in_process",
        "seed": seed,
        "rc": rc,
        "wall_s": wall,
        "rewards": rewards,
        **decisions(pbt_events(exp, POLICIES)),
    }


def on_ray(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    name = f"ray_s{seed}"
    cmd = [sys.executable, "train.py", *common_flags(args, seed, name), "--pbt_backend=ray", "--pbt_cpus_per_member=1"]
    if args.ray_address:
        cmd.append(f"--ray_address={args.ray_address}")
    rc, wall = run(cmd, args.output_dir / f"{name}.log", 1500)
    exp = args.output_dir / name
    try:
        members = json.loads((exp / "population.json").read_text())["members"]
    except (OSError, ValueError, KeyError):
        members = []
    rewards = [m["objective"] if m["objective"] is not None else math.nan for m in members] or [math.nan] * POLICIES
    restarts = sum(m["restarts"] for m in members)
    return {
        "backend": "ray",
        "seed": seed,
        "rc": rc,
        "wall_s": wall,
        "rewards": rewards,
        "restarts": restarts,
        **decisions(pbt_events(exp, POLICIES)),
    }


def describe(r: dict[str, Any]) -> str:
    finite = [x for x in r["rewards"] if math.isfinite(x)]
    best = max(finite) if finite else math.nan
    mean = statistics.fmean(finite) if finite else math.nan
    per = " ".join(f"{x:6.1f}" for x in r["rewards"])
    return (
        f"{r['backend']:<10} seed {r['seed']}: exit {r['rc']}, {r['wall_s']:6.1f} s | final rewards [{per}] "
        f"best {best:6.1f} mean {mean:6.1f} | {r['mutations']} mutations, {r['replacements']} replacements"
        + (f", {r['restarts']} restarts" if "restarts" in r else "")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget_env_steps", type=int, default=100_000, help="env steps per policy")
    p.add_argument("--period", type=int, default=25_000, help="--pbt_period_env_steps (and --pbt_start_mutation)")
    p.add_argument("--seeds", default="0")
    p.add_argument(
        "--num_envs_per_worker",
        type=int,
        default=16,
        help="few enough that a member's segment finishes many 500-step episodes (its reward window is per segment)",
    )
    p.add_argument("--ray_address", default=None, help="a Ray cluster for the ray backend (default: a local one)")
    p.add_argument("--output_dir", type=Path, default=Path("/tmp/sf_benchmark_pbt_ray"))
    args = p.parse_args(argv)
    args.output_dir = args.output_dir.resolve()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for fn in (in_process, on_ray):
            r = fn(args, seed)
            print(describe(r), flush=True)
            results.append(r)
    (args.output_dir / "results.json").write_text(json.dumps({"args": vars(args), "results": results}, default=str))
    print(f"results: {args.output_dir / 'results.json'}")
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
