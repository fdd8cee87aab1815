"""Stopping a multi-process run with a signal: the runner exits 128 + the signal's number (interrupted, not
finished: experiment/exit_codes.py) within the hang bound, saves a checkpoint, and leaves no process and no
shared-memory object behind.

The same runs, while they train, check process priorities (--default_niceness, --actor_worker_niceness): the
learner and the policy workers at the default niceness, the actor workers that much nicer, as Sample Factory does;
with the defaults in the SIGINT runs, with explicit values in the SIGTERM runs. Raising a niceness needs no
privileges, so both cases run anywhere. (One run for both claims: each run costs seconds of start-up.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psutil
import pytest

from tests.integration.conftest import COMPONENT_NAMES, REPO_ROOT, SIGNALS, progress_env_steps

# An orderly stop needs no component to be terminated: checked by its log line, with a --shutdown_timeout_sec far
# above the stop's own time (~3.5 s at load 7), not by a wall-clock bound that a loaded VM comes close to.
# The run's exit is bounded only to catch a hang, above that timeout.
SHUTDOWN_TIMEOUT_S = 20
SHUTDOWN_BOUND_S = 45.0
# (flags, niceness of the learner and the policy worker, niceness of the actors)
DEFAULT_NICENESS = ([], 0, 10)
EXPLICIT_NICENESS = (["--default_niceness=2", "--actor_worker_niceness=15"], 2, 17)


def _niceness_by_role(run) -> dict[str, int]:
    """{process name: niceness} of the run's live component processes."""
    out = {}
    for sp in list(run.seen.values()):
        p = sp.handle()
        names = sp.names & set(COMPONENT_NAMES)
        if p is not None and names:
            try:
                out[names.pop()] = p.nice()
            except psutil.Error:
                pass
    return out


def _check_niceness(run, learner: int, actor: int) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the runner inherits this test's niceness
    # --default_niceness=0 keeps the runner's; another value is absolute (as in SF2), and only root may set it below
    # the runner's
    if learner == 0 or os.geteuid() != 0:
        learner = max(learner, base)
    actor = max(min(actor, 19), base)  # the actors' is never below the runner's
    assert run.wait_until(lambda: len(_niceness_by_role(run)) == len(COMPONENT_NAMES), 30), run.describe()
    expected = {"sf_actor_0": actor, "sf_actor_1": actor, "sf_learner_0": learner, "sf_policy_0_0": learner}
    assert _niceness_by_role(run) == expected, f"niceness by role\n{run.describe()}"
    assert "not allowed" not in run.output


def _signal_run(tmp_path, train_run, sig_name: str, group: bool, niceness: tuple = DEFAULT_NICENESS) -> None:
    flags, learner, actor = niceness
    run = train_run(
        ["--num_workers=2", "--train_for_seconds=600", "--report_interval_sec=1", *flags]
        + [f"--shutdown_timeout_sec={SHUTDOWN_TIMEOUT_S}"],
        tmp_path / "td",
    )

    # Wait for real progress (every component up and env steps reported); bounded, the machine may be busy.
    def running() -> bool:
        return set(COMPONENT_NAMES) <= run.names_seen() and (progress_env_steps(run) or 0) > 0

    assert run.wait_until(running, timeout=90), f"names {sorted(run.names_seen())}\n{run.describe()}"
    run.snapshot_tree()  # the latest pids and shm mappings, right before the signal
    recorded = run.names_seen()
    assert set(COMPONENT_NAMES) <= recorded
    _check_niceness(run, learner, actor)

    run.signal(SIGNALS[sig_name], group=group)
    try:
        rc = run.wait(timeout=SHUTDOWN_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{sig_name} did not stop the run within {SHUTDOWN_BOUND_S} s\n{run.describe()}")
    assert rc == 128 + SIGNALS[sig_name], run.describe()
    assert f"stopping: {sig_name} received" in run.output, run.describe()
    assert f"exit code {rc}: interrupted" in run.output and "ERROR" not in run.output, run.describe()
    assert "Traceback" not in run.output, run.describe()
    assert "did not stop in time" not in run.output, run.describe()  # every component stopped by itself
    assert run.checkpoints(), f"no checkpoint after {sig_name}\n{run.describe()}"
    run.assert_no_leftovers()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("group", [False, True], ids=["main-process-only", "process-group-like-ctrl-c"])
def test_sigint_clean_shutdown(tmp_path, train_run, group):
    _signal_run(tmp_path, train_run, "SIGINT", group)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("group", [False, True], ids=["main-process-only", "process-group-like-slurm-time-limit"])
def test_sigterm_clean_shutdown(tmp_path, train_run, group):
    """SIGTERM to every process (`kill` of the group; Slurm's time limit signals every process of the job) ended
    each component with an error and the run with exit 1 (a failure); it is the same orderly stop as SIGTERM to
    the runner alone."""
    _signal_run(tmp_path, train_run, "SIGTERM", group, EXPLICIT_NICENESS)


@pytest.mark.timeout(300)  # hang bounds: 75 s beside other sessions' runs (load 13), mostly start-up
def test_run_outlives_the_reader_of_its_stdout(tmp_path):
    """`train.py ... | tee log` with tee killed, or a launcher that died: the runner's next line meets a closed pipe.
    The run must go on to its budget and exit 0, its lines kept in <experiment>/sf_log.txt (before: BrokenPipeError,
    the run stopped with exit 1)."""
    budget = 20_000  # a few updates: every line after the first (the progress lines, "done: ...") meets the closed pipe
    cmd = [sys.executable, "train.py", "--env=CartPole-v1", "--num_workers=2", f"--train_dir={tmp_path}"]
    cmd += ["--experiment=pipe", f"--train_for_env_steps={budget}", "--report_interval_sec=0.5"]
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first, proc.stderr.read()
        proc.stdout.close()  # the reader goes away while the run is starting
        rc = proc.wait(timeout=240)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, err
    assert "Traceback" not in err, err
    text = (tmp_path / "pipe" / "sf_log.txt").read_text()
    assert first.strip() in text  # the file has every line, including those stdout still took
    done = re.search(r"done: (\d+) env steps", text)
    assert done and int(done.group(1)) >= budget, text[-2000:]
