"""PBT benchmark: `python -m benchmarks.benchmark_pbt [--runs=3] [--budget_env_steps=N] [--output_dir=DIR]`.

Launches a population of four CartPole-v1 policies trained with population-based training,

    python train.py --env=CartPole-v1 --num_workers=2 --num_policies=4 --with_pbt=True
        --pbt_period_env_steps=20000 --pbt_start_mutation=40000

(plus a step budget, finer progress/summary intervals and the experiment folder, none of which changes training)
`--runs` times, and measures when the BEST policy of the population first has a mean reward >= the target (475).
`--stop_at_reward` is not used: it waits for every policy. The measurement comes from the run's progress.csv (one
row per progress line: time_s, env_steps of all policies together, reward_p<i>): the first row in which any
reward_p<i> reaches the target. The wall time from launching the command is the time at which the matching
progress line appeared on the run's stdout. Once that happens the run is stopped with SIGINT (a normal shutdown
that writes the checkpoints and PBT state), unless --keep_going.

Per run it prints the env steps (total, and of the best policy alone) and wall time to the target, which policy
got there, the PBT decisions taken (mutations and replacements, from <experiment>/pbt_p<i>.json) and writes the
curves of all policies as <output_dir>/run<i>.png (sample_factory.tools.plot, --policy_id=all). A summary over all runs
goes to <output_dir>/results.json. The exit status is 1 if a run failed or never reached the target.
`--num_policies=1` measures the plain single-policy command (no PBT) the same way, for comparison.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.benchmark import REPO
from sample_factory.experiment.exit_codes import interrupted_exit_code
from sample_factory.tools.plot import plot_experiments

_PROGRESS = re.compile(r"FPS 10s/60s/300s: .*\| env (?:steps|frames): (\d+)")
_POLICY = re.compile(r"p(\d+) reward (\S+) \((\d+) episodes(?:, (\d+) steps)?\)")
_DONE = re.compile(r"done: (\d+) env (?:steps|frames) in ([\d.]+) s, (\d+) FPS overall")
_PBT = re.compile(r"PBT: policy \d+ (mutation|replacement)")


def train_command(args: argparse.Namespace, experiment: str, extra: list[str]) -> list[str]:
    """The training command of one run: the user's command line plus budget, folders and reporting intervals."""
    cmd = [sys.executable, str(REPO / "train.py"), "--env=CartPole-v1", "--num_workers=2"]
    if args.num_policies > 1:
        cmd += [
            f"--num_policies={args.num_policies}",
            "--with_pbt=True",
            f"--pbt_period_env_steps={args.pbt_period_env_steps}",
            f"--pbt_start_mutation={args.pbt_start_mutation}",
        ]
    return cmd + [
        f"--train_for_env_steps={args.budget_env_steps // args.num_policies}",  # train.py's budget is per policy
        f"--train_for_seconds={args.max_seconds}",
        f"--train_dir={args.output_dir}",
        f"--experiment={experiment}",
        "--restart_behavior=overwrite",
        "--report_interval_sec=1",
        "--experiment_summaries_interval=1",
        *extra,
    ]


def read_progress_csv(path: Path) -> list[dict[str, float]]:
    """Rows of progress.csv as floats (reward columns may be nan before the first finished episode)."""
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def first_reaching(rows: list[dict[str, float]], target: float) -> tuple[int, int] | None:
    """(row index, policy) of the first row in which some policy's mean reward is >= target; the best policy of
    that row when several reached it at once."""
    for i, row in enumerate(rows):
        rewards = {int(k[len("reward_p") :]): v for k, v in row.items() if k.startswith("reward_p")}
        reached = {p: v for p, v in rewards.items() if not math.isnan(v) and v >= target}
        if reached:
            return i, max(reached, key=lambda p: (reached[p], -p))
    return None


