"""benchmarks/replay_memory.py: an Atari-size buffer filled through ReplayBuffer.add; frames stored once take about a
quarter of the memory of whole stacks."""

from __future__ import annotations

import pytest

from benchmarks import replay_memory


@pytest.mark.timeout(120)
def test_frames_stored_once_use_a_quarter_of_the_memory():
    once = replay_memory.main(["--capacity=2048"])
    whole = replay_memory.main(["--capacity=2048", "--stacked=False"])
    assert once["capacity"] == whole["capacity"] == 2048
    # 84 * 84 bytes per frame: (T + 3) / T frames per transition vs 4 * (T + 1) / T
    assert 84 * 84 < once["bytes_per_transition"] < 1.2 * 84 * 84
    assert 4 * 84 * 84 < whole["bytes_per_transition"] < 4.3 * 84 * 84
    assert once["fill_s"] > 0
