"""Speed of one `train.py` command on this checkout and on an older commit, alternated so that a machine whose load
changes meanwhile slows both alike: what a change of code or of a preset costs in env frames (or steps) per second.

    python -m benchmarks.commit_ab --old 56e054f [--rounds 2] -- --env=atari_pong --device=cpu --seed=0 \\
        --train_for_env_steps=300000

The old commit is exported with `git archive` into a temporary folder; each side runs the same flags with its own
code and presets. A run's rate is its final "done: N env frames|steps in S s" line (S counts from the components'
start, not the interpreter's). Prints every run, then the medians and their ratio (new / old).
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
DONE = re.compile(r"done: (\d+) env (steps|frames) in ([0-9.]+) s")


def export(ref: str, dest: Path) -> Path:
    """The tree of commit `ref` of this repository, written into dest."""
    archive = dest / "old.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), ref], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest / "old", filter="data")
    return dest / "old"


def one_run(tree: Path, train_dir: Path, name: str, flags: list[str], timeout: float) -> tuple[float, str]:
    """(rate, unit) of one run of the checkout at `tree`: env steps or env frames per second, as train.py counts."""
    argv = [sys.executable, str(tree / "train.py"), *flags, f"--train_dir={train_dir}", f"--experiment={name}"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    match = DONE.search(out.stdout + out.stderr)
    if out.returncode != 0 or match is None:
        raise SystemExit(f"{name}: exit code {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return int(match.group(1)) / float(match.group(3)), f"env {match.group(2)}/s"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="commit (any git ref) to compare against")
    parser.add_argument("--rounds", type=int, default=3, help="old/new pairs, alternated")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one run may take")
    args, flags = parser.parse_known_args(argv)
    flags = [a for a in flags if a != "--"]
    if not any(f.startswith("--env=") for f in flags):
        raise SystemExit("commit_ab: give the train.py flags after --, --env=... among them")
    with tempfile.TemporaryDirectory(prefix="sf_commit_ab_") as tmp:
        tmp = Path(tmp)
        trees = {"old": export(args.old, tmp), "new": ROOT}
        rates: dict[str, list[float]] = {"old": [], "new": []}
        unit = ""
        for r in range(args.rounds):
            for kind in ("old", "new") if r % 2 == 0 else ("new", "old"):
                rate, unit = one_run(trees[kind], tmp / "train", f"{kind}{r}", flags, args.timeout)
                rates[kind].append(rate)
                print(f"round {r} {kind}: {rate:,.0f} {unit}", flush=True)
    old, new = statistics.median(rates["old"]), statistics.median(rates["new"])
    print(f"median old ({args.old}) {old:,.0f}, new {new:,.0f} {unit}: new/old {new / old:.3f}")


if __name__ == "__main__":
    main()
