"""The episode windows saved beside checkpoints: a resumed run's reward window goes on from its checkpoint's."""

from __future__ import annotations

from sample_factory.config import parse_cfg
from sample_factory.experiment.episode_windows import (
    HISTORY,
    KEEP,
    WindowHistory,
    checkpoint_env_frames,
    load_windows,
    save_window,
)
from sample_factory.experiment.progress import ProgressTracker


def test_the_window_as_of_a_checkpoint_behind_the_tracker():
    cfg = parse_cfg(["--env=CartPole-v1", "--stats_avg=3"])
    tracker = ProgressTracker(cfg)
    tracker.add_samples(0, 100, [(1.0, 10)])
    tracker.add_samples(0, 100, [])  # no episode: no change of the window
    tracker.add_samples(0, 100, [(2.0, 20), (3.0, 30)], {"kills": [4.0]})
    tracker.add_samples(0, 100, [(4.0, 40)])  # the actors ran past the checkpoint at 300
    history = tracker.window_history[0]
    assert history.at(99) == {"episodes": [], "stats": {}}
    assert history.at(250) == {"episodes": [[1.0, 10]], "stats": {}}
    assert history.at(300) == {"episodes": [[1.0, 10], [2.0, 20], [3.0, 30]], "stats": {"kills": [4.0]}}
    assert history.at(10_000) == tracker.window(0)
    assert tracker.window(0)["episodes"] == [[2.0, 20], [3.0, 30], [4.0, 40]]  # --stats_avg=3


def test_a_resumed_tracker_goes_on_from_the_saved_window(tmp_path):
    cfg = parse_cfg(["--env=CartPole-v1", "--stats_avg=3"])
    before = ProgressTracker(cfg)
    before.add_samples(0, 300, [(1.0, 10), (2.0, 20), (6.0, 60)], {"kills": [1.0, 2.0]})
    save_window(tmp_path, 300, before.window_history[0].at(300))
    after = ProgressTracker(cfg)
    after.resume(0, 300)
    after.restore_window(0, load_windows(tmp_path)["300"])
    assert after.reward_mean(0) == before.reward_mean(0) == 3.0
    assert after.solved(3.0) and after.metric(0, "reward") == 3.0
    assert after.num_episodes[0] == 0  # the session's count
    after.add_samples(0, 100, [(9.0, 90)], {"kills": [3.0]})
    assert after.reward_mean(0) == (2.0 + 6.0 + 9.0) / 3 and after.episode_stats_means(0) == {"kills": 2.0}


def test_the_file_keeps_the_newest_windows_and_tolerates_a_bad_one(tmp_path):
    for steps in range(KEEP + 3):
        save_window(tmp_path, steps * 1000, {"episodes": [[float(steps), 1]], "stats": {}})
    windows = load_windows(tmp_path)
    assert sorted(map(int, windows)) == [s * 1000 for s in range(3, KEEP + 3)]
    (tmp_path / "episode_windows.json").write_text('{"12": ')  # a part-written file
    assert load_windows(tmp_path) == {}
    assert load_windows(tmp_path / "missing") == {}


def test_a_checkpoint_older_than_the_history_gets_no_window():
    history = WindowHistory()
    for steps in range(1, HISTORY + 2):
        history.record(steps * 10, {"episodes": [[0.0, steps]], "stats": {}})
    assert history.at(5) is None  # the window then is forgotten: better none than a wrong one
    assert history.at(HISTORY * 10 + 10) == {"episodes": [[0.0, HISTORY + 1]], "stats": {}}


def test_env_steps_from_a_checkpoint_name():
    assert checkpoint_env_frames("/x/checkpoint_p0/checkpoint_000001169_2424832.pth") == 2424832
    assert checkpoint_env_frames("best_000001041_2162688_18.3000.pth") is None
