"""`python -m benchmarks.benchmark_hooks [--base_rev=REV]`: what the callback machinery costs, measured in
one run (this machine is shared and noisy: only ratios within one run compare).

Variants, run interleaved `--repeats` times each, every run `--seconds` long with the same flags:
- `base`: the code at `--base_rev` (a git revision from before the hooks existed; checked out into a temporary
  worktree), when given;
- `no hooks`: this tree, no --callbacks, no --episode_info_keys (the machinery present but unused);
- `episode hook`: this tree with `--callbacks` naming `CountingCallbacks` below, a trivial `on_episode_end` (counts
  and returns one number, which goes the way of every episode statistic) and `--episode_info_keys=success` (looked
  up in every final info).

Prints the median of each variant's overall FPS (env steps per second from the components' start to the end,
agent steps: --summaries_use_frameskip=False where the flag exists) and its ratio to `no hooks`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from benchmarks.benchmark import REPO
from sample_factory.experiment.callbacks import Callbacks
from sample_factory.tools.timed_run import run_train

HOOK_FLAGS = [
    "--callbacks=benchmarks.benchmark_hooks:CountingCallbacks",
    "--episode_info_keys=success",
]


class CountingCallbacks(Callbacks):
    """The cheapest useful episode hook: count, and report one number per episode."""

    def __init__(self):
        self.episodes = 0

    def on_episode_end(self, episode):
        self.episodes += 1
        return {"hook_length": episode.length}


def overall_fps(repo: Path, flags: list[str], seconds: float) -> float:
    """Overall FPS of one run of `repo`'s train.py."""
    result, _ = run_train(flags, seconds, repo)
    if result["rc"] != 0 or "fps" not in result:
        raise RuntimeError(f"train.py {' '.join(flags)} exited {result['rc']}: {' | '.join(result['stderr_tail'])}")
    return float(result["fps"])


def base_worktree(rev: str, where: Path) -> Path:
    path = where / "base"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), rev], check=True, capture_output=True
    )
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1", help="Env to train on.")
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=20.0, help="Length of each run.")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--base_rev", default=None, help="Git revision without the hooks, measured as 'base'.")
    p.add_argument("--output", default=None, help="Also write the results as JSON here.")
    args, extra = p.parse_known_args(argv)
    common = [f"--env={args.env}", f"--num_workers={args.num_workers}", *extra]
    fps: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as td:
        variants = [
            ("no hooks", REPO, ["--summaries_use_frameskip=False"]),
            ("episode hook", REPO, ["--summaries_use_frameskip=False", *HOOK_FLAGS]),
        ]
        if args.base_rev:
            variants.insert(0, ("base", base_worktree(args.base_rev, Path(td)), []))
        try:
            for r in range(args.repeats):
                for name, repo, flags in variants:
                    fps.setdefault(name, []).append(overall_fps(repo, [*common, *flags], args.seconds))
                    print(f"repeat {r + 1}: {name}: {fps[name][-1]:,.0f} FPS", flush=True)
        finally:
            if args.base_rev:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(Path(td) / "base")],
                    capture_output=True,
                )
    ref = statistics.median(fps["no hooks"])
    results = {}
    print(
        f"\n{args.env}, {args.num_workers} workers, {args.repeats} x {args.seconds:.0f} s runs, FPS overall "
        f"(agent steps/s), median:"
    )
    for name, values in fps.items():
        med = statistics.median(values)
        results[name] = {"fps": values, "median": med, "ratio_to_no_hooks": med / ref}
        print(
            f"  {name:13s} {med:10,.0f}  ratio to no hooks {med / ref:.3f}  (runs: "
            f"{', '.join(f'{v:,.0f}' for v in values)})"
        )
    if args.output:
        Path(args.output).write_text(json.dumps({"env": args.env, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
