"""A data-parallel learner group (--learners_per_policy=2, gloo on the CPU) that loses a rank to SIGKILL: the run
stops with a line that says so well within --collective_timeout_sec (no rank hangs in a collective), leaves no
process and no /dev/shm object, and the same command resumes from the last checkpoint on both ranks."""

from __future__ import annotations

import time

import pytest

from tests.reliability.test_faults import CARTPOLE, progress_time, wait_component

COLLECTIVE_TIMEOUT = 30
GROUP = ["--learners_per_policy=2", "--device=cpu", f"--collective_timeout_sec={COLLECTIVE_TIMEOUT}"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("victim", ["sf_learner_0_1", "sf_learner_0"])
def test_a_killed_learner_rank_stops_the_run_cleanly_and_it_resumes(tmp_path, start_run, victim):
    args = [*CARTPOLE, *GROUP, "--save_every_sec=2", "--train_for_env_steps=1000000000"]
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

    resumed = start_run([*CARTPOLE, *GROUP, "--train_for_seconds=6"], tmp_path / "td")
    assert resumed.wait(timeout=150) == 0, resumed.describe()
    assert "policy 0 resumed from" in resumed.output, resumed.describe()
    resumed.assert_no_leftovers()
