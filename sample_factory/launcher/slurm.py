"""The `slurm` backend: one sbatch job per experiment, made from a template (slurm_template.sbatch, or yours with
--slurm_template), watched with squeue until it ends; its exit code comes from a file the job script writes, so
Slurm accounting (sacct) is not needed.

At most `max_parallel` jobs are in the queue at once (0: all), so the launcher stays until the sweep is done and
prints progress as the squeue counts change. The job ids are kept in <sweep>/slurm_jobs.json: a rerun of the same
sweep after the launcher was killed attaches to jobs still queued or running instead of submitting them again,
and collects those that ended meanwhile. Ctrl+C / SIGTERM to the launcher cancels its jobs (scancel: SIGTERM to
train.py, which saves and exits)."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sample_factory.launcher.jobs import (
    CANCELLED,
    FAILED,
    INTERRUPTED,
    NOT_STARTED,
    Job,
    LauncherError,
    OnResult,
    Result,
    StopRequest,
    run_status,
)

DEFAULT_TEMPLATE = Path(__file__).with_name("slurm_template.sbatch")
JOBS_FILE = "slurm_jobs.json"
PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
ACTIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"}
# Ended by Slurm before the command could record its exit code (a custom template without the trap, or a SIGKILL
# after KillWait): unfinished, as a run interrupted by a signal.
CUT_STATES = {"TIMEOUT", "PREEMPTED", "DEADLINE", "NODE_FAIL"}
EXIT_FILE_GRACE_S = 20.0  # a job has ended but its exit-code file is not visible yet (a shared folder's cache)


@dataclass
class SlurmOptions:
    partition: str = ""
    time: str = ""
    gpus_per_job: int = 0
    template: str | None = None
    sbatch_args: list[str] = field(default_factory=list)
    poll_s: float = 5.0


def render(template: str, values: dict[str, str]) -> str:
    """Fill {{name}} placeholders. On `#SBATCH` lines values go in as they are and a line with an empty value
    is dropped; in the script's body they are shell-quoted, except `command`, a whole command line already."""
    out = []
    for line in template.splitlines():
        names = PLACEHOLDER.findall(line)
        unknown = sorted(set(names) - set(values))
        if unknown:
            raise LauncherError(f"the sbatch template uses unknown placeholders {unknown}; known: {sorted(values)}")
        directive = line.lstrip().startswith("#SBATCH")
        if directive and any(values[n] == "" for n in names):
            continue

        out.append(PLACEHOLDER.sub(functools.partial(_fill, values, raw=directive), line))
    return "\n".join(out) + "\n"


def _fill(values: dict[str, str], match: re.Match[str], raw: bool) -> str:
    name = match.group(1)
    return values[name] if raw or name == "command" else shlex.quote(values[name])


def script_values(job: Job, opts: SlurmOptions, exit_file: Path) -> dict[str, str]:
    return {
        "job_name": job.name,
        "partition": opts.partition,
        "time": opts.time,
        "cpus": str(job.num_cpus),
        "gpus": str(opts.gpus_per_job) if opts.gpus_per_job > 0 else "",
        "log_path": str(job.log_path),
        "workdir": job.cwd,
        "python": job.argv[0],
        "command": shlex.join(job.argv),
        "exit_code_file": str(exit_file),
    }


def parse_exit_file(text: str) -> tuple[int, float | None, float | None, str | None]:
    """`rc start end host` as the default template writes it (a custom one may write only rc)."""
    parts = text.split()
    rc = int(parts[0])
    start = float(parts[1]) if len(parts) > 1 else None
    end = float(parts[2]) if len(parts) > 2 else None
    return rc, start, end, parts[3] if len(parts) > 3 else None


