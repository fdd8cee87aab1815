"""The `ray` backend: each experiment runs in its own Ray actor, which reserves the experiment's CPUs (and share of
a GPU) for as long as the run lives and starts train.py as a subprocess on the node Ray placed it on.

An actor, not a plain task, so that the launcher can ask a running experiment to stop cleanly: Ctrl+C makes the
launcher call `stop` on every actor (SIGINT to its train.py, which saves and exits), and a run still alive
`stop_timeout` s later is killed. Nothing is retried (max_restarts=0): a run that exits non-zero, or whose
actor dies with its node, is reported failed once. Actors are spread over the nodes (SPREAD scheduling).

Requirements (docs/scale-out.md): every node sees the same repository, interpreter and train_dir at the same
paths (a shared folder), and can import sample_factory (installed in the shared venv, or via PYTHONPATH given to
`ray start`). Ray is optional: the [ray] extra.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import psutil

from sample_factory.config.extras import install_hint
from sample_factory.launcher.guard import guarded
from sample_factory.launcher.jobs import (
    CANCELLED,
    FAILED,
    NOT_STARTED,
    Job,
    LauncherError,
    OnResult,
    Result,
    StopRequest,
    run_status,
)
from sample_factory.launcher.ray_init import init_ray

WAIT_S = 0.5
GIVE_UP_S = 15.0  # after the stop timeout and the kill: actors not done by then are dropped
LEFTOVER_WAIT_S = 30.0  # for a run's components still shutting down after its main process ended


def _group_members(pgid: int) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (OSError, psutil.Error):
            pass
    return found


def wait_for_process_group(pgid: int, timeout: float) -> None:
    """After a run's main process ended, e.g. killed, its components may still be saving (a learner gets SIGTERM
    when train.py dies and writes its checkpoint): wait for them, so that a next run of the same experiment (a
    restart) never shares the folder with them; whatever is left after `timeout` s is killed."""
    deadline = time.monotonic() + timeout
    alive = _group_members(pgid)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = _group_members(pgid)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


class ExperimentActor:
    """Runs one experiment's command (made a Ray actor class by `ray.remote` at launch time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._stopped = False

    def run(self, argv: list[str], cwd: str, env: dict[str, str], log_path: str) -> dict[str, Any]:
        import ray

        out: dict[str, Any] = {
            "node_id": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
            "start": time.time(),
        }
        full_env = dict(os.environ)
        full_env.update(env)
        full_env["PYTHONUNBUFFERED"] = "1"
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        with open(log_path, "ab") as log:
            with self._lock:
                if self._stopped:  # stopped while it waited for its resources
                    return {**out, "exit_code": None, "end": time.time(), "cancelled": True}
                header = f"# launcher {time.strftime('%Y-%m-%d %H:%M:%S')} on {out['host']}: {' '.join(argv)}\n"
                log.write(header.encode())
                log.flush()
                # Under the guard (guard.py): when Ray ends this actor with its children (e.g. the launcher
                # died), the run gets SIGTERM, saves and exits instead of being killed with its components left.
                self._proc = subprocess.Popen(
                    [*guarded(), *argv],
                    cwd=cwd,
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            out["pid"] = self._proc.pid
            rc = self._proc.wait()
            wait_for_process_group(self._proc.pid, LEFTOVER_WAIT_S)  # the guard leads the run's process group
        return {**out, "exit_code": rc, "end": time.time(), "cancelled": self._stopped}

    def stop(self) -> None:
        """SIGINT to the run (a second call: a second SIGINT, train.py then hurries)."""
        with self._lock:
            self._stopped = True
            if self._proc is not None and self._proc.poll() is None:
                self._proc.send_signal(signal.SIGINT)

    def kill(self) -> None:
        with self._lock:
            self._stopped = True
            if self._proc is not None and self._proc.poll() is None:
                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def _import_ray():
    try:
        import ray
    except ImportError:
        raise LauncherError(f"the ray backend needs Ray: {install_hint('ray')}") from None
    return ray


def run_ray(
    jobs: Sequence[Job],
    max_parallel: int,
    stop: StopRequest,
    stop_timeout: float,
    on_result: OnResult,
    address: str | None,
    num_cpus: int | None,
    num_gpus: int,
) -> list[Result]:
    ray = _import_ray()
    try:
        if address:
            init_ray(ray, address, log_to_driver=False, configure_logging=False)
        else:
            init_ray(ray, None, num_cpus=num_cpus, num_gpus=num_gpus, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise LauncherError(f"cannot start or reach {where}: {e}") from None
    try:
        return _run(ray, jobs, max_parallel, stop, stop_timeout, on_result)
    finally:
        ray.shutdown()


def _check_feasible(ray, jobs: Sequence[Job]) -> None:
    """An experiment that asks for more than any node has would wait forever: refuse it up front."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    most_cpus = max((n["Resources"].get("CPU", 0) for n in nodes), default=0)
    most_gpus = max((n["Resources"].get("GPU", 0) for n in nodes), default=0)
    for job in jobs:
        if job.num_cpus > most_cpus or job.num_gpus > most_gpus:
            raise LauncherError(
                f"{job.name} needs {job.num_cpus} CPUs and {job.num_gpus:g} GPUs, but the largest Ray node has "
                f"{most_cpus:g} CPUs and {most_gpus:g} GPUs: set --cpus_per_experiment or the run's --num_workers"
            )


def submit(actor_cls, job: Job) -> tuple[Any, Any]:
    """Start `job` in a new actor that reserves its CPUs/GPUs, spread over the nodes, never restarted or retried
    by Ray (failures are reported, not repeated). Returns (actor, the ObjectRef of its run)."""
    actor = actor_cls.options(
        num_cpus=job.num_cpus,
        num_gpus=job.num_gpus,
        max_restarts=0,
        max_task_retries=0,
        scheduling_strategy="SPREAD",
    ).remote()
    return actor, actor.run.remote(job.argv, job.cwd, job.env, str(job.log_path))


def kill_actor(ray, actor) -> None:
    """Stop an experiment actor whose owner is failing: its run's processes first (best effort), then the actor."""
    try:
        ray.get(actor.kill.remote(), timeout=10)
    except Exception:  # noqa: BLE001 - best effort while failing anyway
        pass
    ray.kill(actor)


def stop_actors(ray, runs: dict[Any, Any], timeout: float) -> None:
    """Stop experiment actors (ObjectRef of run() -> actor) whose owner is failing, as Ctrl+C does: SIGINT to
    every run (it saves and exits), up to `timeout` s for them to end, then a kill of what is left."""
    for actor in runs.values():
        actor.stop.remote()
    try:
        ray.wait(list(runs), num_returns=len(runs), timeout=timeout)
    except Exception:  # noqa: BLE001 - best effort while failing anyway: the kill below still runs
        pass
    for actor in runs.values():
        kill_actor(ray, actor)


def _run(ray, jobs, max_parallel, stop, stop_timeout, on_result) -> list[Result]:
    _check_feasible(ray, jobs)
    actor_cls = ray.remote(max_concurrency=2)(ExperimentActor)  # run() blocks; stop() comes in beside it
    limit = max_parallel if max_parallel > 0 else len(jobs)
    pending = deque(jobs)
    in_flight: dict[Any, tuple[Job, Any, Result]] = {}  # ObjectRef of run() -> (job, actor, result so far)
    results: dict[str, Result] = {}
    signals_sent = 0
    killed = False
    try:
        while pending or in_flight:
            while pending and len(in_flight) < limit and not stop.requested:
                job = pending.popleft()
                actor, ref = submit(actor_cls, job)
                result = Result(job.name, "running", job_id=ref.task_id().hex(), log_path=str(job.log_path))
                in_flight[ref] = (job, actor, result)
                print(f"[launcher] submitted {job.name} ({job.num_cpus} CPUs, {job.num_gpus:g} GPU)", flush=True)
            if stop.requested:
                while pending:
                    job = pending.popleft()
                    results[job.name] = Result(job.name, NOT_STARTED, log_path=str(job.log_path))
                while signals_sent < stop.count:
                    signals_sent += 1
                    for _, actor, _ in in_flight.values():
                        actor.stop.remote()
                if stop.overdue(stop_timeout) and not killed:
                    killed = True
                    for _, actor, _ in in_flight.values():
                        actor.kill.remote()
                if stop.overdue(stop_timeout + GIVE_UP_S):  # e.g. an actor still waiting for a node: drop it
                    for ref, (job, actor, result) in list(in_flight.items()):
                        ray.kill(actor)
                        result.status, result.error = CANCELLED, "did not end after the stop"
                        results[job.name] = result
                        del in_flight[ref]
                        on_result(job, result)
            if not in_flight:
                continue
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_S)
            for ref in ready:
                job, actor, result = in_flight.pop(ref)
                _collect(ray, ref, result, stop)
                ray.kill(actor)  # frees its CPUs/GPU for the next experiment
                results[job.name] = result
                on_result(job, result)
    except BaseException as e:
        if in_flight:  # the launcher itself fails: its runs save and exit as on Ctrl+C
            print(f"[launcher] error ({type(e).__name__}: {e}): stopping the running experiments", flush=True)
            stop_actors(ray, {ref: actor for ref, (_, actor, _) in in_flight.items()}, stop_timeout)
        raise
    return [results[j.name] for j in jobs]


def _collect(ray, ref, result: Result, stop: StopRequest) -> None:
    try:
        out = ray.get(ref)
    except Exception as e:  # noqa: BLE001 - the actor or its node died: report it, never retry
        result.status = CANCELLED if stop.requested else FAILED
        result.error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return
    result.start, result.end = out["start"], out["end"]
    result.exit_code = out["exit_code"]
    result.node = f"{out['host']}/{out['node_id'][:12]}"
    result.status = run_status(out["exit_code"], out["cancelled"])
