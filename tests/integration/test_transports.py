"""The faster-fifo transport (`--message_queue=faster_fifo`, Sample Factory's) end to end: a multi-process CartPole
run learns, stops cleanly and leaves nothing behind. The socket channel (the default) is what every other
multi-process test runs on; docs/architecture.md says why it is the default,
benchmarks/notebook.md gives the numbers."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(400)
def test_faster_fifo_transport_learns_cartpole(tmp_path, train_run):
    # An env-step budget, so that the outcome does not depend on the machine's speed; the seconds catch a hang.
    flags = ["--stop_at_reward=150", "--train_for_env_steps=1000000", "--train_for_seconds=330"]
    run = train_run(["--num_workers=2", "--message_queue=faster_fifo", *flags], tmp_path)
    assert run.wait(timeout=360) == 0, run.describe()
    run.assert_no_leftovers()
    assert "mean reward reached 150" in run.output, run.describe()