def squeue_states(job_ids: Sequence[str]) -> dict[str, tuple[str, str]] | None:
    """job id -> (state, nodes) for the jobs Slurm still knows (recently ended ones included); None when squeue
    failed (the controller unreachable): the caller tries again later."""
    if not job_ids:
        return {}
    cmd = ["squeue", "-h", "-t", "all", "-o", "%i|%T|%N", "-j", ",".join(job_ids)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        if "Invalid job id" in p.stderr:
            return {}  # none of them is known any more
        print(f"[launcher] squeue failed: {p.stderr.strip()}", flush=True)
        return None
    states = {}
    for line in p.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3:
            states[parts[0]] = (parts[1], parts[2])
    return states


# A rerun asks squeue which of the jobs it submitted before still run: tries, seconds between them.
ATTACH_TRIES, ATTACH_RETRY_S = 3, 10.0


class _Tracked:
    def __init__(self, job: Job, job_id: str, exit_file: Path, attached: bool = False):
        self.job, self.job_id, self.exit_file = job, job_id, exit_file
        self.result = Result(job.name, "pending", job_id=job_id, log_path=str(job.log_path))
        self.ended_at: float | None = None  # when squeue first showed it ended
        self.state = "PENDING"
        self.cancelled = False
        self.attached = attached


class SlurmRun:
    def __init__(self, sweep_dir: Path, opts: SlurmOptions, stop: StopRequest, on_result: OnResult):
        for tool in ("sbatch", "squeue", "scancel"):
            if shutil.which(tool) is None:
                raise LauncherError(f"the slurm backend needs {tool} on PATH (is this a Slurm login node?)")
        self.opts, self.stop, self.on_result = opts, stop, on_result
        self.template = Path(opts.template or DEFAULT_TEMPLATE).read_text()
        self.dir = sweep_dir / "slurm"
        self.jobs_file = sweep_dir / JOBS_FILE
        self.known: dict[str, str] = self._load_known()  # experiment -> last Slurm job id

    def _load_known(self) -> dict[str, str]:
        try:
            return json.loads(self.jobs_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save_known(self) -> None:
        self.jobs_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.jobs_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.known, indent=2))
        os.replace(tmp, self.jobs_file)

    def exit_file(self, job: Job) -> Path:
        return self.dir / f"{job.name}.exit"

    def submit(self, job: Job) -> _Tracked:
        self.dir.mkdir(parents=True, exist_ok=True)
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        exit_file = self.exit_file(job)
        exit_file.unlink(missing_ok=True)
        script = self.dir / f"{job.name}.sbatch"
        script.write_text(render(self.template, script_values(job, self.opts, exit_file)))
        env = dict(os.environ)
        env.update(job.env)
        p = subprocess.run(
            ["sbatch", "--parsable", *self.opts.sbatch_args, str(script)],
            capture_output=True,
            text=True,
            env=env,
            cwd=job.cwd,
            timeout=120,
        )
        if p.returncode != 0:
            raise LauncherError(f"sbatch {script} failed: {(p.stderr or p.stdout).strip()}")
        job_id = p.stdout.strip().split(";")[0]  # "id" or "id;cluster"
        self.known[job.name] = job_id
        self._save_known()
        print(f"[launcher] submitted {job.name}: slurm job {job_id}", flush=True)
        return _Tracked(job, job_id, exit_file)

    def attach(self, jobs: Sequence[Job]) -> tuple[list[_Tracked], list[Job]]:
        """Jobs an earlier launcher submitted that are still queued or running, and the rest (to submit)."""
        ids = {self.known[j.name]: j for j in jobs if j.name in self.known}
        states = squeue_states(list(ids))
        for _ in range(ATTACH_TRIES - 1):
            if states is not None:
                break
            time.sleep(ATTACH_RETRY_S)
            states = squeue_states(list(ids))
        if states is None:  # not knowing is not "ended": submitting again would run them twice, unwatched
            raise LauncherError(
                f"squeue failed {ATTACH_TRIES} times: cannot tell whether the jobs an earlier launcher submitted "
                f"({', '.join(sorted(ids))}) still run, so none is submitted again; rerun once Slurm answers"
            )
        attached, rest = [], []
        for job in jobs:
            job_id = self.known.get(job.name)
            if job_id is not None and states.get(job_id, ("", ""))[0] in ACTIVE_STATES:
                print(f"[launcher] {job.name}: slurm job {job_id} still queued or running: waiting for it", flush=True)
                attached.append(_Tracked(job, job_id, self.exit_file(job), attached=True))
            elif job_id is not None and self.exit_file(job).exists() and self._read_exit(job) == 0:
                t = _Tracked(job, job_id, self.exit_file(job), attached=True)  # ended while no launcher watched
                self._finish(t)
                attached.append(t)
            else:
                rest.append(job)
        return attached, rest

    def _read_exit(self, job: Job) -> int | None:
        try:
            return parse_exit_file(self.exit_file(job).read_text())[0]
        except (OSError, ValueError, IndexError):
            return None

    def _finish(self, t: _Tracked) -> None:
        r = t.result
        try:
            rc, start, end, host = parse_exit_file(t.exit_file.read_text())
            r.exit_code, r.start, r.end, r.node = rc, start, end, host
            r.status = run_status(rc, t.cancelled)  # a time limit: 143 (train.py saved and exited), interrupted
        except (OSError, ValueError, IndexError):
            if t.cancelled or t.state == "CANCELLED":
                r.status = CANCELLED
            else:
                r.status = INTERRUPTED if t.state in CUT_STATES else FAILED
            r.error = f"slurm state {t.state}, no exit code written (killed, timed out, or the script failed)"
        t.state = "DONE"

    def watch(self, tracked: list[_Tracked], pending: deque[Job], limit: int) -> list[Result]:
        done: list[Result] = []
        active = [t for t in tracked if t.state != "DONE"]
        done += [t.result for t in tracked if t.state == "DONE"]
        for t in tracked:
            if t.state == "DONE":
                self.on_result(t.job, t.result)
        last_line = ""
        next_poll = 0.0
        while active or pending:
            while pending and len(active) < limit and not self.stop.requested:
                active.append(self.submit(pending.popleft()))
            if self.stop.requested:
                while pending:
                    job = pending.popleft()
                    done.append(Result(job.name, NOT_STARTED, log_path=str(job.log_path)))
                to_cancel = [t for t in active if not t.cancelled]
                if to_cancel:
                    subprocess.run(["scancel", *(t.job_id for t in to_cancel)], capture_output=True, timeout=60)
                    for t in to_cancel:
                        t.cancelled = True
            if time.monotonic() < next_poll:
                time.sleep(0.2)
                continue
            next_poll = time.monotonic() + (1.0 if self.stop.requested else self.opts.poll_s)
            states = squeue_states([t.job_id for t in active])
            if states is None:
                continue
            for t in list(active):
                state, nodes = states.get(t.job_id, ("GONE", ""))
                if state in ACTIVE_STATES:
                    t.state = state
                    if nodes:
                        t.result.node = nodes
                    continue
                t.state = state
                now = time.monotonic()
                t.ended_at = t.ended_at or now
                if not t.exit_file.exists() and now - t.ended_at < EXIT_FILE_GRACE_S and not t.cancelled:
                    continue
                self._finish(t)
                active.remove(t)
                done.append(t.result)
                self.on_result(t.job, t.result)
            counts = {s: sum(t.state == s for t in active) for s in ("PENDING", "RUNNING")}
            line = f"slurm: {counts['PENDING']} pending, {counts['RUNNING']} running, {len(done)} ended"
            if pending:
                line += f", {len(pending)} not submitted yet"
            if line != last_line:
                print(f"[launcher] {line}", flush=True)
                last_line = line
        return done


def run_slurm(
    jobs: Sequence[Job],
    max_parallel: int,
    stop: StopRequest,
    on_result: OnResult,
    sweep_dir: Path,
    opts: SlurmOptions,
) -> list[Result]:
    slurm = SlurmRun(sweep_dir, opts, stop, on_result)
    tracked, rest = slurm.attach(jobs)
    limit = max_parallel if max_parallel > 0 else len(jobs)
    results = {r.name: r for r in slurm.watch(tracked, deque(rest), limit)}
    return [results[j.name] for j in jobs]
