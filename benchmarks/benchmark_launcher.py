"""`python -m benchmarks.benchmark_launcher [--steps=20000] [--repeats=1]`: what the launcher costs.

The same 4-experiment CartPole sweep (seeds 0-3, --num_workers=1, --train_for_env_steps=STEPS) is run three ways,
each time in a fresh train_dir:
  by hand        the 4 train.py commands one after another (exactly the commands the launcher builds),
  launcher p=1   `python -m sample_factory.launcher --max_parallel=1`: the same sequential work, so the difference
                 to "by hand" is the launcher's own overhead,
  launcher p=2   `--max_parallel=2`, the sweep as one would run it on 2 cores (issue #14's comparison).
With --repeats=N the three alternate N times (drift on a shared machine hits all three alike); the table gives
the median wall time of each and its ratio to "by hand". As the runs' own times vary with the machine's load, the
launcher's own share is also given directly: the p=1 launcher's wall time minus the wall times of its runs (from
its summary). --json=FILE writes the raw times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sample_factory.launcher.sweep import expand, load_run

REPO_ROOT = Path(__file__).resolve().parents[1]
RUN_NAME = "bench_launcher"


def sweep_yaml(steps: int) -> str:
    cmd = f"python train.py --env=CartPole-v1 --num_workers=1 --train_for_env_steps={steps}"
    return json.dumps({"name": RUN_NAME, "experiments": [{"name": "cp", "cmd": cmd, "grid": {"seed": [0, 1, 2, 3]}}]})


def by_hand(sweep: Path, train_dir: Path) -> float:
    """The sweep's commands (as the launcher expands them) run one after another."""
    started = time.monotonic()
    for c in expand(load_run(str(sweep)), train_dir):
        subprocess.run(c.argv, cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def with_launcher(sweep: Path, train_dir: Path, max_parallel: int) -> tuple[float, float]:
    """(wall seconds of the launcher command, the sum of its runs' own wall seconds from the summary)."""
    argv = [sys.executable, "-m", "sample_factory.launcher", f"--run={sweep}", f"--train_dir={train_dir}"]
    started = time.monotonic()
    subprocess.run([*argv, f"--max_parallel={max_parallel}"], cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
    elapsed = time.monotonic() - started
    summary = json.loads((train_dir / f"sweep_{RUN_NAME}" / "summary.json").read_text())
    bad = [r["name"] for r in summary["experiments"] if r["status"] != "finished"]
    if bad:
        raise RuntimeError(f"launcher runs did not finish: {bad}")
    return elapsed, sum(r["wall_s"] for r in summary["experiments"])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20000, help="--train_for_env_steps of each experiment")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", default=None, help="write the raw times here")
    args = p.parse_args(argv)
    times: dict[str, list[float]] = {"by hand": [], "launcher p=1": [], "launcher p=2": []}
    own: list[float] = []  # launcher p=1: its wall time minus its runs' wall times, i.e. the launcher's own share
    with tempfile.TemporaryDirectory(prefix="sf_bench_launcher_") as tmp:
        sweep = Path(tmp) / "sweep.yaml"
        sweep.write_text(sweep_yaml(args.steps))
        for i in range(args.repeats):
            for name in times:
                td = Path(tmp) / f"td_{i}_{name.replace(' ', '_').replace('=', '')}"
                if name == "by hand":
                    t = by_hand(sweep, td)
                else:
                    t, runs = with_launcher(sweep, td, int(name[-1]))
                    if name == "launcher p=1":
                        own.append(t - runs)
                times[name].append(t)
                print(f"[{i + 1}/{args.repeats}] {name}: {t:.1f} s", flush=True)
                shutil.rmtree(td, ignore_errors=True)
    base = statistics.median(times["by hand"])
    print(f"\n4 CartPole experiments x {args.steps} env steps, --num_workers=1, {os.cpu_count()} cores")
    print(f"{'how':<14} {'wall s (median)':>16} {'ratio to by hand':>17}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<14} {m:>16.1f} {m / base:>17.2f}")
    print(f"launcher p=1 outside its runs: {statistics.median(own):.2f} s for the sweep (median), i.e. start-up,")
    print("  the summary, and the gaps between one run's exit and the next one's start")
    if args.json:
        record = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.processor() or platform.machine()})",
            "steps": args.steps,
            "times_s": times,
            "launcher_p1_outside_runs_s": own,
        }
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
