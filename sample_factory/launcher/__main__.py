"""`python -m sample_factory.launcher --run=SWEEP --backend=processes|ray|slurm [--dry_run]`: run every experiment
of a sweep (sweep.py) as an ordinary train.py command writing <train_dir>/<experiment>/ (<train_dir>: by default
./train_dir/<run name>, so a sweep's runs stay out of the folder of single runs), skip the ones that
finished before, and end with a summary table (also <train_dir>/sweep_<run>/summary.json). Each run's output goes
to <train_dir>/sweep_<run>/logs/<experiment>.log. Exit code: 0 when every experiment finished, 1 when one failed
or was interrupted (it exited 130/143: stopped by a signal the launcher did not send; a rerun resumes it), 130
when stopped by Ctrl+C / SIGTERM, 2 for a bad sweep or flags (nothing started)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from sample_factory.experiment.folder import DEFAULT_TRAIN_DIR
from sample_factory.launcher.jobs import (
    FINISHED,
    MARKER_NAME,
    SKIPPED,
    GpuSlots,
    Job,
    LauncherError,
    Result,
    StopRequest,
    cpus_for,
    finished_before,
    format_seconds,
    gpu_fraction,
    write_marker,
)
from sample_factory.launcher.summary import format_table, summary_rows, write_summary
from sample_factory.launcher.sweep import SweepError, expand, load_run

BACKENDS = ("processes", "ray", "slurm")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sample_factory.launcher",
        description="Run a sweep of train.py experiments locally, on a Ray cluster or on Slurm.",
        allow_abbrev=False,
    )
    p.add_argument("--run", required=True, help="the sweep: a YAML file, a .py file or a module defining RUN")
    p.add_argument("--backend", choices=BACKENDS, default="processes")
    p.add_argument(
        "--train_dir",
        default=None,
        help=f"the --train_dir of every experiment (default: {DEFAULT_TRAIN_DIR}/<run name>: the sweep's own folder)",
    )
    p.add_argument("--max_parallel", type=int, default=2, help="experiments running at once (0: no limit)")
    p.add_argument("--num_gpus", type=int, default=0, help="GPUs to use (0: none)")
    p.add_argument("--experiments_per_gpu", type=int, default=1, help="experiments sharing one GPU")
    p.add_argument(
        "--cpus_per_experiment",
        type=int,
        default=0,
        help="CPUs reserved per experiment on ray/slurm (0: the command's --num_workers + 1)",
    )
    p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing, write nothing")
    p.add_argument("--python", default=sys.executable, help="interpreter that replaces a leading 'python' in commands")
    p.add_argument(
        "--stop_timeout", type=float, default=60.0, help="seconds runs get to save and exit after Ctrl+C before a kill"
    )
    g = p.add_argument_group("ray")
    g.add_argument(
        "--ray_address",
        default=None,
        help="an existing cluster (host:port, or 'auto' for the one this machine joined); default: a local one",
    )
    g.add_argument("--ray_num_cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: all)")
    g = p.add_argument_group("slurm")
    g.add_argument("--slurm_partition", default="", help="sbatch --partition (default: the cluster's)")
    g.add_argument("--slurm_time", default="", help="sbatch --time, e.g. 2:00:00 (default: the partition's)")
    g.add_argument("--slurm_gpus_per_job", type=int, default=None, help="sbatch --gpus (default: 1 with --num_gpus)")
    g.add_argument("--slurm_template", default=None, help="sbatch script template (default: slurm_template.sbatch)")
    g.add_argument("--slurm_sbatch_args", default="", help="extra sbatch arguments, e.g. '--account=X --qos=Y'")
    g.add_argument("--slurm_poll_s", type=float, default=5.0, help="seconds between squeue polls")
    return p


def make_jobs(args: argparse.Namespace) -> tuple[str, Path, list[Job]]:
    run = load_run(args.run)
    # absolute: a job may start in another folder or on another node
    train_dir = Path(args.train_dir or Path(DEFAULT_TRAIN_DIR) / run.name).resolve()
    args.train_dir = str(train_dir)
    try:
        commands = expand(run, train_dir, python=args.python)
    except SweepError as e:
        raise SweepError(f"{args.run}: {e}") from None
    sweep_dir = train_dir / f"sweep_{run.name}"
    share = gpu_fraction(args.num_gpus, args.experiments_per_gpu)
    env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
    jobs = [
        Job(
            name=c.name,
            argv=c.argv,
            cwd=os.getcwd(),
            exp_dir=train_dir / c.name,
            log_path=sweep_dir / "logs" / f"{c.name}.log",
            num_cpus=cpus_for(c.argv, args.cpus_per_experiment),
            num_gpus=share,
            env=dict(env),
        )
        for c in commands
    ]
    for job in jobs:
        script = job.argv[1] if len(job.argv) > 1 else ""
        if script.endswith(".py") and not (Path(job.cwd) / script).exists():
            raise LauncherError(f"{job.name}: {script} is not in {job.cwd}: start the launcher where the commands run")
    return run.name, sweep_dir, jobs


def skipped_result(job: Job, marker: dict) -> Result:
    return Result(
        job.name,
        SKIPPED,
        exit_code=0,
        job_id=marker.get("job_id"),
        start=marker.get("start"),
        end=marker.get("end"),
        node=marker.get("node"),
        log_path=marker.get("log_path") or str(job.log_path),
    )


def dry_run(args: argparse.Namespace, run_name: str, sweep_dir: Path, jobs: Sequence[Job]) -> None:
    print(f"run {run_name}: {len(jobs)} experiments, backend {args.backend}, logs in {sweep_dir / 'logs'}")
    gpus = GpuSlots(args.num_gpus, args.experiments_per_gpu)
    for job in jobs:
        skip = finished_before(job) is not None
        prefix, reserves = "", ""
        if args.backend == "processes" and args.num_gpus > 0:
            gpu = gpus.acquire()  # the assignment if the first `capacity` experiments started together
            prefix = f"CUDA_VISIBLE_DEVICES={gpu} " if gpu is not None else "(waits for a GPU) "
        elif args.backend != "processes":
            reserves = f" ({job.num_cpus} CPUs" + (f", {job.num_gpus:g} GPU" if job.num_gpus else "") + ")"
        status = "skip (finished before)" if skip else "run"
        print(f"{status}: {job.name}{reserves}\n  cd {shlex.quote(job.cwd)} && {prefix}{shlex.join(job.argv)}")


def run_backend(args: argparse.Namespace, jobs: list[Job], sweep_dir: Path, stop: StopRequest) -> list[Result]:
    def on_result(job: Job, result: Result) -> None:
        if result.status == FINISHED:
            try:
                write_marker(job, result, args.backend)
            except OSError as e:  # the run is done; without its marker a rerun only resumes it once more
                result.error = f"cannot write {job.exp_dir / MARKER_NAME}: {e.strerror}"
        where = f" on {result.node}" if result.node else ""
        print(
            f"[launcher] {job.name}: {result.status} (exit {result.exit_code}, "
            f"{format_seconds(result.wall_s)} s{where})" + (f": {result.error}" if result.error else ""),
            flush=True,
        )

    if not jobs:
        return []
    if args.backend == "processes":
        from sample_factory.launcher.processes import run_processes

        gpus = GpuSlots(args.num_gpus, args.experiments_per_gpu)
        return run_processes(jobs, args.max_parallel, gpus, stop, args.stop_timeout, on_result)
    if args.backend == "ray":
        from sample_factory.launcher.ray_backend import run_ray

        return run_ray(
            jobs,
            args.max_parallel,
            stop,
            args.stop_timeout,
            on_result,
            args.ray_address,
            args.ray_num_cpus,
            args.num_gpus,
        )
    from sample_factory.launcher.slurm import SlurmOptions, run_slurm

    gpus_per_job = args.slurm_gpus_per_job if args.slurm_gpus_per_job is not None else (1 if args.num_gpus else 0)
    opts = SlurmOptions(
        partition=args.slurm_partition,
        time=args.slurm_time,
        gpus_per_job=gpus_per_job,
        template=args.slurm_template,
        sbatch_args=shlex.split(args.slurm_sbatch_args),
        poll_s=args.slurm_poll_s,
    )
    return run_slurm(jobs, args.max_parallel, stop, on_result, sweep_dir, opts)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run_name, sweep_dir, jobs = make_jobs(args)
    except (SweepError, LauncherError) as e:
        print(f"launcher: error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        dry_run(args, run_name, sweep_dir, jobs)
        return 0
    skipped: dict[str, Result] = {}
    for job in jobs:
        marker = finished_before(job)
        if marker is not None:
            skipped[job.name] = skipped_result(job, marker)
    todo = [j for j in jobs if j.name not in skipped]
    print(
        f"[launcher] run {run_name}: {len(jobs)} experiments ({len(skipped)} finished before, {len(todo)} to run), "
        f"backend {args.backend}, train_dir {args.train_dir}",
        flush=True,
    )
    stop = StopRequest()
    stop.install()
    started = time.monotonic()
    try:
        results = {r.name: r for r in run_backend(args, todo, sweep_dir, stop)}
    except LauncherError as e:
        print(f"launcher: error: {e}", file=sys.stderr)
        return 2
    finally:
        stop.restore()
    results.update(skipped)
    rows = summary_rows(jobs, [results[j.name] for j in jobs])
    path = write_summary(sweep_dir, run_name, args.backend, rows)
    print(f"\n{format_table(rows)}\nlauncher wall time {time.monotonic() - started:.1f} s; summary: {path}", flush=True)
    if stop.requested:
        return 130
    return 0 if all(r["status"] in (FINISHED, SKIPPED) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
