"""A learner with a backlog of iterations sees a STOP between two iterations (it used to train through the whole
backlog first: "learner 0 did not stop in time" and no final checkpoint after a long Pong or Doom run)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from sample_factory.runtime.messages import LocalChannel, Stop
from sample_factory.workers.learner import Learner


def test_stop_is_seen_between_iterations_of_a_backlog():
    learner = object.__new__(Learner)  # only what on_idle touches; no buffers, model or process
    learner.stopped = False
    learner.inbox = LocalChannel()
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
