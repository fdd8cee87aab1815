"""The run's counters, rates, stop conditions, progress line and policy-lag distribution (experiment/progress.py)."""

from __future__ import annotations

import re

import pytest

import sample_factory.experiment.progress as progress_module
from sample_factory.config import parse_cfg
from sample_factory.experiment.progress import IterationSamples, ProgressTracker


def test_stop_condition_budget_then_time_then_reward_and_an_evaluation_s_counts():
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1", "--train_for_env_steps=1000", "--train_for_seconds=60"])
    cfg.stop_at_reward, cfg.stats_avg = 50.0, 2
    progress = ProgressTracker(cfg)
    assert progress.stop_condition(0.0) is None
    progress.add_samples(0, 400, [(60.0, 60)])
    assert progress.stop_condition(59.9) is None  # one episode: not a full --stats_avg window yet
    progress.add_samples(0, 100, [(30.0, 30)])
    assert progress.stop_condition(1.0) is None  # a full window (60, 30): mean 45
    progress.add_samples(0, 100, [(70.0, 70)])  # window (30, 70): mean 50
    assert progress.stop_condition(1.0) == "mean reward reached 50.0"
    assert progress.stop_condition(60.0) == "reached 60.0 s"
    progress.add_samples(0, 400, [])
    assert progress.stop_condition(60.0) == "reached 1000 env steps"  # the budget is named first

    ev = parse_cfg(["--env=CartPole-v1", "--num_workers=1"])
    ev.evaluation_run, ev.max_num_episodes, ev.max_num_frames = True, 2, 500
    evaluation = ProgressTracker(ev)
    evaluation.resume(0, 10_000)  # the checkpoint's steps do not count towards the evaluation's
    evaluation.add_samples(0, 100, [(1.0, 100)])
    assert evaluation.stop_condition(1.0) is None
    evaluation.add_samples(0, 100, [(1.0, 100)])
    assert evaluation.stop_condition(1.0) == "evaluated 2 episodes"
    ev.max_num_episodes = 10
    evaluation.add_samples(0, 300, [])
    assert evaluation.stop_condition(1.0) == "evaluated 500 env steps"


def test_with_frame_skip_the_counts_and_stop_reasons_say_env_frames():
    """The counters are env frames (4 a step here): the budget, the line and the stop reasons say so, and the samples
    collected are agent steps."""
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1", "--train_for_env_steps=1000"])
    cfg.frames_per_env_step = 4
    progress = ProgressTracker(cfg)
    progress.add_samples(0, 1000, [])
    line = progress.line()
    assert "(env frames/s) | env frames: 1000 (100.0%" in line and "samples collected/trained: 250/0" in line, line
    assert progress.stop_condition(0.0) == "reached 1000 env frames"
    assert progress.final_summary(1.0).startswith("done: 1000 env frames in 1.0 s, 1000 FPS overall")
    cfg.evaluation_run, cfg.max_num_episodes, cfg.max_num_frames, cfg.train_for_env_steps = True, 10, 1000, 10**9
    assert progress.stop_condition(0.0) == "evaluated 1000 env frames"


def test_session_and_total_counts_are_named():
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1"])
    fresh = ProgressTracker(cfg)
    fresh.add_samples(0, 300, [])
    assert "env steps: 300 |" in fresh.line() and "this session" not in fresh.final_summary(1.0)
    resumed = ProgressTracker(cfg)
    resumed.resume(0, 1000)
    resumed.add_samples(0, 500, [(1.0, 5)])
    assert "env steps: 1500 total, 500 this session |" in resumed.line()
    summary = resumed.final_summary(2.0)
    assert summary.startswith(
        "done: 500 env steps in 2.0 s, 250 FPS overall (this session; 1500 env steps in total, 1000 before the resume)"
    )
    assert "policy 0: reward 1.00, 1 episodes this session, 500 env steps this session (250 FPS)" in summary


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    return now


def test_line_says_warming_up_until_samples_arrive(clock):
    """It printed `FPS 10s/60s/300s: 0/0/0 ... ETA inf s` for as long as no sample had arrived."""
    progress = ProgressTracker(parse_cfg(["--env=CartPole-v1", "--train_for_env_steps=100000"]))
    clock[0] += 5
    assert progress.line() == "warming up: no samples collected yet | env steps: 0"
    progress.resume(0, 4096)  # a resumed run shows its counter, and still no FPS
    assert progress.line() == "warming up: no samples collected yet | env steps: 4096 total, 0 this session"
    progress.add_samples(0, 1000, [])
    clock[0] += 5
    line = progress.line()
    assert line.startswith("FPS 10s/60s/300s: ") and "inf" not in line, line
    assert re.search(r"env steps: 5096 total, 1000 this session \(5\.1%(, ETA \d+ s)?\)", line), line


def test_no_eta_while_stalled(clock):
    progress = ProgressTracker(parse_cfg(["--env=CartPole-v1", "--train_for_env_steps=100000"]))
    progress.add_samples(0, 1000, [])
    clock[0] += 60  # nothing in the last 10 s: the 10 s FPS is 0
    line = progress.line()
    assert "ETA" not in line and "env steps: 1000 (1.0%)" in line, line


def test_iteration_samples_count_whole_iterations_in_a_fixed_order():
    """Sync mode: reports arrive in any order; they count only as whole iterations, in (worker, split, rollout)
    order, and none past the budget, so the episode window is the same in every run."""
    cfg = parse_cfg(["--env=CartPole-v1", "--train_for_env_steps=300"])
    results = []
    for arrival in ([(0, 0), (0, 1), (1, 0), (1, 1)], [(1, 1), (1, 0), (0, 1), (0, 0)]):
        progress = ProgressTracker(cfg)
        counted = IterationSamples(num_workers=2, splits_per_worker=1, rollouts_per_split=2, budget_frames=300)
        added = []
        for iteration in range(3):
            for w, k in arrival:
                rollout = iteration * 2 + k
                counted.add(w, 0, rollout, [(0, 50, [(float(10 * w + rollout), 5)], {})])
                added.append(counted.apply(progress))
        assert sum(added) == 2  # 2 iterations of 200 steps reach the budget; the third is not counted
        assert added[3] == 1 and added[7] == 1  # each when its last report came
        assert progress.env_frames == [400]
        results.append(list(progress.episodes[0]))
    assert (
        results[0] == results[1] == [(0.0, 5), (1.0, 5), (10.0, 5), (11.0, 5), (2.0, 5), (3.0, 5), (12.0, 5), (13.0, 5)]
    )


def test_lag_distribution_is_written_and_resumed(tmp_path):
    cfg = parse_cfg(["--env=CartPole-v1"])
    progress = ProgressTracker(cfg)
    assert progress.lag_summary(0) is None
    progress.add_lag_counts(0, [10, 0, 80])
    progress.add_lag_counts(0, [10])
    lag = progress.lag_summary(0)
    assert lag == {"samples": 100, "mean": 1.6, "min": 0, "p50": 2, "p90": 2, "p99": 2, "max": 2, "counts": [20, 0, 80]}
    progress.write_lag(tmp_path)
    resumed = ProgressTracker(cfg)
    resumed.load_lag(tmp_path)
    resumed.add_lag_counts(0, [0, 0, 0, 100])
    assert resumed.lag_summary(0)["counts"] == [20, 0, 80, 100] and resumed.lag_summary(0)["p50"] == 2
