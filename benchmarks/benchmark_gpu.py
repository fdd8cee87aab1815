"""Throughput on a many-core GPU machine: `python -m benchmarks.benchmark_gpu [--seconds=45]`.

Runs, in one go on the same machine, the throughput cases that Sample Factory users compare (CartPole, Atari Pong
with the gymnasium and EnvPool backends, VizDoom basic), each as the `train.py` command a user would type with
`--device=gpu` (policy workers and learner on CUDA) and `--num_workers` = the machine's cores, and writes a
markdown table (and the same rows as json) to --output. Cases whose env package is missing are listed as skipped.

Units: frames/s = env steps/s x --env_frameskip (4 for Atari and VizDoom, 1 for CartPole), the unit Sample Factory
prints. "raw ceiling": N plain processes stepping the same wrapped env with random actions (no inference, no
training), measured in the same run; sampler-only and training runs are given as a ratio to it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from sample_factory.config.machine import usable_cores
from sample_factory.tools.timed_run import raw_ceiling, run_train

# SF2's Atari hyperparameters (same work per sample as CleanRL's ppo_atari: 4 epochs x 4 minibatches of 256 per
# 1,024 samples; rollout 128): the comparison setting of issue #15.
SF2_ATARI_WORK = ["--rollout=128", "--batch_size=256", "--num_batches_per_epoch=4", "--num_epochs=4"]


def cases(workers: int) -> list[dict]:
    """(name, env, extra flags, frameskip, needs) of every case, in table order."""
    return [
        dict(case="CartPole-v1 train, GPU", env="CartPole-v1", flags=[], k=1, needs=None),
        dict(case="CartPole-v1 train, CPU", env="CartPole-v1", flags=["--device=cpu"], k=1, needs=None),
        dict(case="Pong raw ceiling", env="atari_pong", raw=True, k=4, needs="ale_py"),
        dict(case="Pong sampler only", env="atari_pong", flags=["--sampler_only=True"], k=4, needs="ale_py"),
        dict(case="Pong train, atari preset", env="atari_pong", flags=[], k=4, needs="ale_py"),
        dict(case="Pong train, SF2 Atari work per sample", env="atari_pong", flags=SF2_ATARI_WORK, k=4, needs="ale_py"),
        dict(
            case="EnvPool Pong sampler only",
            env="atari_pong",
            flags=["--sampler_only=True", "--env_backend=envpool"],
            k=4,
            needs="envpool",
        ),
        dict(case="EnvPool Pong train", env="atari_pong", flags=["--env_backend=envpool"], k=4, needs="envpool"),
        dict(case="VizDoom basic raw ceiling", env="doom_basic", raw=True, k=4, needs="vizdoom"),
        dict(case="VizDoom basic sampler only", env="doom_basic", flags=["--sampler_only=True"], k=4, needs="vizdoom"),
        dict(case="VizDoom basic train", env="doom_basic", flags=[], k=4, needs="vizdoom"),
    ]


def machine() -> str:
    gpu = f"{torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "no GPU"
    return (
        f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), {gpu}, torch {torch.__version__}"
    )


def measure(c: dict, args: argparse.Namespace, extra: list[str], ceilings: dict[str, float]) -> dict:
    """One case's numbers; a raw-ceiling case also records its env's ceiling in `ceilings` (frames/s)."""
    if c.get("raw"):
        steps = raw_ceiling(c["env"], args.num_workers, min(args.seconds, 20.0))
        ceilings[c["env"]] = steps * c["k"]
        return dict(frames_per_s=steps * c["k"], command=f"{args.num_workers} processes, random actions")
    flags = [f"--env={c['env']}", f"--num_workers={args.num_workers}", f"--device={args.device}"]
    flags.append("--summaries_use_frameskip=False")  # train.py's FPS in agent steps: k converts them to frames
    flags += [*c["flags"], *extra]  # a later --device (the CPU row) wins
    result, summary = run_train(flags, args.seconds)
    if result["rc"] != 0 or "fps" not in result:
        raise RuntimeError(f"train.py exited with {result['rc']}: {' | '.join(result['stderr_tail'])}")
    row = dict(
        frames_per_s=result.get("fps10", 0.0) * c["k"],
        frames_per_s_overall=result.get("fps", 0) * c["k"],
        env_steps=result.get("env_steps", 0),
        command="python train.py " + " ".join(flags),
        summary=summary,
    )
    if c["env"] in ceilings:
        row["ratio_to_raw"] = row["frames_per_s"] / ceilings[c["env"]]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num_workers", type=int, default=usable_cores(), help="Actor workers (default: the usable cores).")
    p.add_argument("--seconds", type=float, default=45.0, help="Length of each training / sampling run.")
    p.add_argument("--device", default="gpu", help="--device of the runs (the CPU CartPole row always uses cpu).")
    p.add_argument(
        "--only",
        default="",
        help="Prefixes separated by |: run only the cases whose name starts with one (e.g. 'Pong|VizDoom').",
    )
    p.add_argument(
        "--output", type=Path, default=Path("benchmarks/results/gpu_benchmark"), help="Writes <output>.md/.json"
    )
    args, extra = p.parse_known_args(argv)
    only = [s.strip() for s in args.only.split("|") if s.strip()]
    rows: list[dict] = []
    ceilings: dict[str, float] = {}  # env -> raw frames/s
    for c in cases(args.num_workers):
        if only and not any(c["case"].startswith(s) for s in only):
            continue
        row = {"case": c["case"], "env": c["env"], "workers": args.num_workers}
        if c["needs"] and importlib.util.find_spec(c["needs"]) is None:
            rows.append({**row, "skipped": f"{c['needs']} not installed"})
            print(f"{c['case']}: skipped ({c['needs']} not installed)", flush=True)
            continue
        t0 = time.monotonic()
        try:
            row.update(measure(c, args, extra, ceilings))
        except Exception as e:  # one broken case (an env that fails to start) must not lose the others' numbers
            rows.append({**row, "skipped": f"failed: {type(e).__name__}: {e}"})
            print(f"{c['case']}: failed: {type(e).__name__}: {e}", flush=True)
            continue
        row["wall_s"] = time.monotonic() - t0
        rows.append(row)
        ratio = f", {row['ratio_to_raw']:.2f} of the raw ceiling" if "ratio_to_raw" in row else ""
        print(f"{c['case']}: {row['frames_per_s']:,.0f} frames/s{ratio} ({row['wall_s']:.0f} s)", flush=True)
    write(rows, args)
    return 0


def write(rows: list[dict], args: argparse.Namespace) -> None:
    out = args.output
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": machine(), "seconds_per_run": args.seconds, "date": time.strftime("%Y-%m-%d")}
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    lines = [
        f"Measured {meta['date']} on {meta['machine']}; {args.seconds:g} s per run, "
        f"`--num_workers={args.num_workers}`. frames/s: the 10 s window at the end of the run, env steps x "
        "frameskip (4 for Atari and VizDoom, 1 for CartPole); overall: from the first to the last env step.",
        "",
        "| case | frames/s (end) | overall | ratio to raw ceiling | command |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['case']} | skipped: {r['skipped']} | | | |")
            continue
        ratio = f"{r['ratio_to_raw']:.2f}" if "ratio_to_raw" in r else ""
        overall = f"{r['frames_per_s_overall']:,.0f}" if "frames_per_s_overall" in r else ""
        lines.append(f"| {r['case']} | {r['frames_per_s']:,.0f} | {overall} | {ratio} | `{r['command']}` |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
