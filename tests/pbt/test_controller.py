"""In-process PBT in the runner (pbt/controller.py, wired by runner.py): decisions see the policy version of every
policy's published weights, so a policy whose learner has not trained yet (version 0: its initial random weights)
is never the source of a replacement, whatever its random policy's episodes scored. Serial mode, set up but not run:
the versions and episode windows are set by hand."""

from __future__ import annotations

import pytest

from sample_factory.config import parse_cfg
from sample_factory.runner import Runner
from sample_factory.runtime.messages import PBT_UPDATE


@pytest.fixture
def runner(tmp_path):
    argv = [
        "--env=CartPole-v1",
        "--serial_mode=True",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--num_policies=4",
        "--with_pbt=True",
        "--pbt_period_env_steps=100",
        "--pbt_start_mutation=0",
        "--pbt_replace_fraction=0.25",  # k = 1 of 4 known objectives, 1 of 3
        "--seed=5",
        "--experiment=x",
        f"--train_dir={tmp_path}",
    ]
    r = Runner(parse_cfg(argv))
    r.setup()
    yield r
    r.parts.summaries.close()
    r.folder.lock.release()


def _publish_version(runner: Runner, policy: int, version: int) -> None:
    w = runner.parts.weights[policy]
    w.publish_flat(w.snapshot()[0], version)


def test_a_policy_that_has_not_trained_is_never_a_source(runner, capsys):
    for p, version in enumerate([8, 0, 8, 8]):  # policy 1's learner has not finished an iteration yet
        _publish_version(runner, p, version)
    for p, reward in enumerate([10.0, 500.0, 40.0, 30.0]):  # 10 episodes each: the objectives are known
        runner.parts.progress.add_samples(p, 200, [(reward, 20)] * 10)
    sent = runner.parts.pbt.on_train_report(0, {"env_steps": 150, "version": 8}, runner.parts.progress)
    # policy 0 is the worst of the trained 0, 2, 3: replaced by policy 2, not by policy 1's random weights
    assert [(d["kind"], d["source"]) for d in sent] == [("replacement", 2)] and sent[0]["untrained"] == [1]
    msgs = [m for m in runner.parts.channels.learner[0].get_many(block=False) if m[0] == PBT_UPDATE]
    assert [m[2] for m in msgs] == [2]  # the policy whose published weights the learner loads
    out = capsys.readouterr().out
    assert "PBT: policy 0 replacement from policy 2: " in out and "(not ranked, never trained: policy 1)" in out
    assert runner.parts.pbt.pbt.states[0].history[-1]["untrained"] == [1]


def test_a_due_step_of_a_policy_without_training_waits_and_says_why_once(runner, capsys):
    # a learner report without an SGD step (an iteration cut by a stop, or every step skipped as non-finite)
    assert runner.parts.pbt.on_train_report(1, {"env_steps": 150, "version": 0}, runner.parts.progress) == []
    assert runner.parts.pbt.on_train_report(1, {"env_steps": 160, "version": 0}, runner.parts.progress) == []
    out = capsys.readouterr().out
    line = "PBT: policy 1 step skipped at 150 env steps: its learner has not trained yet (policy version 0)"
    assert out.count("PBT: policy 1 step skipped") == 1 and line in out
    assert runner.parts.pbt.pbt.states[1].last_pbt_env_steps == 0  # the period did not restart
    _publish_version(runner, 1, 8)
    runner.parts.pbt.on_train_report(1, {"env_steps": 170, "version": 8}, runner.parts.progress)
    assert runner.parts.pbt.pbt.states[1].last_pbt_env_steps == 170 and len(runner.parts.pbt.pbt.states[1].history) == 1
