"""A killed runner: SIGKILL of the runner alone, of its whole process group, or of a runner left a zombie by its parent,
and the experiment lock that keeps a second run out of the folder until every process of the first is gone. Real
`train.py` subprocesses watched with psutil, as in test_faults.py; no process of a run is left behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from sample_factory.experiment.folder import _try_flock as try_flock  # noqa: PLC2701 - the lock's own probe
from sample_factory.experiment.folder import lock_holders
from tests.integration.conftest import REPO_ROOT
from tests.reliability.conftest import PACE_SEC, hook_env
from tests.reliability.test_faults import CARTPOLE, TRACEBACK, alive, finish, progress_time, wait_component


def describe(pid: int) -> str:
    """pid, name, state, parent and command line of a process, for an assertion message."""
    try:
        p = psutil.Process(pid)
        return f"{pid} {p.name()} ({p.status()}, parent {p.ppid()}): {' '.join(p.cmdline())[:200]}"
    except psutil.Error as e:
        return f"{pid} ({type(e).__name__})"


@pytest.mark.timeout(120)
def test_sigkill_of_the_runner_leaves_no_orphans(tmp_path, start_run):
    run = start_run([*CARTPOLE, "--train_for_seconds=60"], tmp_path / "td")
    assert run.wait_until(lambda: progress_time(run) >= 1, timeout=60), run.describe()
    for name in ("sf_actor_0", "sf_actor_1", "sf_policy_0_0", "sf_learner_0"):
        wait_component(run, name, 10)
    run.snapshot_tree()
    tracked = [p for p in psutil.Process(run.proc.pid).children(recursive=True)]
    assert len(tracked) >= 4, tracked
    # only the runner's exit handlers would remove the fork server's socket dir
    assert run.mp_tmpdirs and all(d.is_dir() for d in run.mp_tmpdirs), run.mp_tmpdirs
    run.signal(9)  # the runner only, not its process group
    assert run.wait(timeout=10) == -9
    gone, alive = psutil.wait_procs(tracked, timeout=10)
    assert not alive, f"children still alive 10 s after the runner was SIGKILLed: {alive}"
    run.assert_no_leftovers()  # also: no /dev/shm object and no multiprocessing temp dir of the run is left


@pytest.mark.timeout(150)
def test_the_temp_folder_of_a_run_killed_whole_is_removed_by_the_next_run(tmp_path, start_run):
    """kill -9 of the run's whole process group leaves no process to remove its multiprocessing temp folder (the
    fork server's socket). The next run, of any experiment, removes it."""
    run = start_run([*CARTPOLE, "--train_for_seconds=60"], tmp_path / "td")
    assert run.wait_until(lambda: progress_time(run) >= 1 and run.mp_tmpdirs, timeout=60), run.describe()
    run.signal(9, group=True)
    run.wait(timeout=10)
    time.sleep(1)
    stale = run.leftover_tmpdirs()
    if not stale:  # a run of another test file, started meanwhile, removed it already: what is tested here
        assert run.mp_tmpdirs and not any(d.exists() for d in run.mp_tmpdirs), run.mp_tmpdirs
        return
    other = start_run([*CARTPOLE, "--train_for_seconds=2"], tmp_path / "td", experiment="y")
    assert other.wait(timeout=90) == 0, other.describe()
    assert not any(d.exists() for d in stale), stale
    # removed by this run (it says so), or by a run of another test file that started meanwhile (xdist runs two)


# A parent that never reaps its child (a notebook's Popen, a container's PID 1): prints the child's pid, then sleeps.
NOT_REAPING = (
    "import subprocess, sys, time; p = subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True); time.sleep(300)"
)


