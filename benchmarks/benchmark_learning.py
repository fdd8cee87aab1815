"""Learning benchmark: `python -m benchmarks.benchmark_learning --suite=classic [--budget=ci|short|full]`.

Trains every env of a suite (table in benchmarks/learning_suites.py) for several seeds, each run an ordinary
`python -m sample_factory.train` subprocess with its own experiment folder `<train_dir>/<suite>_<env>_s<seed>`
(its output goes to `benchmark.log` there), and reads the run's progress.csv into a curve of
(env steps, wall seconds, mean reward). Every finished run is recorded in `<output>/<suite>.json.gz` (gzipped
JSON, rewritten atomically after each run; a `<suite>.json` of an older version is read when there is no .gz), so
an interrupted suite resumes: rerunning the same command skips recorded runs and relaunches the others, and
train.py resumes their checkpoints. `--parallel=N` trains N runs at once (each recorded as it ends).
`<output>/<suite>.md` (tables, command, machine) and `<output>/<suite>_<env>.png` (curves) are regenerated from
the json after every run, or by `--plot_only` (benchmarks/learning_report.py).

Wall seconds are progress.csv's `time_s` (from the start of the worker processes, interpreter start and imports
excluded), summed over the sessions of a resumed run. Final reward: mean of the last FINAL_POINTS progress rows,
each the mean return of the last 100 episodes (`--stats_avg`).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import gzip
import io
import json
import math
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.learning_report import FINAL_POINTS, file_safe, write_report
from benchmarks.learning_suites import LEVELS, REPORT_INTERVAL_SEC, SUITES, SuiteEnv, suite_envs
from sample_factory.config.machine import usable_cores
from sample_factory.config.parse import env_and_algo
from sample_factory.evaluation.periodic_eval import parse_eval_result_name

REPO_ROOT = Path(__file__).resolve().parents[1]
LOG_NAME = "benchmark.log"
MARKER_NAME = "benchmark_learning.json"  # in each experiment folder: the budget it was started with
POLL_S = 0.5  # how often the runs in flight are checked for an exit
_DONE = re.compile(r"done: (\d+) env (?:steps|frames) in ([\d.]+) s")
_STOPPING = re.compile(r"stopping: (.+)")

Point = tuple[int, float, float]  # (env steps, wall seconds, mean reward)


# ---- curves ------------------------------------------------------------------------------------------------
def parse_progress_csv(text: str) -> list[Point]:
    """Rows of a progress.csv as (env steps, wall seconds, reward_p0); the reward is nan before the first finished
    episode. A resumed run appends a new session whose clock restarts at 0: its times are shifted to continue
    after the previous session's last row. Its first rows may count env steps from 0 (the checkpoint's steps are
    added once the learner has loaded it): those get the previous session's last env steps added, an estimate
    within one rollout of the checkpoint's. Torn or malformed rows (a writer killed mid-line) are skipped."""
    rows: list[Point] = []
    t_offset, last_t, prev_steps = 0.0, None, 0
    for row in csv.DictReader(io.StringIO(text)):
        try:
            counter = row["env_steps"] if "env_steps" in row else row["env_frames"]
            t, steps, reward = float(row["time_s"]), int(float(counter)), float(row["reward_p0"])
        except (KeyError, TypeError, ValueError):
            continue
        if last_t is not None and t < last_t:  # a new session
            t_offset += last_t
            prev_steps = rows[-1][0]
        last_t = t
        if steps < prev_steps:
            steps += prev_steps
        rows.append((steps, round(t_offset + t, 3), reward))
    return rows


def summarize_curve(rows: Sequence[Point], threshold: float | None, final_points: int = FINAL_POINTS) -> dict:
    """Final reward (mean of the last `final_points` finite rewards), best reward, the env steps and wall seconds
    of the last row, and of the first row whose reward is >= threshold (None when never reached or no threshold)."""
    curve = [p for p in rows if math.isfinite(p[2])]
    hit = next((p for p in curve if p[2] >= threshold), None) if threshold is not None else None
    tail = [p[2] for p in curve[-final_points:]]
    return {
        "curve": [list(p) for p in curve],
        "final_reward": statistics.fmean(tail) if tail else None,
        "best_reward": max(p[2] for p in curve) if curve else None,
        "env_steps": rows[-1][0] if rows else 0,
        "wall_s": rows[-1][1] if rows else 0.0,
        "reached": hit is not None,
        "env_steps_to_threshold": hit[0] if hit else None,
        "wall_s_to_threshold": hit[1] if hit else None,
    }


