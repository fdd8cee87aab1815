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
    worker, _ = _worker("--heartbeat_timeout_sec=1")
    worker.init()
    try:
        split = worker.splits[0]
        split.wait_since = time.monotonic() - 5.0  # parked for 5 s, past the 1 s limit
        worker.waiting.append(split)
        busy = worker.buffers.learner_busy
        busy[0] = time.monotonic()  # the learner is between SGD steps / writing a checkpoint
        worker.on_idle()  # keeps waiting
        busy[0] = time.monotonic() - 3.0  # the learner stopped working 3 s ago and still holds the slots
        with pytest.raises(RuntimeError, match="no trajectory buffer returned by the learner for 1 s"):
            worker.on_idle()
        busy[0] = 0.0  # never worked
        with pytest.raises(RuntimeError, match="no trajectory buffer returned"):
            worker.on_idle()
    finally:
        worker.finish()