def pbt_events(exp_dir: Path, num_policies: int) -> dict[int, list[dict[str, Any]]]:
    """The PBT history of every policy (empty where the state file is missing)."""
    out = {}
    for p in range(num_policies):
        path = exp_dir / f"pbt_p{p}.json"
        out[p] = json.loads(path.read_text())["history"] if path.exists() else []
    return out


def run_once(args: argparse.Namespace, index: int, extra: list[str]) -> dict[str, Any]:
    experiment = f"run{index}"
    exp_dir = Path(args.output_dir) / experiment
    cmd = train_command(args, experiment, extra)
    log_path = Path(args.output_dir) / f"{experiment}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    lines: list[tuple[float, int, dict[int, tuple[float, int | None]]]] = []  # (wall, env steps, policies)
    pbt_logged_before_target = 0
    reached_online = False
    done: dict[str, float] = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
        for line in proc.stdout:
            log.write(line)
            now = time.monotonic() - t0
            if _PBT.search(line) and not reached_online:
                pbt_logged_before_target += 1
            if m := _PROGRESS.search(line):
                policies = {
                    int(pm.group(1)): (float(pm.group(2)), int(pm.group(4)) if pm.group(4) else None)
                    for pm in _POLICY.finditer(line)
                }
                lines.append((now, int(m.group(1)), policies))
                if not reached_online and any(r >= args.target_reward for r, _ in policies.values()):
                    reached_online = True
                    if not args.keep_going:
                        proc.send_signal(signal.SIGINT)  # normal shutdown: checkpoints and PBT state are written
            if m := _DONE.search(line):
                done = {"collected_env_steps": int(m.group(1)), "train_s": float(m.group(2)), "fps": int(m.group(3))}
        rc = proc.wait()
    stopped = reached_online and not args.keep_going  # by our SIGINT: saved and stopped early, exit 130
    result: dict[str, Any] = {
        "run": index,
        "num_policies": args.num_policies,
        "rc": rc,
        "clean_exit": rc == 0 or (stopped and rc == interrupted_exit_code(signal.SIGINT)),
        "wall_s": time.monotonic() - t0,
        "log": str(log_path),
        **done,
    }

    rows = read_progress_csv(exp_dir / "progress.csv") if (exp_dir / "progress.csv").exists() else []
    hit = first_reaching(rows, args.target_reward)
    if hit is not None:
        i, best = hit
        row = rows[i]
        # Progress lines and progress.csv rows are written together, one for one; check it before trusting it.
        wall = lines[i][0] if i < len(lines) and lines[i][1] == int(row["env_steps"]) else None
        own_steps = lines[i][2].get(best, (None, None))[1] if wall is not None else None
        result.update(
            reached=True,
            best_policy=best,
            best_reward=row[f"reward_p{best}"],
            env_steps_to_target=int(row["env_steps"]),
            best_policy_env_steps_to_target=own_steps,
            seconds_since_start_to_target=row["time_s"],
            wall_s_to_target=wall,
            rewards_at_target={p: row[f"reward_p{p}"] for p in range(args.num_policies) if f"reward_p{p}" in row},
            pbt_decisions_logged_before_target=pbt_logged_before_target,
        )
    else:
        result["reached"] = False

    events = pbt_events(exp_dir, args.num_policies)
    result["mutations"] = sum(e["kind"] == "mutation" for h in events.values() for e in h)
    result["mutations_changing_something"] = sum(
        e["kind"] == "mutation" and bool(e["changes"]) for h in events.values() for e in h
    )
    result["replacements"] = [
        {"target": p, "source": e["source"], "env_steps": e["env_steps"]}
        for p, h in events.items()
        for e in h
        if e["kind"] == "replacement"
    ]
    try:
        png = plot_experiments([experiment], Path(args.output_dir) / f"{experiment}.png", args.output_dir, "all")
        result["png"] = str(png)
    except (ImportError, FileNotFoundError) as e:
        print(f"run {index}: no plot ({e})", file=sys.stderr)
    return result


