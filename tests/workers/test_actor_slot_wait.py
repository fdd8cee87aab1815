"""An actor worker whose splits wait for slots the learner holds: it gives up (exits to be restarted) only when no
learner has shown it is working for --heartbeat_timeout_sec. A learner in a long DQN iteration or a long checkpoint
write keeps its slots legitimately; an idle one with slots never returned is a fault. In-process worker, stepped by
hand."""

from __future__ import annotations

import time

import pytest

from tests.workers.test_actor_decorrelation import _worker


@pytest.mark.timeout(60)
def test_a_parked_split_gives_up_only_when_the_learner_is_not_working():
    # 10 s, not 1: the splits' first requests (sent in init) must not reach the 2x limit for actions from the policy
    # workers before the last on_idle, whatever a loaded VM stalls this test for
    worker, _ = _worker("--heartbeat_timeout_sec=10")
    worker.init()
    try:
        split = worker.splits[0]
        split.wait_since = time.monotonic() - 50.0  # parked for 50 s, past the 10 s limit
        worker.waiting.append(split)
        busy = worker.buffers.learner_busy
        busy[0] = time.monotonic()  # the learner is between SGD steps / writing a checkpoint
        worker.on_idle()  # keeps waiting
        busy[0] = time.monotonic() - 30.0  # the learner stopped working 30 s ago and still holds the slots
        with pytest.raises(RuntimeError, match="no trajectory buffer returned by the learner for 10 s"):
            worker.on_idle()
        busy[0] = 0.0  # never worked
        with pytest.raises(RuntimeError, match="no trajectory buffer returned"):
            worker.on_idle()
    finally:
        worker.finish()
