"""The time-to-score tool runs the default command with a stop condition and reports the time from launch."""

from __future__ import annotations

import json

import pytest

from benchmarks import time_to_score


@pytest.mark.timeout(400)
def test_cartpole_reaches_its_target_and_reports_the_time(capsys, tmp_path):
    out = tmp_path / "tts.md"
    argv = ["--tasks=cartpole", "--max_seconds=180", f"--output={out}", f"--progress_dir={tmp_path}", "--num_workers=2"]
    assert time_to_score.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["time_to_score"][0]
    assert result["reached"] and result["rc"] == 0, result
    assert 0 < result["seconds_from_launch"] <= result["wall_seconds"]
    assert result["last_mean_reward"] >= 475 and result["unit"] == "env_steps"
    assert "--stop_at_reward=475.0" in result["command"] and "cartpole" in out.read_text()
    curve = (tmp_path / "cartpole_seed0_progress.csv").read_text().splitlines()
    assert "reward_p0" in curve[0].split(",") and len(curve) >= 2, curve[:2]


def test_unknown_task_is_refused():
    with pytest.raises(SystemExit):
        time_to_score.main(["--tasks=pongg"])
