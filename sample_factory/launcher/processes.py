"""The `processes` backend: experiments as local subprocesses, at most `max_parallel` at a time (and at most
`experiments_per_gpu` per GPU when GPUs are given: CUDA_VISIBLE_DEVICES picks each run's GPU).

Each run gets its own session, so a Ctrl+C in the terminal reaches only the launcher, which then forwards one
SIGINT per signal it receives to every running train.py (the first: save and exit; a second: hurry) and starts
nothing new. A run still alive `stop_timeout` seconds after the first signal is killed with its process group.

An experiment that cannot be started (its log cannot be opened, its folder is missing) is reported failed alone;
the others go on. If the launcher itself fails, its running experiments are stopped the same way as on Ctrl+C
(SIGINT, `stop_timeout` s to save and exit, then a kill), never killed outright."""

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
    FAILED,
    NOT_STARTED,
    GpuSlots,
    Job,
    OnResult,
    Result,
    StopRequest,
    run_status,
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
        r.result.status = run_status(rc, r.signals_sent > 0)
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
                started = _start(job, gpu)
                if isinstance(started, Result):  # this experiment alone fails; the others go on
                    gpus.release(gpu)
                    results[job.name] = started
                    on_result(job, started)
                else:
                    running.append(started)
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
    except BaseException as e:
        if running:  # the launcher itself fails: its runs save and exit as on Ctrl+C, none is left behind
            print(f"[launcher] error ({type(e).__name__}: {e}): stopping the running experiments", flush=True)
            _stop_running(running, stop_timeout, finish)
        raise
    return [results[j.name] for j in jobs]


def _start(job: Job, gpu: str) -> _Running | Result:
    """The started run, or the failed Result of one that could not be started."""
    env = dict(os.environ)
    env.update(job.env)
    env["PYTHONUNBUFFERED"] = "1"  # the log shows progress as it happens
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    header = f"{' '.join(job.argv)}" + (f" (CUDA_VISIBLE_DEVICES={gpu})" if gpu else "")
    result = Result(job.name, "running", start=time.time(), log_path=str(job.log_path))
    try:
        log = open_log(job, header)
    except OSError as e:
        return _not_started(job, result, f"cannot open its log {job.log_path}: {e.strerror}")
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
        return _not_started(job, result, f"cannot start it: {e.strerror or e}")
    result.job_id = str(proc.pid)
    print(f"[launcher] started {job.name} (pid {proc.pid})" + (f" on GPU {gpu}" if gpu else ""), flush=True)
    return _Running(job, proc, result, log, gpu)


def _not_started(job: Job, result: Result, why: str) -> Result:
    result.status, result.error, result.end = FAILED, why, time.time()
    return result


def _stop_running(running: list[_Running], stop_timeout: float, finish) -> None:
    """SIGINT to every run (it saves and exits), up to `stop_timeout` s for them to end, then a kill."""
    for r in running:
        r.signals_sent += 1  # reported cancelled
        try:
            r.proc.send_signal(signal.SIGINT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + stop_timeout
    while any(r.proc.poll() is None for r in running) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    for r in list(running):
        if r.proc.poll() is None:
            print(f"[launcher] {r.job.name} still running {stop_timeout:.0f} s after the stop: killing it", flush=True)
            _kill_group(r.proc)
        running.remove(r)
        try:
            finish(r, r.proc.wait())
        except Exception as e:  # noqa: BLE001 - already failing: the other runs still get their stop
            print(f"[launcher] {r.job.name}: cannot report its result: {e}", flush=True)


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
