"""progress.csv and TensorBoard summaries a user reads (issue 33): time_s keeps going across a resume, CleanRL's tags
are written beside ours, a run of seconds gets a curve (a row and points every --progress_every_env_steps), a full
disk stops the run with one line, and a resume drops the rows past its checkpoint."""

from __future__ import annotations

import csv
import threading
import time

import pytest

import sample_factory.experiment.summaries as summaries
from sample_factory.config import parse_cfg
from sample_factory.experiment.progress import ProgressTracker
from sample_factory.experiment.summaries import ProgressPoints, SummaryWriters
from sample_factory.tools.plot import read_scalars
from tests.policy_helpers import Run


def _rows(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_time_s_continues_after_a_resume(tmp_path):
    cfg = parse_cfg(["--env=CartPole-v1"])
    (tmp_path / "progress.csv").write_text(
        "time_s,env_steps,fps_10s,reward_p0\n10.00,500,1.0,nan\n125.50,1000,1.0,nan\n"
    )
    progress = ProgressTracker(cfg)
    progress.resume(0, 1000)
    writers = SummaryWriters(tmp_path, 1, cfg=cfg)
    progress.add_samples(0, 100, [(10.0, 10)])
    writers.progress_row(progress)
    writers.close()
    times = [float(r["time_s"]) for r in _rows(tmp_path / "progress.csv")]
    assert times == sorted(times) and 125.5 <= times[-1] < 125.5 + 60, times


def test_cleanrl_tags_beside_ours_in_agent_steps(tmp_path):
    cfg = parse_cfg(["--env=atari_pong", "--num_workers=1"])
    cfg.frames_per_env_step = 4  # as the runner sets it for Atari: our counters count frames
    progress = ProgressTracker(cfg)
    writers = SummaryWriters(tmp_path, 1, cfg=cfg)
    progress.add_samples(0, 4000, [(-21.0, 800), (-19.0, 900)])
    learner = {"value_loss": 0.5, "policy_loss": -0.1, "entropy": 1.7, "approx_kl": 0.01, "clip_fraction": 0.2}
    writers.add_train_stats(0, {**learner, "lr": 2.5e-4, "env_steps": 4000})
    writers.write(progress)
    writers.close()
    scalars = read_scalars(tmp_path / ".summary" / "0")
    assert scalars["reward/mean"] == [(4000, -20.0)]
    # CleanRL's loss tags beside ours (issue 53: only train/* were written)
    names = {"value_loss": "value_loss", "policy_loss": "policy_loss", "entropy": "entropy", "approx_kl": "approx_kl"}
    for ours, cleanrl in {**names, "clip_fraction": "clipfrac"}.items():
        assert scalars[f"losses/{cleanrl}"] == [(1000, pytest.approx(learner[ours]))], cleanrl
        assert scalars[f"train/{ours}"] == [(4000, pytest.approx(learner[ours]))]
    assert scalars["charts/learning_rate"] == [(1000, pytest.approx(2.5e-4))]
    assert scalars["charts/episodic_return"] == [(1000, -20.0)]  # x: agent steps, as CleanRL's global_step
    assert scalars["charts/episodic_length"] == [(1000, 850.0)]
    assert [s for s, _ in scalars["charts/SPS"]] == [1000]
    assert scalars["charts/SPS"][0][1] == pytest.approx(scalars["perf/fps_env_frames"][0][1] / 4)


class _Recorder:
    def __init__(self):
        self.rows = 0

    def progress_row(self, progress):
        self.rows += 1

    def points(self, progress):
        pass


def test_progress_points_every_n_env_steps_at_most_four_a_second():
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1", "--progress_every_env_steps=1000"])
    progress, recorder, now = ProgressTracker(cfg), _Recorder(), time.monotonic()
    points = ProgressPoints(cfg.progress_every_env_steps, recorder, now - 1)
    points.update(progress, now)  # 0 env steps: the first point
    progress.add_samples(0, 900, [])
    points.update(progress, now + 1)  # not at 1000 yet
    assert recorder.rows == 1
    progress.add_samples(0, 200, [])
    points.update(progress, now + 1.1)
    assert recorder.rows == 2 and points.next_at == 2000
    progress.add_samples(0, 5000, [])  # several multiples at once: one row
    points.update(progress, now + 1.2)  # 0.1 s after the last row: not yet
    assert recorder.rows == 2
    points.update(progress, now + 1.4)
    assert recorder.rows == 3 and points.next_at == 7000
    points.report(progress, now + 1.5)  # a report's row counts as the last row too
    progress.add_samples(0, 1000, [])
    points.update(progress, now + 1.6)
    assert recorder.rows == 4


def test_a_run_stopping_at_its_target_writes_the_row_that_reached_it():
    """A CartPole frames_to_score seed stopped at its target and found no row at it: the target was reached between
    two rows, and episodes counted during the shutdown moved the final row's mean back below it."""
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1", "--stats_avg=2"])
    progress, recorder, now = ProgressTracker(cfg), _Recorder(), time.monotonic()
    points = ProgressPoints(cfg.progress_every_env_steps, recorder, now)
    progress.add_samples(0, 100, [(10.0, 10), (10.0, 10)])
    points.at_stop(progress, now, 40.0)  # stopped for another reason: no row of its own
    points.at_stop(progress, now, None)
    assert recorder.rows == 0
    progress.add_samples(0, 100, [(50.0, 50), (50.0, 50)])
    points.at_stop(progress, now, 40.0)
    assert recorder.rows == 1
    synchronous = ProgressPoints(cfg.progress_every_env_steps, recorder, now, per_iteration=True)
    synchronous.at_stop(progress, now, 40.0)  # its rows come at whole iterations, the same in every run
    assert recorder.rows == 1


@pytest.mark.timeout(120)
def test_a_short_run_has_a_curve(tmp_path):
    """Progress lines every 100 s, i.e. never during the run: the rows and points come from the env steps."""
    args = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=short", "--serial_mode=True"]
    args += ["--num_workers=1", "--num_envs_per_worker=8", "--batch_size=256", "--device=cpu", "--use_rnn=False"]
    args += ["--encoder_mlp_layers=32", "--train_for_env_steps=30000", "--progress_every_env_steps=1000"]
    args += ["--report_interval_sec=100", "--experiment_summaries_interval=100"]
    run = Run(args)
    try:
        assert run.wait(100) == 0, run.output
    finally:
        run.kill()
    rows = _rows(tmp_path / "short" / "progress.csv")
    # A row per 1000 env steps, at most 4 a second (MAX_POINTS_PER_SEC), and the final one. So a fast VM writes
    # fewer: 30k env steps in 2.1 s gave 9 rows on one CI VM (13.5k env steps/s). Demand 10 rows, or where the run
    # was too short for them, 3 a second of its span (the reports alone, every 100 s, would give 1 row).
    span_s = float(rows[-1]["time_s"]) - float(rows[0]["time_s"])
    want = min(10, int(3 * span_s))
    assert len(rows) >= max(want, 2), (span_s, rows)
    steps = [int(r["env_steps"]) for r in rows]
    assert steps == sorted(steps) and steps[-1] >= 30000
    scalars = read_scalars(tmp_path / "short" / ".summary" / "0")
    assert len(scalars["perf/fps_env_steps"]) >= len(rows) - 1 and len(scalars["charts/SPS"]) >= len(rows) - 1


@pytest.fixture
def tiny_fs(tmp_path):
    from tests.experiment.test_checkpoint_safety import mount_tiny

    yield from mount_tiny(tmp_path / "tiny")


@pytest.mark.timeout(120)
def test_a_full_disk_stops_the_summaries_with_one_error_instead_of_blocking(tiny_fs):
    """tensorboardX's writer thread died on ENOSPC and the next add_scalar blocked forever (the run hung, deaf to
    signals, holding its lock). Here the write that fails raises one SummaryWriteError, later calls are no-ops
    (the run's shutdown goes on) and nothing blocks."""
    from tests.experiment.test_checkpoint_safety import fill

    cfg = parse_cfg(["--env=CartPole-v1"])
    writers = SummaryWriters(tiny_fs, 1, cfg=cfg)
    progress = ProgressTracker(cfg)
    progress.add_samples(0, 100, [(10.0, 10)])
    writers.write(progress)
    fill(tiny_fs, leave=0)
    errors: list[Exception] = []

    def keep_writing() -> None:
        try:
            for i in range(5000):
                writers.add_scalar(0, "train/x", float(i), i)
                writers.progress_row(progress)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=keep_writing, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "writing the summaries on a full disk blocked"
    assert len(errors) == 1 and isinstance(errors[0], summaries.SummaryWriteError), errors
    assert "No space left on device" in str(errors[0]) and str(tiny_fs) in str(errors[0])
    writers.progress_row(progress)  # after the failure: no-ops
    writers.write(progress)
    writers.add_scalar(0, "train/x", 1.0, 1)
    writers.close()


def test_a_resume_drops_the_rows_and_points_past_its_checkpoint(tmp_path):
    """After kill -9 the rows and points recorded past the last checkpoint stayed, and the resumed run's env steps
    went back below them. resume_at drops those rows and marks the session start (TensorBoard's purge), so both
    go forward only."""
    from sample_factory.tools.plot import read_scalars

    cfg = parse_cfg(["--env=CartPole-v1"])
    progress = ProgressTracker(cfg)
    writers = SummaryWriters(tmp_path, 1, cfg=cfg)
    for steps in (500, 500, 500):  # the killed session: 500, 1000, 1500 env steps
        progress.add_samples(0, steps, [(1.0, 10)])
        writers.progress_row(progress)
        writers.add_scalar(0, "reward/mean", 1.0, progress.env_frames[0])
    writers.close()
    resumed = ProgressTracker(cfg)
    resumed.resume(0, 1000)  # its last checkpoint
    writers = SummaryWriters(tmp_path, 1, cfg=cfg)
    assert writers.resume_at([1000]) == 1
    resumed.add_samples(0, 100, [(2.0, 10)])
    writers.progress_row(resumed)
    writers.add_scalar(0, "reward/mean", 2.0, resumed.env_frames[0])
    writers.close()
    assert [int(r["env_steps"]) for r in _rows(tmp_path / "progress.csv")] == [500, 1000, 1100]
    assert [step for step, _ in read_scalars(tmp_path / ".summary" / "0")["reward/mean"]] == [500, 1000, 1100]
