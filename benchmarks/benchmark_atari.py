"""Atari throughput: `python -m benchmarks.benchmark_atari [--env=atari_pong] [--seconds=60]`.

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
import sys

from sample_factory.tools.timed_run import raw_ceiling, run_train


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
