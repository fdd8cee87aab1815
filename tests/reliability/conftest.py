"""Fixtures of the fault-injection tests, and the environment that switches on the run-side hooks of
tests/reliability/hooks/sitecustomize.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.conftest import REPO_ROOT, TrainRun

HOOKS = Path(__file__).resolve().parent / "hooks"  # sitecustomize.py: fault hooks switched on by variables
# Every step of an actor's env group waits this long in a paced run (start_run's default): a CartPole run's split of
# 64 envs then steps ~6,400 env steps/s instead of ~35,000, and a 12 s run costs 6.6 CPU-s instead of 23 (2 cores,
# 2026-11-28): the components wait instead of spinning through samples the test never looks at.
PACE_SEC = 0.01


def hook_env(**variables: str) -> dict[str, str]:
    """Environment of a run with the given hooks of tests/reliability/hooks/sitecustomize.py switched on."""
    pythonpath = os.pathsep.join([str(HOOKS), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": pythonpath, **variables}


@pytest.fixture
def start_run():
    """start_run(args, train_dir, paced=True, **kwargs) -> TrainRun (kwargs: TrainRun's); whatever is left of every
    run is killed at teardown. paced: the run's envs step at most once per PACE_SEC per split (hook
    SF_TEST_ENV_GROUP_STEP_SEC); paced=False for a test that needs the run's full speed."""
    runs: list[TrainRun] = []

    def start(args: list[str], train_dir: Path, paced: bool = True, **kwargs) -> TrainRun:
        if paced:  # the hooks' folder goes first on a PYTHONPATH the test gives (one that hides a package, say)
            env = {**hook_env(), **(kwargs.get("extra_env") or {}), "SF_TEST_ENV_GROUP_STEP_SEC": str(PACE_SEC)}
            if str(HOOKS) not in env["PYTHONPATH"].split(os.pathsep):
                env["PYTHONPATH"] = os.pathsep.join([str(HOOKS), env["PYTHONPATH"]])
            kwargs["extra_env"] = env
        runs.append(TrainRun(args, train_dir, **kwargs))
        return runs[-1]

    yield start
    for run in runs:
        run.kill()
