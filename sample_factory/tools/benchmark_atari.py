"""Atari throughput: `python -m sample_factory.tools.benchmark_atari [--env=atari_pong] [--seconds=60]`.

Prints, measured in one run on the same machine:
- the raw ceiling: N plain processes (N = --num_workers) stepping the same wrapped env with random actions;
- sampler-only throughput of `train.py --env=... --num_workers=N --sampler_only=True` (actors + policy workers,
  no training) and its ratio to the ceiling;
- full-training throughput of `train.py --env=... --num_workers=N` with the atari preset, and its per-component
  timing breakdown.
Frames = env steps x --env_frameskip (4).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sample_factory.config import parse_cfg
from sample_factory.tools.benchmark import REPO

_DONE = re.compile(r"done: (\d+) (env steps|env frames) in ([\d.]+) s, (\d+) FPS overall")
_FPS10 = re.compile(r"FPS 10s/60s/300s: ([\d.]+)/")
_TRAINED = re.compile(r"samples collected/trained: \d+/(\d+)")
_REWARD = re.compile(r"policy 0: reward ([-+\w.]+),")


def _step_randomly(env_name: str, seconds: float, out) -> None:
    try:
        from sample_factory.envs.env_utils import make_env

        env = make_env(parse_cfg([f"--env={env_name}"]))
        env.reset(seed=0)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            steps += 1
            if term or trunc:
                env.reset()
        out.put(steps / (time.perf_counter() - t0))
    except BaseException as e:  # the parent waits on the queue: tell it, rather than let it time out
        out.put(f"{type(e).__name__}: {e}")
        raise


def raw_ceiling(env_name: str, processes: int, seconds: float) -> float:
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_step_randomly, args=(env_name, seconds, q)) for _ in range(processes)]
    for p in procs:
        p.start()
    rates = [q.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    errors = [r for r in rates if isinstance(r, str)]
    if errors:
        raise RuntimeError(f"stepping {env_name} failed in {len(errors)} of {processes} processes: {errors[0]}")
    return sum(rates)


def run_train(args: list[str], seconds: float, repo: Path = REPO) -> tuple[dict, list[str]]:
    """One timed train.py run of `repo`'s code (another checkout: its own code first on PYTHONPATH). The result has
    env_steps (the run's counter), unit ("env steps" or "env frames"), seconds, fps (overall) and fps10 (the last
    10 s window) in that unit, samples_trained (agent steps) and reward (policy 0's final mean episode reward);
    the summary is the final per-component timing."""
    with tempfile.TemporaryDirectory() as td:
        cmd = [sys.executable, str(repo / "train.py"), f"--train_dir={td}", "--experiment=bench"]
        cmd += [f"--train_for_seconds={seconds}", "--report_interval_sec=2", *args]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=repo, env=env, timeout=seconds + 300)
    out = proc.stdout.splitlines()
    result = {"rc": proc.returncode, "stderr_tail": proc.stderr.splitlines()[-3:]}
    for line in out:
        if m := _DONE.search(line):
            result.update(env_steps=int(m.group(1)), unit=m.group(2), seconds=float(m.group(3)), fps=int(m.group(4)))
        if m := _FPS10.search(line):
            result["fps10"] = float(m.group(1))
        if m := _TRAINED.search(line):
            result["samples_trained"] = int(m.group(1))
        if m := _REWARD.search(line):
            result["reward"] = float(m.group(1))
    summary = [ln for ln in out if ln.startswith("  ") or "done:" in ln or "remote samplers:" in ln]
    return result, summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", type=str, default="atari_pong", help="Atari env name.")
    p.add_argument("--num_workers", type=int, default=2, help="Actor workers and raw-ceiling processes.")
    p.add_argument("--seconds", type=float, default=60.0, help="Length of each measured run.")
    p.add_argument("--frameskip", type=int, default=4, help="Frames per env step (the preset's --env_frameskip).")
    args, extra = p.parse_known_args(argv)
    k = args.frameskip
    ceiling = raw_ceiling(args.env, args.num_workers, min(args.seconds, 20.0))
    print(
        f"raw ceiling, {args.num_workers} processes, random actions: "
        f"{ceiling:,.0f} steps/s = {ceiling * k:,.0f} frames/s"
    )
    # train.py's FPS in agent steps (k converts them to frames, as for the ceiling)
    base = [f"--env={args.env}", f"--num_workers={args.num_workers}", "--summaries_use_frameskip=False", *extra]
    sampler, s_summary = run_train([*base, "--sampler_only=True"], args.seconds)
    fps = sampler.get("fps10", 0.0)
    print(f"sampler only: {fps * k:,.0f} frames/s (10 s window at the end), ratio to the ceiling {fps / ceiling:.2f}")
    print("\n".join(s_summary))
    train, t_summary = run_train(base, args.seconds)
    print(
        f"full training: {train.get('fps10', 0.0) * k:,.0f} frames/s (10 s window at the end), "
        f"{train.get('fps', 0) * k:,} frames/s overall"
    )
    print("\n".join(t_summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
