"""Frames to a score over several seeds: `python -m benchmarks.frames_to_score --env=atari_pong --target=18
--seeds=5 --max_frames=8e6 [--parallel=1] [--out_dir=DIR] [-- more train.py flags]`, or `--analyze DIR [DIR ...]` to
read runs that already ran (each DIR an experiment folder with progress.csv, cfg.json and sf_log.txt).

Each seed runs `train.py --env=ENV --seed=S --stop_at_reward=TARGET --train_for_env_steps=MAX_FRAMES` plus the flags
after `--`. A seed's score is the first progress.csv row whose reward (the mean of the last --stats_avg = 100
episodes) reaches the target: its env frames (Atari: agent steps x frameskip), agent steps, wall time from launch.
Printed: one JSON line per seed, a markdown table, median / min / max over the seeds that reached the target, the
fraction that did within the cap, and the seeds that missed; the curves go to DIR/curves.png and DIR/curves.csv
(frames, mean reward per seed). The last line is one JSON object.

Frames to a score belong to the algorithm and its settings, not to the machine, up to policy lag: the learner of a
slow machine trains on samples that are as many SGD steps old as the sampler ran ahead. The output gives the runs'
lag (SGD steps between acting and training, from the run's report lines) beside --reference_lag (the lag a GPU box
measured with the same setup, where known); --max_policy_lag in the train.py flags bounds it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_LAG = re.compile(r"p0 lag min/avg/max (\d+)/([\d.]+)/(\d+)")
_DONE = re.compile(r"done: (\d+) env (?:steps|frames) in ([\d.]+) s, (\d+) FPS overall")


def read_curve(exp_dir: Path) -> tuple[str, list[tuple[float, int, float]]]:
    """progress.csv as (the counter's name, [(time_s, count, mean reward)]) without rows that have no reward yet."""
    rows: list[tuple[float, int, float]] = []
    path = exp_dir / "progress.csv"
    if not path.exists():
        return "env_steps", rows
    with path.open() as f:
        reader = csv.DictReader(f)
        counter = next((k for k in ("env_frames", "env_steps") if k in (reader.fieldnames or [])), "env_steps")
        for r in reader:
            try:
                reward = float(r["reward_p0"])
                row = (float(r["time_s"]), int(float(r[counter])), reward)
            except (KeyError, TypeError, ValueError):
                continue  # a partly written row, or no episode yet ("nan" parses but is skipped below)
            if reward == reward:
                rows.append(row)
    return counter, rows


def lag_of(exp_dir: Path) -> dict[str, float | None]:
    """The policy lag of the run's report lines (sf_log.txt): the mean of their averages and the largest maximum."""
    avgs, maxes = [], []
    log = exp_dir / "sf_log.txt"
    if log.exists():
        for m in _LAG.finditer(log.read_text(errors="replace")):
            avgs.append(float(m.group(2)))
            maxes.append(int(m.group(3)))
    return {
        "policy_lag_avg": round(statistics.fmean(avgs), 1) if avgs else None,
        "policy_lag_max": max(maxes) if maxes else None,
    }


def frameskip_of(exp_dir: Path) -> int:
    """Env frames per agent step of the run (its counter counts frames where the env skips them)."""
    try:
        cfg = json.loads((exp_dir / "cfg.json").read_text())
    except (OSError, ValueError):
        return 1
    return int(cfg.get("env_frameskip") or 1)


def analyze(exp_dir: Path, target: float, seed: int | None = None, wall: float | None = None) -> dict:
    """One run's result: where its curve first reaches `target`, its end, its speed and lag."""
    counter, curve = read_curve(exp_dir)
    skip = frameskip_of(exp_dir) if counter == "env_frames" else 1  # frames -> agent steps
    hit = next((row for row in curve if row[2] >= target), None)
    end = curve[-1] if curve else None
    log = (exp_dir / "sf_log.txt").read_text(errors="replace") if (exp_dir / "sf_log.txt").exists() else ""
    done = _DONE.search(log)
    return {
        "run": str(exp_dir),
        "seed": seed,
        "target": target,
        "reached": hit is not None,
        "frames_to_target": hit[1] if hit and counter == "env_frames" else None,
        "agent_steps_to_target": (hit[1] // skip) if hit else None,
        "train_seconds_to_target": round(hit[0], 1) if hit else None,
        "unit": counter,
        "count_at_end": end[1] if end else None,
        "mean_reward_at_end": end[2] if end else None,
        "best_mean_reward": max(r[2] for r in curve) if curve else None,
        "per_s_overall": int(done.group(3)) if done else None,
        "wall_seconds": wall,
        **lag_of(exp_dir),
    }


def run_seed(env: str, seed: int, target: float, max_frames: float, extra: list[str], out_dir: Path) -> dict:
    name = f"seed{seed}"
    cmd = [sys.executable, str(REPO / "train.py"), f"--env={env}", f"--seed={seed}", f"--stop_at_reward={target}"]
    cmd += [f"--train_for_env_steps={int(max_frames)}", f"--train_dir={out_dir}", f"--experiment={name}", *extra]
    env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    t0 = time.monotonic()
    with (out_dir / f"{name}.log").open("w") as log:
        rc = subprocess.call(cmd, cwd=REPO, env=env_vars, stdout=log, stderr=subprocess.STDOUT)
    result = analyze(out_dir / name, target, seed, round(time.monotonic() - t0, 1))
    return {**result, "rc": rc, "command": "python train.py " + " ".join(cmd[2:])}


def summary(results: list[dict], cap: float | None) -> dict:
    key = "frames_to_target" if any(r["unit"] == "env_frames" for r in results) else "agent_steps_to_target"
    hits = sorted(r[key] for r in results if r["reached"])
    lags = [r["policy_lag_avg"] for r in results if r["policy_lag_avg"] is not None]
    return {
        "metric": key,
        "seeds": len(results),
        "reached": len(hits),
        "fraction_reached": round(len(hits) / len(results), 3) if results else 0.0,
        "cap": cap,
        "median": statistics.median(hits) if hits else None,
        "min": hits[0] if hits else None,
        "max": hits[-1] if hits else None,
        "missed_seeds": [r["seed"] if r["seed"] is not None else r["run"] for r in results if not r["reached"]],
        "policy_lag_avg": round(statistics.fmean(lags), 1) if lags else None,
    }


def markdown(results: list[dict], s: dict) -> str:
    lines = [
        "| seed | reached | frames to target | agent steps | train s | end count | mean reward at end | "
        "lag avg / max | per s overall |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['seed'] if r['seed'] is not None else r['run']} | {'yes' if r['reached'] else 'no'} | "
            f"{r['frames_to_target'] or '-'} | {r['agent_steps_to_target'] or '-'} | "
            f"{r['train_seconds_to_target'] or '-'} | {r['count_at_end']} | {r['mean_reward_at_end']} | "
            f"{r['policy_lag_avg']} / {r['policy_lag_max']} | {r['per_s_overall'] or '-'} |"
        )
    lines.append("")
    lines.append(
        f"{s['reached']}/{s['seeds']} reached the target; {s['metric']}: median {s['median']}, min {s['min']}, "
        f"max {s['max']}; missed: {s['missed_seeds'] or 'none'}"
    )
    return "\n".join(lines)


def lag_note(s: dict, reference_lag: float | None) -> str:
    here = s["policy_lag_avg"]
    if reference_lag is None:
        return (
            f"policy lag here averaged {here} SGD steps; the GPU box's lag with this setup is not given "
            "(--reference_lag): compare curves per frame only where the lags are of one order"
        )
    ratio = here / reference_lag if here and reference_lag else None
    verdict = "comparable" if ratio is not None and 0.5 <= ratio <= 2 else "not comparable: bound it (--max_policy_lag)"
    return f"policy lag here averaged {here} SGD steps against {reference_lag} on the GPU box ({verdict})"


def write_curves(results: list[dict], out_dir: Path) -> None:
    """DIR/curves.csv (run, count, mean reward; every row of every run) and, with matplotlib, DIR/curves.png."""
    curves = {
        str(r["seed"] if r["seed"] is not None else Path(r["run"]).name): read_curve(Path(r["run"])) for r in results
    }
    with (out_dir / "curves.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "count", "mean_reward"])
        for name, (_, rows) in curves.items():
            w.writerows((name, c, round(rew, 3)) for _, c, rew in rows)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (_counter, rows) in curves.items():
        ax.plot([c for _, c, _ in rows], [rew for _, _, rew in rows], label=name, linewidth=1)
    if results:
        ax.axhline(results[0]["target"], color="gray", linestyle="--", linewidth=0.8)
        ax.set_xlabel(next(iter(curves.values()))[0].replace("_", " "))
    ax.set_ylabel("mean reward (last 100 episodes)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "curves.png", dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="atari_pong")
    p.add_argument("--target", type=float, default=18.0, help="Mean reward of the last 100 episodes to reach.")
    p.add_argument("--seeds", type=int, default=5, help="Seeds 0..N-1.")
    p.add_argument("--first_seed", type=int, default=0)
    p.add_argument("--max_frames", type=float, default=8e6, help="Cap of each run, in the run's counter's unit.")
    p.add_argument("--parallel", type=int, default=1, help="Seeds run at once (frames do not depend on it).")
    p.add_argument("--out_dir", type=Path, default=None, help="Where runs, curves and the summary go.")
    p.add_argument("--reference_lag", type=float, default=None, help="The GPU box's policy lag with this setup.")
    p.add_argument("--analyze", type=Path, nargs="+", default=None, help="Read these experiment folders instead.")
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if args.analyze:
        results = [analyze(d, args.target) for d in args.analyze]
        out_dir = args.out_dir or args.analyze[0].parent
    else:
        out_dir = args.out_dir or REPO / "train_dir" / f"frames_to_score_{time.strftime('%Y%m%d_%H%M%S')}"
        out_dir.mkdir(parents=True, exist_ok=True)
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
            results = list(
                pool.map(lambda s: run_seed(args.env, s, args.target, args.max_frames, extra, out_dir), seeds)
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    for r in results:
        print(json.dumps(r), flush=True)
    s = summary(results, None if args.analyze else args.max_frames)
    print(markdown(results, s))
    print(lag_note(s, args.reference_lag))
    write_curves(results, out_dir)
    print(f"curves: {out_dir / 'curves.png'}, {out_dir / 'curves.csv'}")
    print(json.dumps({"frames_to_score": s, "runs": [{k: r[k] for k in ("seed", "run", "reached")} for r in results]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