def parse_log(text: str) -> dict:
    """Overall FPS over every session in the log (sum of collected env steps / sum of seconds of the `done:`
    lines) and the last stop reason."""
    done = [(int(m.group(1)), float(m.group(2))) for m in _DONE.finditer(text)]
    seconds = sum(s for _, s in done)
    stops = _STOPPING.findall(text)
    return {
        "fps": sum(n for n, _ in done) / seconds if seconds > 0 else None,
        "stop_reason": stops[-1] if stops else None,
    }


# ---- runs --------------------------------------------------------------------------------------------------
def experiment_name(suite: str, env: str, seed: int, extra: str = "") -> str:
    """The run's folder; an --algo other than APPO among the passthrough flags names it too, so that a DQN run of a
    suite never resumes the APPO run's checkpoint in a shared --train_dir."""
    algo = env_and_algo(shlex.split(extra))[1]
    tag = "" if algo == "APPO" else f"_{algo.lower()}"
    return f"{suite}_{file_safe(env)}{tag}_s{seed}"


def run_key(env: str, seed: int) -> str:
    return f"{env}/s{seed}"


def train_command(spec: SuiteEnv, seed: int, level: str, args: argparse.Namespace) -> list[str]:
    """The train.py command of one (env, seed): the env's flags, the budget, and the user's passthrough flags."""
    b = spec.budget(level)
    cmd = [sys.executable, "-m", "sample_factory.train", f"--env={spec.env}"]
    cmd += [f"--experiment={experiment_name(args.suite, spec.env, seed, args.extra)}", f"--train_dir={args.train_dir}"]
    cmd += [f"--seed={seed}", f"--train_for_env_steps={b.env_steps}", f"--train_for_seconds={b.seconds}"]
    # Budgets, thresholds and references here count agent steps (CleanRL's unit), also on Atari and VizDoom.
    cmd += ["--summaries_use_frameskip=False"]
    cmd += [f"--report_interval_sec={REPORT_INTERVAL_SEC[level]}"]
    if args.num_workers is not None:
        cmd.append(f"--num_workers={args.num_workers}")
    if args.device is not None:
        cmd.append(f"--device={args.device}")
    if args.stop_when_solved and spec.threshold is not None:
        cmd.append(f"--stop_at_reward={spec.threshold}")
    return cmd + list(spec.extra_flags) + shlex.split(args.extra)


def _terminate_on_sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # same path as Ctrl+C: stop the children cleanly, record nothing


