"""Throughput and time-to-solve benchmark: `python -m benchmarks.benchmark [--runs=3]`.

Runs the command a user would type, `python train.py --env=CartPole-v1 --num_workers=2` (plus a step budget
and a finer progress interval, which change no training setting), several times in one go, and prints:
- wall time from launching the command to the first progress line with mean reward >= the target,
- training FPS (overall, and the 10 s window at the end),
- the raw speed of the same env stepped by one process with random actions, measured in the same run,
so that ratios are comparable on a noisy machine.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym

REPO = Path(__file__).resolve().parents[1]  # the repository root
_REWARD = re.compile(r"p0 reward ([-\d.naninf]+)")
_DONE = re.compile(r"done: (\d+) env (?:steps|frames) in ([\d.]+) s, (\d+) FPS overall")
_FPS10 = re.compile(r"FPS 10s/60s/300s: ([\d.]+)/")


def raw_env_speed(env_id: str, seconds: float = 3.0) -> float:
    env = gym.make(env_id)
    env.reset(seed=0)
    env.action_space.seed(0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                env.reset()
        steps += 1000
    return steps / (time.perf_counter() - t0)


def train_once(env_id: str, workers: int, steps: int, target: float, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as td:
        cmd = [sys.executable, str(REPO / "train.py"), f"--env={env_id}", f"--num_workers={workers}"]
        cmd += [f"--train_dir={td}", "--experiment=bench", f"--train_for_env_steps={steps}"]
        cmd += ["--report_interval_sec=0.5", *extra]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
        solved_at, result, last_fps10 = None, {}, 0.0
        for line in proc.stdout:
            if (m := _REWARD.search(line)) and solved_at is None and float(m.group(1)) >= target:
                solved_at = time.monotonic() - t0
            if m := _FPS10.search(line):
                last_fps10 = float(m.group(1))
            if m := _DONE.search(line):
                result = {"env_steps": int(m.group(1)), "train_s": float(m.group(2)), "fps": int(m.group(3))}
        rc = proc.wait()
        wall = time.monotonic() - t0
    return {"rc": rc, "solved_s": solved_at, "wall_s": wall, "fps10_end": last_fps10, **result}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1", help="Env to train on.")
    p.add_argument("--num_workers", type=int, default=2, help="Actor workers (the user's command line).")
    p.add_argument("--runs", type=int, default=3, help="Repeats; medians are reported.")
    p.add_argument("--train_for_env_steps", type=int, default=1_000_000, help="Budget of each run.")
    p.add_argument("--target_reward", type=float, default=475.0, help="Mean episode reward counted as solved.")
    p.add_argument("--target_fps", type=float, default=20_000.0, help="FPS target to compare against.")
    p.add_argument("--target_seconds", type=float, default=20.0, help="Time-to-solve target to compare against.")
    args, extra = p.parse_known_args(argv)

    raw = raw_env_speed(args.env)
    print(f"raw {args.env} speed, 1 process, random actions: {raw:,.0f} steps/s")
    runs = []
    for i in range(args.runs):
        r = train_once(args.env, args.num_workers, args.train_for_env_steps, args.target_reward, extra)
        runs.append(r)
        solved = f"{r['solved_s']:.1f} s" if r["solved_s"] is not None else "not solved"
        print(
            f"run {i}: exit {r['rc']} | reward >= {args.target_reward:g} after {solved} (wall, from launch) | "
            f"{r.get('fps', 0):,} FPS overall, {r['fps10_end']:,.0f} FPS (10 s window at the end) | "
            f"{r.get('env_steps', 0):,} env steps, wall {r['wall_s']:.1f} s"
        )
    solved = [r["solved_s"] for r in runs if r["solved_s"] is not None]
    fps = statistics.median(r.get("fps", 0) for r in runs)
    print(f"\ncommand: python train.py --env={args.env} --num_workers={args.num_workers}", *extra)
    print(
        f"median training FPS (overall): {fps:,.0f}  (target {args.target_fps:,.0f}: ratio {fps / args.target_fps:.2f})"
    )
    print(f"training FPS / raw single-process env speed: {fps / raw:.2f}")
    if solved:
        med = statistics.median(solved)
        print(
            f"median wall time to reward >= {args.target_reward:g}: {med:.1f} s over {len(solved)}/{len(runs)} "
            f"solved runs (target {args.target_seconds:g} s: ratio {med / args.target_seconds:.2f})"
        )
    else:
        print(f"no run reached mean reward {args.target_reward:g}")
    ok = len(solved) == len(runs) and all(r["rc"] == 0 for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
