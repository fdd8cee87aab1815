"""What starting and ending a run costs: `python -m benchmarks.benchmark_startup [--rounds=4] [--cpus=0]`.

Runs the same short training run (`train.py --env=CartPole-v1 --train_for_env_steps=20000`, 2 workers) --rounds times
in each of these ways, interleaved so a noisy machine affects them alike:
- forked:  as train.py runs: the fork server is a copy of the launcher made once its imports are done
           (runtime/fork_server.py::fork_here), and the launcher freezes its objects before it exits (train.py::main);
- fresh:   multiprocessing's own fork server, a new interpreter that imports torch and the package again
           (SF_FORK_SERVER=fresh);
- exit_gc: forked, but the launcher's exit collects every object (gc.freeze patched out), as before 2026-11-28.
Prints each run's wall time and CPU seconds (every process of the run: the runner, fork server, components, resource
tracker) and the medians' ratios. CPU seconds need a cgroup-v1 cpuacct mount and root (/sys/fs/cgroup/cpuacct); wall
time alone otherwise. --cpus pins the runs to those cores (taskset), e.g. 0 for a machine with one core."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
# mode -> (environment, code run before `python -m sample_factory.train`)
MODES = {
    "forked": ({}, ""),
    "fresh": ({"SF_FORK_SERVER": "fresh"}, ""),
    "exit_gc": ({}, "import gc; gc.freeze = lambda: None"),
}
REPO = Path(__file__).resolve().parents[1]


def one_run(mode: str, train_dir: str, name: str, env_id: str, steps: int, cpus: str | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds or nan) of one run, measured until its last process has exited."""
    group = CPUACCT / f"sf_startup_{os.getpid()}_{name}" if os.access(CPUACCT, os.W_OK) else None
    env_vars, prelude = MODES[mode]
    if prelude:
        runner = f"{prelude}; import runpy; runpy.run_module('sample_factory.train', run_name='__main__')"
        cmd = [sys.executable, "-c", runner]
    else:
        cmd = [sys.executable, "-m", "sample_factory.train"]
    cmd += [f"--env={env_id}", f"--train_for_env_steps={steps}"]
    cmd += ["--num_workers=2", f"--train_dir={train_dir}", f"--experiment={name}"]
    if cpus is not None:
        cmd = ["taskset", "-c", cpus, *cmd]
    if group is not None:  # the shell joins the group before it becomes the run: every descendant is counted
        group.mkdir()
        cmd = ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *cmd]
    env = {k: v for k, v in os.environ.items() if k != "SF_FORK_SERVER"} | env_vars
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{mode} run failed (exit code {proc.returncode}):\n{proc.stdout[-2000:]}")
        if group is None:
            return time.monotonic() - start, float("nan")
        deadline = time.monotonic() + 30
        while (group / "cgroup.procs").read_text().strip():  # the fork server and resource tracker exit just after
            if time.monotonic() > deadline:
                raise SystemExit(f"{mode} run: processes still running 30 s after it exited: {group}/cgroup.procs")
            time.sleep(0.01)
        return time.monotonic() - start, int((group / "cpuacct.usage").read_text()) / 1e9
    finally:
        if group is not None and not (group / "cgroup.procs").read_text().strip():
            group.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4, help="runs per way of starting the fork server")
    parser.add_argument("--env", default="CartPole-v1", help="the env of the short runs")
    parser.add_argument("--steps", type=int, default=20000, help="--train_for_env_steps of each run")
    parser.add_argument("--cpus", default=None, help="taskset core list for the runs (e.g. 0); all cores if not given")
    args = parser.parse_args(argv)
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="sf_startup_") as train_dir:
        for r in range(args.rounds):
            for mode in MODES:
                wall, cpu = one_run(mode, train_dir, f"{mode}_{r}", args.env, args.steps, args.cpus)
                results[mode].append((wall, cpu))
                print(f"round {r} {mode:7s}: {wall:5.2f} s wall, {cpu:5.2f} CPU-s", flush=True)
    med = {m: (statistics.median(w for w, _ in rs), statistics.median(c for _, c in rs)) for m, rs in results.items()}
    for mode, (wall, cpu) in med.items():
        print(f"median {mode:7s}: {wall:5.2f} s wall, {cpu:5.2f} CPU-s")
    fw, fc = med["forked"]
    for other in ("fresh", "exit_gc"):
        ow, oc = med[other]
        print(f"forked / {other}: wall {fw / ow:.2f}x, CPU {fc / oc:.2f}x ({oc - fc:.2f} CPU-s less per run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