def launch(cmd: list[str], log_path: Path) -> subprocess.Popen:
    """Start `cmd` from the repository root with stdout+stderr appended to `log_path`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    with open(log_path, "a") as log:
        log.write(f"# {datetime.datetime.now().isoformat(timespec='seconds')} {shlex.join(cmd)}\n")
        log.flush()
        return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop_runs(procs: Sequence[subprocess.Popen]) -> None:
    """On Ctrl+C / SIGTERM: every child gets SIGINT (a normal shutdown that saves a checkpoint) and is waited for;
    a second interrupt kills them."""
    try:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        for proc in procs:
            proc.wait()
    except KeyboardInterrupt:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


@dataclasses.dataclass
class Run:
    """One (env, seed) being trained."""

    spec: SuiteEnv
    seed: int
    exp_dir: Path
    cmd: list[str]
    proc: subprocess.Popen
    t0: float  # time.monotonic() at launch


def start_run(spec: SuiteEnv, seed: int, level: str, args: argparse.Namespace) -> Run:
    """Launch train.py for one (env, seed) in its experiment folder."""
    exp_dir = Path(args.train_dir) / experiment_name(args.suite, spec.env, seed, args.extra)
    exp_dir.mkdir(parents=True, exist_ok=True)
    (exp_dir / MARKER_NAME).write_text(json.dumps({"suite": args.suite, "budget": level, **vars(spec.budget(level))}))
    cmd = train_command(spec, seed, level, args)
    t0 = time.monotonic()
    return Run(spec, seed, exp_dir, cmd, launch(cmd, exp_dir / LOG_NAME), t0)


def read_evaluations(exp_dir: Path) -> list[list[float]]:
    """The run's periodic evaluations of policy 0 (train.py --eval_every_env_steps, its eval/ folder):
    [[env steps, mean return, episodes]] in env-step order."""
    evals = []
    for path in (exp_dir / "eval").glob("*.json"):
        parsed = parse_eval_result_name(path.name)
        if parsed is None or parsed[1] != 0:
            continue
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # an evaluation cut off while writing: it has no result
        if result.get("episodes"):
            evals.append([parsed[0], float(result["reward_mean"]), int(result["episodes"])])
    return sorted(evals)


def finish_run(run: Run, level: str) -> dict:
    """The record of a run whose process has exited."""
    spec, exp_dir, rc = run.spec, run.exp_dir, run.proc.returncode
    b = spec.budget(level)
    log_path = exp_dir / LOG_NAME
    csv_path = exp_dir / "progress.csv"
    rows = parse_progress_csv(csv_path.read_text()) if csv_path.exists() else []
    logged = parse_log(log_path.read_text(errors="replace"))
    summary = summarize_curve(rows, spec.threshold)
    fps = logged["fps"] or (summary["env_steps"] / summary["wall_s"] if summary["wall_s"] else None)
    stop = logged["stop_reason"] or ""
    return {
        "env": spec.env,
        "seed": run.seed,
        "experiment": str(exp_dir),
        "log": str(log_path),
        "command": shlex.join(run.cmd),
        "rc": rc,
        "stop_reason": stop,
        "complete": rc == 0 and "received" not in stop,  # a signal stop (someone interrupted it) is unfinished
        "budget": level,
        "budget_env_steps": b.env_steps,
        "budget_seconds": b.seconds,
        "threshold": spec.threshold,
        "launch_wall_s": time.monotonic() - run.t0,
        "fps": fps,
        "finished_at": datetime.datetime.now().isoformat(timespec="seconds"),
        "evals": read_evaluations(exp_dir),
        **summary,
    }


def describe_run(r: dict) -> str:
    """One line per finished run."""
    head = f"{r['env']} seed {r['seed']}: exit {r['rc']}"
    if r["final_reward"] is None:
        return f"{head}, no finished episode ({r['stop_reason'] or 'no stop line'}); log {r['log']}"
    if r["threshold"] is None:
        reach = "no threshold"
    elif r["reached"]:
        reach = (
            f"reached {r['threshold']:g} after {r['env_steps_to_threshold']:,} env steps / "
            f"{r['wall_s_to_threshold'] / 60:.1f} min"
        )
    else:
        reach = f"{r['threshold']:g} not reached"
    fps = f"{r['fps']:,.0f} FPS" if r["fps"] else "FPS n/a"
    return (
        f"{head}, final reward {r['final_reward']:.1f} (best {r['best_reward']:.1f}), {reach}, "
        f"{r['env_steps']:,} env steps in {r['wall_s'] / 60:.1f} min, {fps}; log {r['log']}"
    )


# ---- the results file --------------------------------------------------------------------------------------
def results_path(output: str | Path, suite: str) -> Path:
    """Where a suite's record lives: `<suite>.json.gz`."""
    return Path(output) / f"{suite}.json.gz"


def load_doc(path: Path) -> dict:
    """The record at `path` (gzipped JSON), or at the same name without .gz (plain JSON, as older versions wrote)."""
    if path.exists():
        return json.loads(gzip.decompress(path.read_bytes()))
    plain = path.with_suffix("") if path.suffix == ".gz" else path
    return json.loads(plain.read_text()) if plain.exists() else {}