@pytest.mark.timeout(150)
def test_components_of_a_killed_runner_that_stays_a_zombie_stop(tmp_path):
    """SIGKILL of a runner whose parent does not reap it leaves a zombie that `kill(pid, 0)` calls alive: its
    components trained on for 30 s and more, writing checkpoints and holding the lock. They must stop (the learner
    after its final save) within the heartbeat timeout, and free the lock."""
    td = tmp_path / "td"
    argv = ["--env=CartPole-v1", f"--train_dir={td}", "--experiment=x", *CARTPOLE, "--train_for_seconds=120"]
    env = {**os.environ, **hook_env(SF_TEST_ENV_GROUP_STEP_SEC=str(PACE_SEC)), "PYTHONUNBUFFERED": "1"}
    env.pop("SF_DEBUG", None)
    log = open(tmp_path / "run.log", "w")  # noqa: SIM115 - closed below
    parent = subprocess.Popen(
        [sys.executable, "-c", NOT_REAPING, sys.executable, "train.py", *argv],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
    )
    run_procs: list[psutil.Process] = []
    try:
        runner = psutil.Process(int(parent.stdout.readline()))
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not list((td / "x").glob("checkpoint_p0/*.pth")):
            names = {c.name() for c in runner.children(recursive=True) if c.is_running()}
            if {"sf_actor_0", "sf_learner_0", "sf_policy_0_0"} <= names and (td / "x" / "progress.csv").exists():
                break
            time.sleep(0.2)
        # every process of the run (a component still starting has no sf_ name yet; the fork server; the resource
        # tracker): the lock is free only once all of them are gone
        run_procs = runner.children(recursive=True)
        components = [c for c in run_procs if c.name().startswith("sf_")]
        assert {c.name() for c in components} >= {"sf_actor_0", "sf_learner_0"}, components
        runner.kill()
        killed = time.monotonic()
        while runner.status() != psutil.STATUS_ZOMBIE and time.monotonic() - killed < 10:
            time.sleep(0.05)
        assert runner.status() == psutil.STATUS_ZOMBIE  # not reaped: the case of the test
        _, alive = psutil.wait_procs(components, timeout=30)
        assert not alive, f"components still running {time.monotonic() - killed:.0f} s after the runner died: {alive}"
        # the rest (the resource tracker unlinks the run's semaphores once the last component is gone)
        helpers = [p for p in [*run_procs, *psutil.Process(parent.pid).children(recursive=True)] if p.pid != runner.pid]
        _, alive = psutil.wait_procs(helpers, timeout=30)
        assert not alive, alive
        # free for the next run (which would wait for it: ExperimentLock.acquire)
        fd = os.open(td / "x" / ".lock", os.O_RDWR)
        try:
            deadline = time.monotonic() + 15
            while not try_flock(fd) and time.monotonic() < deadline:
                time.sleep(0.1)
            held_by = [describe(pid) for pid in lock_holders(td / "x" / ".lock") if pid != os.getpid()]
            assert try_flock(fd), f"the lock is held {time.monotonic() - killed:.0f} s after the kill by {held_by}"
        finally:
            os.close(fd)
    finally:
        leftover = [*run_procs, *psutil.Process(parent.pid).children(recursive=True)]
        parent.kill()  # the zombie runner goes to init, which reaps it
        parent.wait()
        for p in leftover:
            try:
                p.kill()
            except psutil.Error:
                pass
        log.close()


@pytest.mark.timeout(120)
def test_second_run_is_refused_and_a_stale_lock_is_taken_over(tmp_path, start_run):
    td = tmp_path / "td"
    first = start_run([*CARTPOLE, "--train_for_seconds=60"], td, experiment="shared")
    assert first.wait_until(lambda: progress_time(first) >= 0, timeout=60), first.describe()
    second = start_run([*CARTPOLE, "--train_for_seconds=5"], td, experiment="shared")
    assert finish(second, 60) != 0, second.describe()
    assert "already being trained" in second.output, second.describe()
    assert TRACEBACK not in second.output, second.describe()
    assert first.proc.poll() is None, "the refused run disturbed the running one"

    first.signal(9)
    first.wait(timeout=10)
    third = start_run([*CARTPOLE, "--train_for_seconds=1"], td, experiment="shared")
    assert finish(third, 60) == 0, third.describe()
    assert "resuming" in third.output, third.describe()
    first.assert_no_leftovers()


@pytest.mark.timeout(180)
def test_a_new_run_waits_for_the_processes_of_a_killed_one(tmp_path, start_run):
    """SIGKILL of the runner leaves its learner alive for a while: it notices, saves a final checkpoint, exits (~4 s
    seen; ~30 s with a 4 GB replay buffer; here it is held stopped with SIGSTOP). A new run of the experiment must
    not touch the folder until that process is gone, then resume from the checkpoint it wrote. Before, the lock
    went with the runner: the new run resumed an older file at once and both wrote checkpoints."""
    td = tmp_path / "td"
    first = start_run([*CARTPOLE, "--train_for_seconds=120"], td, experiment="shared")
    assert first.wait_until(lambda: progress_time(first) >= 1, timeout=90), first.describe()
    learner = wait_component(first, "sf_learner_0", 30)
    learner.suspend()
    first.signal(9)  # the runner only
    assert first.wait(timeout=10) == -9

    second = start_run([*CARTPOLE, "--train_for_seconds=1"], td, experiment="shared")
    assert second.wait_until(lambda: "still hold the lock" in second.output, timeout=60), second.describe()
    assert f"pids {learner.pid}" in second.output or str(learner.pid) in second.output, second.describe()
    time.sleep(2.0)
    assert "resuming" not in second.output and second.proc.poll() is None, second.describe()
    resumed_at = time.time()
    learner.resume()
    # Once the new run resumes, the old learner must be gone: it held the lock. (Watching for its exit before the
    # "resuming" line instead raced on a loaded machine: the learner exited and the run resumed within one poll.)
    assert second.wait_until(lambda: "resuming" in second.output, timeout=60, poll=0.02), second.describe()
    assert not alive(learner), f"the second run went on beside the old learner\n{second.describe()}"
    latest = first.checkpoints()[-1]  # the old learner's final save
    assert latest.stat().st_mtime >= resumed_at  # the old learner did write after the kill, before the new run
    assert finish(second, 90) == 0, second.describe()
    assert f"policy 0 resumed from {latest} at" in second.output, second.describe()
    first.assert_no_leftovers()
