"""Stopping a multi-process run with a signal: the runner exits 0 within the hang bound, saves a checkpoint,
and leaves no process and no shared-memory object behind."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.conftest import COMPONENT_NAMES, SIGNALS, progress_env_steps

SHUTDOWN_BOUND_S = 10.0


def _signal_run(tmp_path, train_run, sig_name: str, group: bool) -> None:
    run = train_run(
        ["--num_workers=2", "--train_for_seconds=600", "--report_interval_sec=1"],
        tmp_path / "td",
    )

    # Wait for real progress (every component up and env steps reported); bounded, the machine may be busy.
    def running() -> bool:
        return set(COMPONENT_NAMES) <= run.names_seen() and (progress_env_steps(run) or 0) > 0

    assert run.wait_until(running, timeout=90), f"names {sorted(run.names_seen())}\n{run.describe()}"
    run.snapshot_tree()  # the latest pids and shm mappings, right before the signal
    recorded = run.names_seen()
    assert set(COMPONENT_NAMES) <= recorded

    run.signal(SIGNALS[sig_name], group=group)
    try:
        rc = run.wait(timeout=SHUTDOWN_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{sig_name} did not stop the run within {SHUTDOWN_BOUND_S} s\n{run.describe()}")
    assert rc == 0, run.describe()
    assert f"stopping: {sig_name} received" in run.output, run.describe()
    assert "Traceback" not in run.output, run.describe()
    assert run.checkpoints(), f"no checkpoint after {sig_name}\n{run.describe()}"
    run.assert_no_leftovers()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("group", [False, True], ids=["main-process-only", "process-group-like-ctrl-c"])
def test_sigint_clean_shutdown(tmp_path, train_run, group):
    _signal_run(tmp_path, train_run, "SIGINT", group)


@pytest.mark.timeout(180)
def test_sigterm_clean_shutdown(tmp_path, train_run):
    _signal_run(tmp_path, train_run, "SIGTERM", group=False)
