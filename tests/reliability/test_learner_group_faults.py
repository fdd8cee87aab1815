"""A data-parallel learner group (--learners_per_policy=2, gloo on the CPU) that loses a rank to SIGKILL: the run
stops with a line that says so well within --collective_timeout_sec (no rank hangs in a collective), leaves no
process and no /dev/shm object, and the same command resumes from the last checkpoint on both ranks."""

from __future__ import annotations

import signal
import time

import pytest

from tests.reliability.test_faults import CARTPOLE, progress_time, wait_component

COLLECTIVE_TIMEOUT = 30
GROUP = ["--learners_per_policy=2", "--device=cpu"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", ["sf_learner_0_1", "sf_learner_0"])
def test_a_killed_learner_rank_stops_the_run_cleanly_and_it_resumes(tmp_path, start_run, victim):
    args = [*CARTPOLE, *GROUP, f"--collective_timeout_sec={COLLECTIVE_TIMEOUT}", "--save_every_sec=2"]
    args.append("--train_for_env_steps=1000000000")
    run = start_run(args, tmp_path / "td")
    assert run.wait_until(lambda: progress_time(run) >= 3 and len(run.checkpoints()) > 0, 120), run.describe()
    wait_component(run, "sf_learner_0_1", 10)
    run.snapshot_tree()
    wait_component(run, victim, 10).kill()
    killed = time.monotonic()
    assert run.wait(timeout=COLLECTIVE_TIMEOUT + 30) == 1, run.describe()
    assert run.exited_at - killed < COLLECTIVE_TIMEOUT, run.describe()
    died = "learner (0, 1) died" if victim == "sf_learner_0_1" else "learner 0 died"
    assert died in run.output or "the data-parallel group failed" in run.output, run.describe()
    run.assert_no_leftovers()

    resumed = start_run([*CARTPOLE, *GROUP, "--train_for_seconds=2"], tmp_path / "td")  # resumes (cfg.json)
    assert resumed.wait(timeout=150) == 0, resumed.describe()
    assert "policy 0 resumed from" in resumed.output, resumed.describe()
    resumed.assert_no_leftovers()


@pytest.mark.timeout(240)
def test_a_stalled_rank_stops_the_run_after_the_collective_timeout(tmp_path, start_run):
    """SIGSTOP of rank 1: no connection closes, so rank 0 waits in its collective until --collective_timeout_sec,
    then the run stops with the group failure, and the stopped process is reaped at the shutdown timeout (it gets
    no extension for a final checkpoint: only rank 0 writes one)."""
    timeout = 8
    args = [*CARTPOLE, *GROUP, f"--collective_timeout_sec={timeout}", "--train_for_env_steps=1000000000"]
    run = start_run(args, tmp_path / "td")
    assert run.wait_until(lambda: progress_time(run) >= 3, 120), run.describe()
    run.snapshot_tree()
    wait_component(run, "sf_learner_0_1", 10).send_signal(signal.SIGSTOP)
    stalled = time.monotonic()
    assert run.wait(timeout=90) == 1, run.describe()
    assert timeout - 1 < run.exited_at - stalled < timeout + 40, run.describe()
    assert "the data-parallel group failed" in run.output, run.describe()
    run.assert_no_leftovers()
