"""--summaries_use_frameskip: on Atari and VizDoom every env-step counter counts env frames (agent steps x
--env_frameskip), as Sample Factory does, and the progress line, the final summary, TensorBoard and progress.csv
say so; other envs, and the flag off, count agent steps."""

from __future__ import annotations

import csv
import re

import pytest

from sample_factory.config import parse_cfg
from sample_factory.envs.env_utils import frames_per_env_step
from sample_factory.experiment.checkpoints import checkpoint_dir, list_checkpoints
from sample_factory.experiment.progress import fps_tag, unit_name
from tests.integration.conftest import tensorboard_tags


@pytest.mark.parametrize(
    "argv, frames",
    [
        (["--env=atari_pong"], 4),
        (["--env=ALE/Breakout-v5", "--env_frameskip=3"], 3),
        (["--env=doom_basic"], 4),
        (["--env=atari_pong", "--summaries_use_frameskip=False"], 1),
        (["--env=CartPole-v1"], 1),
        (["--env=mujoco_hopper"], 1),
    ],
)
def test_frames_per_env_step(argv, frames):
    cfg = parse_cfg(argv)
    cfg.frames_per_env_step = frames_per_env_step(cfg)
    assert cfg.frames_per_env_step == frames
    assert unit_name(cfg) == ("env frames" if frames > 1 else "env steps")
    assert fps_tag(cfg) == ("perf/fps_env_frames" if frames > 1 else "perf/fps_env_steps")


@pytest.mark.timeout(240)
def test_atari_run_counts_frames_everywhere(tmp_path, capsys):
    pytest.importorskip("ale_py")
    from sample_factory.train import main

    argv = ["--env=atari_pong", "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=2", "--rollout=32"]
    argv += ["--batch_size=64", "--num_batches_per_epoch=1", "--num_epochs=1", "--use_rnn=False", "--seed=1"]
    argv += ["--train_for_env_steps=2048", f"--train_dir={tmp_path}", "--experiment=pong"]
    argv += ["--experiment_summaries_interval=1", "--report_interval_sec=1", "--decorrelate_envs_on_one_worker=False"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "reached 2048 env frames" in out  # the budget is in frames: 512 agent steps
    assert "(env frames/s) | env frames: " in out and "env frames in " in out, out[-2000:]
    trained = [int(x) for x in re.findall(r"samples collected/trained: \d+/(\d+)", out)]
    assert trained and 512 <= trained[-1] <= 2048 // 4 + 64, trained  # agent steps: a quarter of the frames
    cfg = parse_cfg(argv)
    ckpt = list_checkpoints(checkpoint_dir(cfg, 0))[-1]
    ckpt_frames = int(ckpt.stem.split("_")[2])
    assert ckpt_frames == 4 * trained[-1], (ckpt.name, trained[-1])  # the learner's counter is in frames too
    rows = list(csv.DictReader(open(tmp_path / "pong" / "progress.csv")))
    assert "env_frames" in rows[0] and int(rows[-1]["env_frames"]) >= 2048
    assert "perf/fps_env_frames" in tensorboard_tags(tmp_path / "pong" / ".summary" / "0")
