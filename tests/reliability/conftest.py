"""Fixtures of the fault-injection tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import TrainRun


@pytest.fixture
def start_run():
    """start_run(args, train_dir, **kwargs) -> TrainRun; whatever is left of every run is killed at teardown."""
    runs: list[TrainRun] = []

    def start(args: list[str], train_dir: Path, **kwargs) -> TrainRun:
        runs.append(TrainRun(args, train_dir, **kwargs))
        return runs[-1]

    yield start
    for run in runs:
        run.kill()
