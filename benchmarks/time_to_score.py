"""Wall time from launch to a score: `python -m benchmarks.time_to_score --tasks=pong[,breakout,...]
[--seeds=1] [--max_seconds=300] [--output=FILE.md] [--progress_dir=DIR] [-- extra train.py flags]`.

Each task is the default command a user types (`python train.py --env=ENV`, the env's preset, the machine's
defaults: every core a worker, the GPU where there is one) plus `--stop_at_reward=TARGET` (the run stops once the
mean of the last --stats_avg = 100 episodes reaches the target) and `--train_for_seconds=--max_seconds` as a cap.
The time is measured from the process's launch (imports and start-up included) to the line that says the target was
reached; env frames there (Atari and VizDoom count frames: agent steps x 4) come from the run's progress.csv.
A run that misses the target within its cap is reported as missed with its last mean reward. --progress_dir keeps
each run's progress.csv (its learning curve) as DIR/TASK_seedN_progress.csv; the run's own folder is temporary.

Targets: Pong +18 (the learning suite's, issue #11), Breakout 200, VizDoom basic 75 and defend_the_center 10 kills
(set here, below the returns of docs/results.md's longer runs), Ape-X DQN on Pong +18 (`--algo=DQN`). The last
line printed is one JSON object."""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from sample_factory.tools.timed_run import DONE as _DONE
from sample_factory.tools.timed_run import FPS10 as _FPS10

REPO = Path(__file__).resolve().parents[1]
TASKS: dict[str, tuple[str, float, list[str]]] = {  # name: (env, target mean reward, extra flags)
    "pong": ("atari_pong", 18.0, []),
    "breakout": ("atari_breakout", 200.0, []),
    "doom_basic": ("doom_basic", 75.0, []),
    "doom_defend_the_center": ("doom_defend_the_center", 10.0, []),
    "pong_dqn": ("atari_pong", 18.0, ["--algo=DQN"]),
    "cartpole": ("CartPole-v1", 475.0, []),  # seconds on any machine: the tool's own test
}
REACHED = "mean reward reached"


def run_task(name: str, seed: int, max_seconds: float, extra: list[str], progress_dir: Path | None = None) -> dict:
    env, target, flags = TASKS[name]
    with tempfile.TemporaryDirectory() as td:
        cmd = [sys.executable, str(REPO / "train.py"), f"--env={env}", *flags, f"--seed={seed}"]
        cmd += [f"--stop_at_reward={target}", f"--train_for_seconds={max_seconds}", f"--train_dir={td}"]
        cmd += ["--experiment=tts", *extra]
        env_vars = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        reached_at: list[float] = []
        tail: list[str] = []
        speed: dict[str, float] = {}

        def read() -> None:
            for line in proc.stdout:
                if REACHED in line and not reached_at:
                    reached_at.append(time.monotonic() - t0)
                if m := _DONE.search(line):
                    speed["per_s_overall"] = float(m.group(4))
                if m := _FPS10.search(line):
                    speed["per_s_10s"] = float(m.group(1))
                tail.append(line.rstrip())
                del tail[:-20]

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=max_seconds + 300)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        reader.join(timeout=10)
        total = time.monotonic() - t0
        progress = Path(td) / "tts" / "progress.csv"
        rows = read_progress(progress)
        if progress_dir is not None and progress.exists():
            progress_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(progress, progress_dir / f"{name}_seed{seed}_progress.csv")
    last = rows[-1] if rows else {}
    counter = next((k for k in ("env_frames", "env_steps") if k in last), None)
    reward = _float(last.get("reward_p0"))
    result = {
        "task": name,
        "env": env,
        "target": target,
        "seed": seed,
        "command": "python train.py " + " ".join(cmd[2:]),
        "rc": rc,
        "reached": bool(reached_at),
        "seconds_from_launch": round(reached_at[0], 1) if reached_at else None,
        "wall_seconds": round(total, 1),
        "last_mean_reward": reward,
        "unit": counter,
        "count_at_end": int(float(last[counter])) if counter else None,
        "per_s_overall": speed.get("per_s_overall"),  # the run's unit (frames on Atari) per second, whole run
        "per_s_10s": speed.get("per_s_10s"),  # ... in the last 10 s window printed
        "tail": tail[-5:],
    }
    return result


def read_progress(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def _float(x: str | None) -> float | None:
    try:
        return float(x) if x not in (None, "") else None
    except ValueError:
        return None


def markdown(results: list[dict], machine: str) -> str:
    lines = [
        f"Time to a score from launch ({machine}; {time.strftime('%Y-%m-%d')}):",
        "",
        "| task | target | seed | time from launch | mean reward at the end | count at the end | command |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        when = f"{r['seconds_from_launch']} s" if r["reached"] else f"missed (cap {r['wall_seconds']} s)"
        count = f"{r['count_at_end']:,} {r['unit'].replace('_', ' ')}" if r["count_at_end"] is not None else "-"
        lines.append(
            f"| {r['task']} | {r['target']} | {r['seed']} | {when} | {r['last_mean_reward']} | {count} | "
            f"`{r['command']}` |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="pong", help=f"Comma-separated, of: {', '.join(TASKS)}.")
    p.add_argument("--seeds", type=int, default=1, help="Runs per task, seeds 0..N-1.")
    p.add_argument("--max_seconds", type=float, default=300.0, help="Cap of each run (--train_for_seconds).")
    p.add_argument("--output", type=Path, default=None, help="Also write the markdown table here.")
    p.add_argument("--progress_dir", type=Path, default=None, help="Keep each run's progress.csv in this folder.")
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    tasks = [t for t in args.tasks.split(",") if t]
    if unknown := [t for t in tasks if t not in TASKS]:
        p.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    from benchmarks.benchmark_gpu import machine

    results = []
    for task in tasks:
        for seed in range(args.seeds):
            r = run_task(task, seed, args.max_seconds, extra, args.progress_dir)
            results.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "tail"}), flush=True)
            if r["rc"] not in (0, None) and not r["reached"]:
                print("\n".join(r["tail"]), flush=True)
    table = markdown(results, machine())
    print(table)
    if args.output:
        args.output.write_text(table + "\n")
    print(json.dumps({"time_to_score": [{k: v for k, v in r.items() if k != "tail"} for r in results]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
