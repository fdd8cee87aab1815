"""benchmarks/frames_to_score.py: where a run's curve first reaches the target, the summary over seeds, the lag
note, and one real seed end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import frames_to_score as fts


def _run(tmp_path: Path, name: str, rows: list[tuple[float, int, str]], lag_lines: list[str], frames: bool) -> Path:
    d = tmp_path / name
    d.mkdir()
    counter = "env_frames" if frames else "env_steps"
    lines = [f"time_s,{counter},fps_10s,reward_p0"] + [f"{t},{c},100.0,{r}" for t, c, r in rows]
    (d / "progress.csv").write_text("\n".join(lines) + "\n4.0,12")  # a partly written last row
    (d / "sf_log.txt").write_text("\n".join(lag_lines) + "\n")
    (d / "cfg.json").write_text(json.dumps({"env": "atari_pong", "env_frameskip": 4}))
    return d


def test_first_crossing_agent_steps_lag_and_summary(tmp_path):
    hit = _run(
        tmp_path,
        "a",
        [(0.5, 0, "nan"), (1.0, 4000, "-20.0"), (2.0, 8000, "18.5"), (3.0, 12000, "17.0")],
        ["... | p0 lag min/avg/max 0/10.0/20 | ...", "... | p0 lag min/avg/max 4/20.0/40 | ..."],
        frames=True,
    )
    miss = _run(tmp_path, "b", [(1.0, 5000, "-21.0"), (2.0, 9000, "10.0")], [], frames=True)
    a, b = fts.analyze(hit, 18.0, seed=0), fts.analyze(miss, 18.0, seed=1)
    assert a["reached"] and a["frames_to_target"] == 8000 and a["agent_steps_to_target"] == 2000
    assert (a["train_seconds_to_target"], a["count_at_end"], a["mean_reward_at_end"]) == (2.0, 12000, 17.0)
    assert (a["policy_lag_avg"], a["policy_lag_max"]) == (15.0, 40)
    assert not b["reached"] and b["best_mean_reward"] == 10.0 and b["policy_lag_avg"] is None
    s = fts.summary([a, b], 9000)
    assert (s["median"], s["min"], s["max"], s["fraction_reached"], s["missed_seeds"]) == (8000, 8000, 8000, 0.5, [1])
    assert "1/2 reached" in fts.markdown([a, b], s)
    assert "not comparable" in fts.lag_note(s, 100.0) and "(comparable)" in fts.lag_note(s, 20.0)
    fts.write_curves([a, b], tmp_path)
    assert (tmp_path / "curves.csv").read_text().splitlines()[:2] == ["run,count,mean_reward", "0,4000,-20.0"]


@pytest.mark.timeout(300)
def test_one_seed_end_to_end(tmp_path, capsys):
    """A real CartPole seed: the run stops at the target, the last line is the JSON summary, the curves are written."""
    argv = ["--env=CartPole-v1", "--target=40", "--seeds=1", "--max_frames=200000", f"--out_dir={tmp_path}"]
    assert fts.main([*argv, "--", "--num_workers=1", "--num_envs_per_worker=8"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    s = last["frames_to_score"]
    assert s["metric"] == "agent_steps_to_target" and s["reached"] == 1 and 0 < s["median"] < 200000
    assert (tmp_path / "curves.csv").exists() and (tmp_path / "seed0" / "progress.csv").exists()
