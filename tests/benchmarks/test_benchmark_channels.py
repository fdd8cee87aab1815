"""The transport benchmark runs, prints both transports' cost per message and kill-trial counts, and the socket
channel (the default) never hangs after a producer is killed mid-put."""

from __future__ import annotations

import json

import pytest

from benchmarks import benchmark_channels


@pytest.mark.timeout(120)
def test_benchmark_channels_small(tmp_path, capsys):
    out = tmp_path / "channels.json"
    assert benchmark_channels.main(["--messages=3000", "--kill_trials=3", f"--output={out}"]) == 0
    text = capsys.readouterr().out
    assert "socket: " in text and "faster_fifo: " in text and "faster_fifo / socket time per message" in text
    results = json.loads(out.read_text())
    for kind in ("socket", "faster_fifo"):
        r = results["results"][kind]
        assert 0 < r["us_per_message"] < 10_000 and r["kill_trials"] == 3
    assert results["results"]["socket"]["hung_after_kill"] == 0
