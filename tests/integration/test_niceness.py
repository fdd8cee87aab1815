"""Process priorities of a run (--default_niceness, --actor_worker_niceness): the learner and the policy workers at
the default niceness, the actor workers that much nicer, as Sample Factory does. Raising a niceness needs no
privileges, so both cases run anywhere."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

ARGS = ["--num_workers=2", "--num_envs_per_worker=4", "--train_for_seconds=300", "--report_interval_sec=1"]
ROLES = ("sf_actor_0", "sf_actor_1", "sf_learner_0", "sf_policy_0_0")


def _niceness_by_role(run) -> dict[str, int]:
    """{process name: niceness} of the run's live component processes."""
    out = {}
    for sp in list(run.seen.values()):
        p = sp.handle()
        names = sp.names & set(ROLES)
        if p is not None and names:
            try:
                out[names.pop()] = p.nice()
            except psutil.Error:
                pass
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("flags", "learner", "actor"),
    [([], 0, 10), (["--default_niceness=2", "--actor_worker_niceness=15"], 2, 17)],
    ids=["defaults", "explicit"],
)
def test_actors_run_nicer_than_the_learner_and_policy_workers(tmp_path, train_run, flags, learner, actor):
    base = os.getpriority(os.PRIO_PROCESS, 0)  # the runner inherits this test's niceness
    learner, actor = max(learner, base), max(min(actor, 19), base)
    run = train_run([*ARGS, *flags], tmp_path)
    assert run.wait_until(lambda: len(_niceness_by_role(run)) == len(ROLES) and run.progress_lines(), 60), (
        run.describe()
    )
    assert _niceness_by_role(run) == {
        "sf_actor_0": actor,
        "sf_actor_1": actor,
        "sf_learner_0": learner,
        "sf_policy_0_0": learner,
    }, run.describe()
    assert "not allowed" not in run.output
    run.signal(signal.SIGINT)
    assert run.wait(timeout=60) == 130, run.describe()
    run.assert_no_leftovers()