def describe(r: dict[str, Any], target: float) -> str:
    head = f"run {r['run']}: exit {r['rc']}"
    if r["reached"]:
        wall = f"{r['wall_s_to_target']:.1f} s from launch" if r["wall_s_to_target"] is not None else "wall n/a"
        own = r["best_policy_env_steps_to_target"]
        own = f" ({own:,} of them by p{r['best_policy']})" if own is not None else ""
        others = ", ".join(f"p{p} {v:.1f}" for p, v in r["rewards_at_target"].items())
        head += (
            f" | best policy p{r['best_policy']} reached mean reward {r['best_reward']:.1f} >= {target:g} after "
            f"{r['env_steps_to_target']:,} env steps of the population{own}, {wall} "
            f"(time_s {r['seconds_since_start_to_target']:.1f} in progress.csv) | rewards then: {others}"
        )
    else:
        head += f" | no policy reached {target:g}"
    repl = ", ".join(f"p{x['target']}<-p{x['source']}@{x['env_steps']:,}" for x in r["replacements"]) or "none"
    if r["num_policies"] > 1:
        head += (
            f"\n  PBT over the run: {r['mutations']} mutations ({r['mutations_changing_something']} changed a value), "
            f"{len(r['replacements'])} replacements [{repl}] (target<-source@env steps of the target)"
        )
    if r.get("fps"):
        head += f"\n  {r.get('collected_env_steps', 0):,} env steps collected in {r['train_s']:.1f} s, {r['fps']:,} FPS"
    if r.get("png"):
        head += f"\n  curves: {r['png']}"
    return head


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="Repeats; medians are reported.")
    p.add_argument("--budget_env_steps", type=int, default=4_000_000, help="Env steps (all policies) per run.")
    p.add_argument("--max_seconds", type=int, default=900, help="Wall-clock cap of each run (--train_for_seconds).")
    p.add_argument("--output_dir", default=str(REPO / "train_dir" / "benchmark_pbt"), help="Experiments, PNGs.")
    p.add_argument("--target_reward", type=float, default=475.0, help="Mean episode reward counted as solved.")
    p.add_argument("--pbt_period_env_steps", type=int, default=20_000, help="Passed to train.py.")
    p.add_argument("--pbt_start_mutation", type=int, default=40_000, help="Passed to train.py.")
    p.add_argument(
        "--num_policies",
        type=int,
        default=4,
        help="Population size; 1 runs the plain single-policy command (no PBT) under the same measurement.",
    )
    p.add_argument("--keep_going", action="store_true", help="Train to the budget instead of stopping at target.")
    args, extra = p.parse_known_args(argv)
    args.output_dir = str(Path(args.output_dir).resolve())

    cmd = train_command(args, "run<i>", extra)
    print("command: python train.py " + " ".join(cmd[2:]), flush=True)
    results = []
    for i in range(args.runs):
        r = run_once(args, i, extra)
        results.append(r)
        print(describe(r, args.target_reward), flush=True)

    solved = [r for r in results if r["reached"]]
    summary: dict[str, Any] = {"runs": len(results), "reached": len(solved), "target_reward": args.target_reward}
    if solved:
        summary["median_env_steps_to_target"] = statistics.median(r["env_steps_to_target"] for r in solved)
        walls = [r["wall_s_to_target"] for r in solved if r["wall_s_to_target"] is not None]
        if walls:
            summary["median_wall_s_to_target"] = statistics.median(walls)
        print(
            f"\nmedian over {len(solved)}/{len(results)} runs that reached {args.target_reward:g}: "
            f"{summary['median_env_steps_to_target']:,.0f} env steps of the population"
            + (f", {summary['median_wall_s_to_target']:.1f} s from launch" if walls else "")
        )
    else:
        print(f"\nno run reached mean reward {args.target_reward:g}")
    out = Path(args.output_dir) / "results.json"
    out.write_text(json.dumps({"summary": summary, "runs": results, "extra_args": extra}, indent=1))
    print(f"results: {out}")
    ok = len(solved) == len(results) and all(r["clean_exit"] for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
