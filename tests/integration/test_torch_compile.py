"""--torch_compile_learner / --torch_compile_worker in real runs: CartPole still learns with inductor-compiled
encoders in the learner and the policy worker, and an unusable backend falls back to eager in both processes
with one line each, the run finishing normally."""

from __future__ import annotations

import pytest

from tests.integration.conftest import progress_samples_trained

COMPILE = ["--torch_compile_learner=True", "--torch_compile_worker=True"]


@pytest.mark.timeout(420)
def test_cartpole_learns_with_compiled_encoders(tmp_path, train_run):
    run = train_run(["--num_workers=2", "--train_for_env_steps=300000", "--stop_at_reward=200", *COMPILE], tmp_path)
    assert run.wait(timeout=400) == 0, run.describe()
    out = run.output
    assert "running it eagerly" not in out, run.describe()
    # the stop condition, not the final summary: episodes that end during the shutdown move the final mean (a run
    # stopped at 200.0 once summed up at 193.1)
    assert "stopping: mean reward reached 200" in out, run.describe()
    run.assert_no_leftovers()


@pytest.mark.timeout(240)
def test_unusable_backend_falls_back_to_eager(tmp_path, train_run):
    args = ["--num_workers=1", "--train_for_env_steps=20000", "--torch_compile_dynamo_backend=not_a_backend"]
    run = train_run([*args, *COMPILE], tmp_path)
    assert run.wait(timeout=220) == 0, run.describe()
    fallbacks = [line for line in run.output.splitlines() if "running it eagerly" in line]
    assert len(fallbacks) == 2, run.describe()  # the learner's and the policy worker's, once each
    assert any(line.split("] ")[-1].startswith("learner 0:") for line in fallbacks), fallbacks
    assert any(line.split("] ")[-1].startswith("policy") for line in fallbacks), fallbacks
    assert (progress_samples_trained(run) or 0) > 0, run.describe()
    run.assert_no_leftovers()
