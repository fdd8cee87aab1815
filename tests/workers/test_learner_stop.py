"""A learner with a backlog of iterations sees a STOP between two iterations (it used to train through the whole
backlog first: "learner 0 did not stop in time" and no final checkpoint after a long Pong or Doom run)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from sample_factory.config import parse_cfg
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.runner import Runner
from sample_factory.runtime.messages import LocalChannel, Stop
from sample_factory.workers.learner import Learner
from sample_factory.workers.pending_rollout import PendingRollout


def test_stop_is_seen_between_iterations_of_a_backlog():
    learner = object.__new__(Learner)  # only what on_idle touches; no buffers, model or process
    learner.stopped = False
    learner.inbox = LocalChannel()
    learner.early = []
    learner.cfg = SimpleNamespace(evaluation_run=True)
    learner._drop_stale = lambda: None
    learner.pending = ["a rollout"] * 10
    learner._take_iteration = lambda: ["a rollout"]  # an endless backlog
    trained = []

    def iteration(taken):
        trained.append(taken)
        if len(trained) == 1:
            learner.inbox.put(Stop.wire())  # the runner asks to stop during the first iteration
        assert len(trained) < 5, "the learner trained on and on without looking at its inbox"

    learner._iteration = iteration
    t0 = time.monotonic()
    learner.on_idle()
    assert learner.stopped and len(trained) == 1 and time.monotonic() - t0 < 5


def test_a_growing_backlog_still_returns_for_periodic_work():
    """Rollouts that arrive during on_idle wait for the next call: on_idle trains on what was pending when it
    started and returns (periodic checkpoints and heartbeats run between calls)."""
    learner = object.__new__(Learner)
    learner.stopped = False
    learner.inbox = LocalChannel()
    learner.early = []
    learner.cfg = SimpleNamespace(evaluation_run=True)
    learner._drop_stale = lambda: None
    learner.pending = ["r"] * 3
    trained = []

    def take():
        learner.pending.append("r")  # a new rollout arrives for every one trained on: the backlog never empties
        return [learner.pending.pop(0)]

    learner._take_iteration = take
    learner._iteration = trained.append
    learner.on_idle()
    assert len(trained) == 3


def _serial_runner(tmp_path) -> Runner:
    """A CartPole run set up in this process (serial mode), with iterations of 16 SGD steps (4 epochs x 4)."""
    argv = [
        "--env=CartPole-v1",
        "--serial_mode=True",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--rollout=8",
        "--batch_size=16",
        "--num_epochs=4",
        "--num_batches_per_epoch=4",
        "--use_rnn=False",
        "--encoder_mlp_layers=16",
        "--normalize_input=True",
        "--shutdown_timeout_sec=4",
        f"--train_dir={tmp_path}",
        "--experiment=x",
    ]
    runner = Runner(parse_cfg(argv))
    runner.setup()
    return runner


def _iteration_pending(learner: Learner, runner: Runner) -> None:
    """An iteration's worth of finished slots; the buffers hold zeros, a valid (if dull) batch."""
    n = runner.parts.buffers.spec.agents_per_split
    learner.pending = [PendingRollout(s, 0, 0, learner.all_columns) for s in range(learner.columns_per_iteration // n)]


@pytest.mark.timeout(120)
def test_stop_during_a_long_iteration_is_seen_between_sgd_steps(tmp_path):
    """An iteration of 16 slow SGD steps (0.5 s each); STOP arrives during the second: the learner keeps the two
    steps (version 2), drops the rest, and has written its final checkpoint well within --shutdown_timeout_sec (the
    whole iteration would take 8 s)."""
    runner = _serial_runner(tmp_path)
    try:
        learner = next(c for c in runner.parts.components if isinstance(c, Learner))
        learner.initialize()
        algo, steps = learner.algo, []
        minibatch_loss = algo.minibatch_loss

        def slow_minibatch_loss(p, mb):
            steps.append(mb)
            if len(steps) == 2:
                learner.inbox.put(Stop.wire())  # the runner asks to stop during the second SGD step
            time.sleep(0.5)
            return minibatch_loss(p, mb)

        algo.minibatch_loss = slow_minibatch_loss
        _iteration_pending(learner, runner)
        t0 = time.monotonic()
        learner.on_idle()
        assert learner.stopped and len(steps) == 2 and learner.version == 2
        assert learner.env_frames == runner.cfg.batch_size * runner.cfg.num_batches_per_epoch  # partly trained: counted
        learner.finish()
        elapsed = time.monotonic() - t0
        written = list_checkpoints(tmp_path / "x" / "checkpoint_p0")
        assert [p.name for p in written] == [f"checkpoint_{2:09d}_{learner.env_frames}.pth"], written
        assert elapsed < runner.cfg.shutdown_timeout_sec, f"{elapsed:.1f} s to stop and save"
    finally:
        runner.parts.summaries.close()
        runner.folder.lock.release()


@pytest.mark.timeout(120)
def test_an_iteration_cut_before_its_first_sgd_step_is_not_counted_as_trained(tmp_path):
    """STOP arrives while the learner copies its batch: train() returns before the batch changes anything, and its
    samples are not counted as trained env steps (they were, so a resumed run's budget skipped them), nor do they
    move the observation normalizer."""
    runner = _serial_runner(tmp_path)
    try:
        learner = next(c for c in runner.parts.components if isinstance(c, Learner))
        learner.initialize()
        gather = learner.buffers.gather

        def gather_then_stop(*args, **kwargs):
            learner.inbox.put(Stop.wire())  # the runner asks to stop during the copy, before the first SGD step
            return gather(*args, **kwargs)

        learner.buffers.gather = gather_then_stop
        normalizer = {k: v.clone() for k, v in learner.model.state_dict().items() if "normalizer" in k}
        assert normalizer, list(learner.model.state_dict())
        _iteration_pending(learner, runner)
        learner.on_idle()
        assert learner.stopped and learner.version == 0 and learner.env_frames == 0
        after = {k: v for k, v in learner.model.state_dict().items() if k in normalizer}
        assert all((after[k] == v).all() for k, v in normalizer.items())
        learner.finish()
        written = list_checkpoints(tmp_path / "x" / "checkpoint_p0")
        assert [p.name for p in written] == [f"checkpoint_{0:09d}_0.pth"], written
    finally:
        runner.parts.summaries.close()
        runner.folder.lock.release()