def save_doc(doc: dict, path: Path) -> None:
    """Write the record atomically (gzipped, compact JSON): a run killed mid-write never leaves a truncated file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0))
    os.replace(tmp, path)


def env_table_entry(spec: SuiteEnv, level: str, extra: str = "") -> dict:
    """The env's settings for the report; `extra`: the user's --extra flags (they may override the budget)."""
    return {
        "threshold": spec.threshold,
        "threshold_source": spec.threshold_source,
        "budget": vars(spec.budget(level)),
        "budget_source": spec.budget_source,
        "extra_flags": list(spec.extra_flags),
        "passthrough_flags": shlex.split(extra),
        "references": [vars(r) for r in spec.references],
    }


def machine_info() -> dict[str, Any]:
    """CPU model and count, RAM, GPU and library versions, for the report."""
    import gymnasium
    import psutil
    import torch

    cpu = platform.processor()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = None
    if torch.cuda.is_available():
        gpu = f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    usable = usable_cores()
    return {
        "cpu": cpu or "unknown",
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu": gpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gymnasium.__version__,
    }


def check_budget(doc: dict, args: argparse.Namespace, planned: list[tuple[SuiteEnv, int]]) -> str | None:
    """An error message when results or experiment folders of another budget level would be mixed in."""
    if doc.get("runs") and doc.get("budget") != args.budget:
        return (
            f"{results_path(args.output, args.suite)} holds runs of budget {doc.get('budget')!r}, not {args.budget!r}: "
            f"use another --output (and --train_dir), or delete it"
        )
    for spec, seed in planned:
        marker = Path(args.train_dir) / experiment_name(args.suite, spec.env, seed, args.extra) / MARKER_NAME
        if marker.exists() and json.loads(marker.read_text()).get("budget") != args.budget:
            return f"{marker.parent} was started with another budget level: use another --train_dir, or delete it"
    return None


# ---- command line ------------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.benchmark_learning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--suite", required=True, choices=list(SUITES), help="Which env family to train.")
    p.add_argument("--budget", default="short", choices=LEVELS, help="Budget level (default short).")
    p.add_argument("--seeds", type=int, default=None, help="Seeds per env (0..N-1); default: the level's.")
    p.add_argument("--envs", default="", help="Comma-separated subset of the suite's envs.")
    p.add_argument("--num_workers", type=int, default=None, help="Passed to train.py (default: its own, cores).")
    p.add_argument("--device", default=None, choices=["cpu", "gpu"], help="Passed to train.py (default: its own).")
    p.add_argument("--train_dir", default="train_dir/learning", help="Experiment folders.")
    p.add_argument("--output", default="benchmarks/results", help="Folder of <suite>.json.gz, <suite>.md, the PNGs.")
    p.add_argument("--extra", default="", help='More train.py flags for every run, e.g. --extra="--lr=1e-3".')
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="Runs trained at once (default 1); each still gets the cores --num_workers gives it.",
    )
    p.add_argument("--stop_when_solved", action="store_true", help="Pass --stop_at_reward=<threshold>.")
    p.add_argument("--dry_run", action="store_true", help="Print the commands, run nothing, write nothing.")
    p.add_argument("--plot_only", action="store_true", help="Regenerate the md and PNGs from the json.")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.parallel < 1:
        p.error(f"--parallel must be at least 1, not {args.parallel}")
    args.train_dir = str(Path(args.train_dir).resolve())  # train.py runs from the repository root
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    json_path = results_path(args.output, args.suite)
    doc = load_doc(json_path)
    if args.plot_only:
        if not doc:
            print(f"no results in {json_path}", file=sys.stderr)
            return 1
        for path in write_report(doc, Path(args.output)):
            print(f"wrote {path}")
        return 0
    try:
        envs = suite_envs(args.suite, [e for e in args.envs.split(",") if e])
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    planned = [(spec, seed) for spec in envs for seed in range(args.seeds or spec.budget(args.budget).seeds)]
    if error := check_budget(doc, args, planned):
        print(error, file=sys.stderr)
        return 2
    runs = doc.get("runs", {})
    todo = [(spec, seed) for spec, seed in planned if not runs.get(run_key(spec.env, seed), {}).get("complete")]
    for spec, seed in planned:
        if (spec, seed) not in todo:
            print(f"skip {spec.env} seed {seed}: recorded in {json_path}")
    if args.dry_run:
        for spec, seed in todo:
            print(shlex.join(train_command(spec, seed, args.budget, args)))
        return 0

    command = "python -m benchmarks.benchmark_learning " + shlex.join(argv)
    doc.update(suite=args.suite, budget=args.budget, machine=machine_info())
    doc["commands"] = [*[c for c in doc.get("commands", []) if c != command], command]
    doc.setdefault("envs", {}).update({spec.env: env_table_entry(spec, args.budget, args.extra) for spec in envs})
    doc.setdefault("runs", runs)
    ok = True
    old_handler = signal.signal(signal.SIGTERM, _terminate_on_sigterm)
    pending, running, started = list(todo), [], 0
    try:
        while pending or running:
            while pending and len(running) < args.parallel:
                spec, seed = pending.pop(0)
                started += 1
                print(f"run {started}/{len(todo)}: {spec.env} seed {seed} ...", flush=True)
                running.append(start_run(spec, seed, args.budget, args))
            done = [r for r in running if r.proc.poll() is not None]
            if not done:
                time.sleep(POLL_S)
            for run in done:
                running.remove(run)
                record = finish_run(run, args.budget)
                runs[run_key(run.spec.env, run.seed)] = record
                ok &= record["complete"]
                doc["updated"] = record["finished_at"]
                save_doc(doc, json_path)
                write_report(doc, Path(args.output))
                print(describe_run(record), flush=True)
    except KeyboardInterrupt:
        stop_runs([r.proc for r in running])
        print(f"interrupted: rerun the same command to resume ({json_path})", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, old_handler)
    if not todo:
        save_doc(doc, json_path)  # new machine info / command, same runs
    paths = write_report(doc, Path(args.output))
    print("\n".join(f"wrote {p}" for p in paths))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
