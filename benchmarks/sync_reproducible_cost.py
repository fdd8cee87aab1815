"""What reproducible synchronous runs cost: env steps per second of the same seeded `--async_rl=False` run with this
checkout and with an older commit (before reproducibility), alternated so that a machine whose load changes
meanwhile slows both alike.

    python benchmarks/sync_reproducible_cost.py --old e910703 [--rounds 3] [--env_steps 100000] [-- extra train flags]

The old commit is exported with `git archive` into a temporary folder. Each run is `train.py --env=CartPole-v1
--async_rl=False --num_workers=2 --seed=3` (plus the extra flags); its rate is the final "done: N env steps in S s"
line (S counts from the components' start, not the interpreter's). Prints every run, then the medians and their
ratio (new / old). `-- --async_rl=True` measures the asynchronous path the same way (it should not have moved).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DONE = re.compile(r"done: (\d+) env steps in ([0-9.]+) s")


def export(ref: str, dest: Path) -> Path:
    """The tree of commit `ref` of this repository, written into dest."""
    archive = dest / "old.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), ref], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest / "old", filter="data")
    return dest / "old"


def one_run(tree: Path, train_dir: Path, name: str, env_steps: int, extra: list[str]) -> float:
    """Env steps per second of one run of the checkout at `tree`."""
    argv = [sys.executable, str(tree / "train.py"), "--env=CartPole-v1", "--async_rl=False", "--num_workers=2"]
    argv += ["--seed=3", f"--train_for_env_steps={env_steps}", f"--train_dir={train_dir}", f"--experiment={name}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([*argv, *extra], cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    match = DONE.search(out.stdout + out.stderr)
    if out.returncode != 0 or match is None:
        raise SystemExit(f"{name}: exit code {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return int(match.group(1)) / float(match.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="commit (any git ref) to compare against")
    parser.add_argument("--rounds", type=int, default=3, help="old/new pairs, alternated")
    parser.add_argument("--env_steps", type=int, default=100_000)
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    with tempfile.TemporaryDirectory(prefix="sf_sync_cost_") as tmp:
        tmp = Path(tmp)
        trees = {"old": export(args.old, tmp), "new": ROOT}
        rates: dict[str, list[float]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for kind in ("old", "new") if r % 2 == 0 else ("new", "old"):
                rate = one_run(trees[kind], tmp / "train", f"{kind}{r}", args.env_steps, extra)
                rates[kind].append(rate)
                print(f"round {r} {kind}: {rate:,.0f} env steps/s", flush=True)
    old, new = statistics.median(rates["old"]), statistics.median(rates["new"])
    print(f"median old ({args.old}) {old:,.0f}, new {new:,.0f} env steps/s: new/old {new / old:.3f}")


if __name__ == "__main__":
    main()
