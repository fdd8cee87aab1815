"""The runner's shutdown after a set-up that failed part way: the original error is what the user reads."""

from __future__ import annotations

import pytest

import sample_factory.runner as runner_module
from sample_factory.config import parse_cfg
from sample_factory.runner import Runner


def _boom(*args, **kwargs):
    raise RuntimeError("boom in set-up")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("failing", ["place_components", "PeriodicEvaluator"])
def test_a_setup_that_fails_part_way_reports_its_own_error_and_releases_the_run(failing, tmp_path, monkeypatch, capfd):
    """place_components fails after the channels exist but before progress and summaries (shutdown read
    `self.progress.line()` and raised AttributeError over the real error); PeriodicEvaluator fails after the
    summaries. Either way the run exits 1 naming the set-up's error, and frees the experiment's lock."""
    monkeypatch.setattr(runner_module, failing, _boom)
    argv = ["--env=CartPole-v1", "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=2"]
    argv += [f"--train_dir={tmp_path}", "--experiment=broken", "--train_for_env_steps=1000"]
    runner = Runner(parse_cfg(argv))
    assert runner.run() == 1
    err = capfd.readouterr()
    assert "ERROR: RuntimeError: boom in set-up" in err.out + err.err
    assert "AttributeError" not in err.out + err.err
    assert runner.lock is not None and runner.lock.fd is None  # released: the same command can run again
