"""What every backend shares: the job record it runs, the result it reports, the finished-marker that makes a
sweep resumable, CPU/GPU sizing of an experiment, and the stop request raised by Ctrl+C / SIGTERM."""

from __future__ import annotations

import json
import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sample_factory.config.machine import usable_cores
from sample_factory.experiment.exit_codes import is_interrupted

MARKER_NAME = "launcher_done.json"  # in the experiment folder, written when its command exited 0

# Result.status values; every one but finished and skipped is run again (and resumed) by a rerun of the sweep
FINISHED, FAILED, SKIPPED, CANCELLED, NOT_STARTED = "finished", "failed", "skipped", "cancelled", "not_started"
INTERRUPTED = "interrupted"  # stopped by a signal the launcher did not send (kill, a time limit, preemption)


def run_status(exit_code: int | None, stop_sent: bool) -> str:
    """What a run's exit code says (experiment/exit_codes.py). Exit 0 is finished even when the launcher's stop came
    as the run ended: train.py exits 0 only at its stop condition."""
    if exit_code == 0:
        return FINISHED
    if stop_sent:
        return CANCELLED
    return INTERRUPTED if is_interrupted(exit_code) else FAILED


class LauncherError(RuntimeError):
    """A launcher set-up problem (missing backend, bad flag combination); the message says what to do."""


@dataclass
class Job:
    """One experiment as a backend runs it: `argv` in `cwd`, its output appended to `log_path`."""

    name: str
    argv: list[str]
    cwd: str
    exp_dir: Path
    log_path: Path
    num_cpus: int
    num_gpus: float = 0.0  # GPUs (or a fraction of one) the experiment reserves on ray / asks for on slurm
    env: dict[str, str] = field(default_factory=dict)  # variables added to the run's environment


@dataclass
class Result:
    name: str
    status: str
    exit_code: int | None = None
    job_id: str | None = None  # pid, Ray task id or Slurm job id
    start: float | None = None  # time.time() when it started / ended (from the backend's view)
    end: float | None = None
    node: str | None = None  # where it ran, when the backend tells
    log_path: str | None = None
    error: str | None = None  # why a backend could not run it or collect its exit code

    @property
    def wall_s(self) -> float | None:
        return None if self.start is None or self.end is None else self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- resuming ----------------------------------------------------------------------------------------------
def _comparable(argv: Sequence[str]) -> list[str]:
    return list(argv[1:])  # the interpreter's path may differ between machines and venvs


def read_marker(exp_dir: Path) -> dict | None:
    try:
        return json.loads((exp_dir / MARKER_NAME).read_text())
    except (OSError, ValueError):
        return None


def finished_before(job: Job) -> dict | None:
    """The marker of an earlier successful run of exactly this command, else None (then the job runs; train.py
    resumes its folder if one exists, so a changed command, e.g. a larger budget, continues that run)."""
    marker = read_marker(job.exp_dir)
    if marker and marker.get("exit_code") == 0 and marker.get("command") == _comparable(job.argv):
        return marker
    return None


def write_marker(job: Job, result: Result, backend: str) -> None:
    job.exp_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "command": _comparable(job.argv),
        "exit_code": result.exit_code,
        "backend": backend,
        "job_id": result.job_id,
        "start": result.start,
        "end": result.end,
        "node": result.node,
        "log_path": str(job.log_path),
    }
    tmp = job.exp_dir / f".{MARKER_NAME}.tmp"
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, job.exp_dir / MARKER_NAME)


# ---- sizing ------------------------------------------------------------------------------------------------
def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value given for --flag (as --flag=V or --flag V) in a command."""
    value = None
    for i, a in enumerate(argv):
        if a == f"--{flag}" and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(f"--{flag}="):
            value = a.split("=", 1)[1]
    return value


def cpus_for(argv: Sequence[str], override: int = 0) -> int:
    """CPUs an experiment keeps busy: its actor workers plus one for the learner and policy worker (they mostly
    alternate). Without --num_workers a run starts one worker per core of its machine, so it wants all of them."""
    if override > 0:
        return override
    workers = flag_value(argv, "num_workers")
    if workers is not None and workers.isdigit():
        return int(workers) + 1
    return usable_cores()


def gpu_fraction(num_gpus: int, experiments_per_gpu: int) -> float:
    """The share of a GPU one experiment reserves (0 without GPUs)."""
    if num_gpus <= 0:
        return 0.0
    if experiments_per_gpu < 1:
        raise LauncherError("--experiments_per_gpu must be >= 1")
    return 1.0 / experiments_per_gpu


class GpuSlots:
    """Local GPU assignment for the processes backend: `experiments_per_gpu` experiments share each of `num_gpus`
    GPUs. `acquire` hands out the least used GPU (ties: the lowest index, so a fresh pool goes round-robin 0, 1,
    ..., 0, 1, ...) and returns None when every GPU is full; without GPUs it always gives "" (no assignment)."""

    def __init__(self, num_gpus: int, experiments_per_gpu: int):
        if experiments_per_gpu < 1:
            raise LauncherError("--experiments_per_gpu must be >= 1")
        self.per_gpu = experiments_per_gpu
        self.used = [0] * max(num_gpus, 0)

    @property
    def capacity(self) -> int | None:
        return len(self.used) * self.per_gpu if self.used else None

    def acquire(self) -> str | None:
        if not self.used:
            return ""
        gpu = min(range(len(self.used)), key=lambda g: (self.used[g], g))
        if self.used[gpu] >= self.per_gpu:
            return None
        self.used[gpu] += 1
        return str(gpu)

    def release(self, gpu: str) -> None:
        if gpu:
            self.used[int(gpu)] -= 1


# ---- stopping ----------------------------------------------------------------------------------------------
class StopRequest:
    """Counts SIGINT/SIGTERM received by the launcher. The first asks the runs to stop cleanly (they save and
    exit); a backend forwards later ones too (train.py hurries its shutdown on a second signal)."""

    def __init__(self) -> None:
        self.count = 0
        self.first_at: float | None = None
        self.name = ""
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.count > 0

    def _handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        self.name = signal.Signals(signum).name
        if self.first_at is None:
            self.first_at = time.monotonic()
        print(f"[launcher] {self.name} received: stopping the experiments", flush=True)

    def install(self) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            self._previous[s] = signal.signal(s, self._handle)

    def restore(self) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)
        self._previous.clear()

    def overdue(self, timeout_s: float) -> bool:
        return self.first_at is not None and time.monotonic() - self.first_at > timeout_s


OnResult = Callable[[Job, Result], None]


def format_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    return f"{s:.1f}"
