"""The `processes` backend: experiments as local subprocesses, at most `max_parallel` at a time (and at most
`experiments_per_gpu` per GPU when GPUs are given: CUDA_VISIBLE_DEVICES picks each run's GPU).

Each run gets its own session, so a Ctrl+C in the terminal reaches only the launcher, which then forwards one
SIGINT per signal it receives to every running train.py (the first: save and exit; a second: hurry) and starts
nothing new. A run still alive `stop_timeout` seconds after the first signal is killed with its process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

from sample_factory.launcher.guard import guarded
from sample_factory.launcher.jobs import (
    CANCELLED,
    FAILED,
    FINISHED,
    NOT_STARTED,
    GpuSlots,
    Job,
    OnResult,
    Result,
    StopRequest,
)

POLL_S = 0.2


@dataclass
class _Running:
    job: Job
    proc: subprocess.Popen
    result: Result
    log: IO[bytes]
    gpu: str
    signals_sent: int = 0
    killed: bool = False


def open_log(job: Job, header: str) -> IO[bytes]:
    job.log_path.parent.mkdir(parents=True, exist_ok=True)
    f = open(job.log_path, "ab")
    f.write(f"# launcher {time.strftime('%Y-%m-%d %H:%M:%S')}: {header}\n".encode())
    f.flush()
    return f


def run_processes(
    jobs: Sequence[Job],
    max_parallel: int,
    gpus: GpuSlots,
    stop: StopRequest,
    stop_timeout: float,
    on_result: OnResult,
) -> list[Result]:
    """Run `jobs` (in order) and return their results in the same order."""
    if max_parallel < 1:
        max_parallel = len(jobs) or 1
    pending = deque(jobs)
    running: list[_Running] = []
    results: dict[str, Result] = {}

    def finish(r: _Running, rc: int) -> None:
        r.result.end = time.time()
        r.result.exit_code = rc
        # a run told to stop exits 0 after saving, but it has not finished its budget: no marker for it
        r.result.status = CANCELLED if r.signals_sent else (FINISHED if rc == 0 else FAILED)
        r.log.close()
        gpus.release(r.gpu)
        results[r.job.name] = r.result
        on_result(r.job, r.result)

    try:
        while pending or running:
            while pending and len(running) < max_parallel and not stop.requested:
                gpu = gpus.acquire()
                if gpu is None:
                    break  # every GPU slot is taken: wait for a run to end
                job = pending.popleft()
                running.append(_start(job, gpu))
            for r in list(running):
                rc = r.proc.poll()
                if rc is not None:
                    running.remove(r)
                    finish(r, rc)
            if stop.requested:
                _forward_stop(running, stop, stop_timeout)
                while pending:
                    job = pending.popleft()
                    results[job.name] = Result(job.name, NOT_STARTED, log_path=str(job.log_path))
            if running:
                time.sleep(POLL_S)
    finally:
        # Only reached with runs still going when the launcher itself fails: leave nothing behind.
        for r in running:
            r.signals_sent += 1  # reported cancelled
            _kill_group(r.proc)
            finish(r, r.proc.wait())
    return [results[j.name] for j in jobs]


def _start(job: Job, gpu: str) -> _Running:
    env = dict(os.environ)
    env.update(job.env)
    env["PYTHONUNBUFFERED"] = "1"  # the log shows progress as it happens
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    header = f"{' '.join(job.argv)}" + (f" (CUDA_VISIBLE_DEVICES={gpu})" if gpu else "")
    log = open_log(job, header)
    result = Result(job.name, "running", start=time.time(), log_path=str(job.log_path))
    try:
        proc = subprocess.Popen(
            [*guarded(), *job.argv],  # a launcher killed outright still stops its runs (guard.py)
            cwd=job.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl+C reaches the launcher only; it forwards the stop
        )
    except OSError as e:
        log.close()
        raise RuntimeError(f"cannot start {job.name}: {e}") from e
    result.job_id = str(proc.pid)
    print(f"[launcher] started {job.name} (pid {proc.pid})" + (f" on GPU {gpu}" if gpu else ""), flush=True)
    return _Running(job, proc, result, log, gpu)


def _forward_stop(running: list[_Running], stop: StopRequest, stop_timeout: float) -> None:
    for r in running:
        if r.proc.poll() is not None:
            continue
        if stop.overdue(stop_timeout) and not r.killed:
            print(f"[launcher] {r.job.name} still running {stop_timeout:.0f} s after the stop: killing it", flush=True)
            _kill_group(r.proc)
            r.killed = True
        while r.signals_sent < stop.count:
            r.signals_sent += 1
            try:
                r.proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
