"""Whole DQN runs, in process (serial mode, CartPole, seconds each): training goes through the learner and the policy
workers with the replay, the checkpoint holds the target network (and the buffer only with --save_replay_buffer),
enjoy.py evaluates greedily, and a resume from the checkpoint without the buffer refills it before training again
(with it, replaying goes on at once)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sample_factory.config import PRESETS
from sample_factory.evaluation.enjoy import main as enjoy_main
from sample_factory.evaluation.policy_api import load_policy
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.train import main as train_main
from tests.policy_helpers import one_torch_thread
from tests.reliability.test_faults import scalar_values

DQN = [
    "--env=CartPole-v1",
    "--algo=DQN",
    "--serial_mode=True",
    "--num_workers=1",
    "--num_envs_per_worker=8",
    "--batch_size=64",
    "--num_batches_per_epoch=4",
    "--encoder_mlp_layers=32",
    "--learning_starts=1000",
    "--seed=1",
    "--device=cpu",
]


DQN_INTENSITY = PRESETS["classic_control_dqn"]["training_intensity"]


def train(td, *extra: str) -> int:
    with one_torch_thread():
        return train_main([*DQN, f"--train_dir={td}", *extra])


@pytest.mark.timeout(240)
def test_dqn_serial_run_checkpoint_enjoy_and_resume(tmp_path):
    assert train(tmp_path, "--experiment=dqn", "--train_for_env_steps=6000") == 0
    exp = tmp_path / "dqn"
    state = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], weights_only=False)
    assert set(state["algo"]) == {"optimizer", "target", "counters"}  # no replay without --save_replay_buffer
    assert state["algo"]["counters"]["sampled"] >= 6000 and state["policy_version"] > 0
    sizes = scalar_values(exp / ".summary" / "0", "train/replay_size")
    ratio = scalar_values(exp / ".summary" / "0", "train/replay_ratio")
    assert sizes[-1] >= 6000 and ratio[-1] == pytest.approx(DQN_INTENSITY, rel=0.1)

    # greedy evaluation: enjoy forces deterministic (argmax Q) actions
    with one_torch_thread():
        assert enjoy_main([f"--train_dir={tmp_path}", "--experiment=dqn", "--no_render", "--max_num_episodes=2"]) == 0
    res = json.loads((exp / "eval_results.json").read_text())
    assert res["deterministic"] is True and res["episodes"] == 2
    policy = load_policy(exp)
    obs = torch.randn(16, 4).numpy()
    a1, _ = policy.act_batch(obs)
    a2, _ = policy.act_batch(obs)
    assert (a1 == a2).all()  # the policy API acts greedily too, without being asked
    # --eval_epsilon: a random action with that probability, unless deterministic=True is asked for
    explorer = load_policy(exp, eval_epsilon=1.0)
    drawn = np.concatenate([explorer.act_batch(np.repeat(obs[:1], 400, axis=0))[0] for _ in range(2)])
    assert set(drawn.tolist()) == {0, 1}
    assert (explorer.act_batch(obs, deterministic=True)[0] == a1).all()
    with one_torch_thread():
        assert enjoy_main([f"--train_dir={tmp_path}", "--experiment=dqn", "--no_render", "--max_num_episodes=2",
                           "--eval_epsilon=0.5"]) == 0  # fmt: skip
    assert json.loads((exp / "eval_results.json").read_text())["deterministic"] is False

    # resume without the buffer: it refills to --learning_starts before the next SGD step (from the checkpoint,
    # as a multi-process run resumes: serial mode's exact-resume snapshot would bring the whole learner back)
    (exp / "serial_state.pth").unlink()
    steps_before = len(scalar_values(exp / ".summary" / "0", "train/sgd_steps"))
    assert train(tmp_path, "--experiment=dqn", "--train_for_env_steps=9000") == 0
    sgd = scalar_values(exp / ".summary" / "0", "train/sgd_steps")[steps_before:]
    sizes = scalar_values(exp / ".summary" / "0", "train/replay_size")[steps_before:]
    assert sizes[0] < 1000 and sgd[0] == 0 and sum(sgd) > 0, (sizes, sgd)


@pytest.mark.timeout(240)
def test_dqn_resume_with_the_saved_replay_buffer(tmp_path):
    assert train(tmp_path, "--experiment=r", "--train_for_env_steps=4000", "--save_replay_buffer=True") == 0
    exp = tmp_path / "r"
    state = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], weights_only=False)
    assert state["algo"]["replay"]["filled_blocks"] > 0
    n = len(scalar_values(exp / ".summary" / "0", "train/sgd_steps"))
    (exp / "serial_state.pth").unlink()  # resume from the checkpoint
    assert train(tmp_path, "--experiment=r", "--train_for_env_steps=6000", "--save_replay_buffer=True") == 0
    sgd = scalar_values(exp / ".summary" / "0", "train/sgd_steps")[n:]
    sizes = scalar_values(exp / ".summary" / "0", "train/replay_size")[n:]
    assert sizes[0] > 4000 and sgd[0] > 0, (sizes, sgd)  # kept replaying at once


@pytest.mark.timeout(300)
def test_dqn_atari_serial_run_replays_single_frames(tmp_path):
    """DQN on Pong with the atari_dqn preset (a few hundred agent steps): the actors' first slots start mid-episode
    after their decorrelation steps, the replay stores frames once and rebuilds the stacks, and training replays."""
    pytest.importorskip("ale_py", reason="Atari needs the [atari] extra: pip install -e .[atari]")
    pytest.importorskip("cv2", reason="Atari needs the [atari] extra (opencv-python-headless): pip install -e .[atari]")
    args = ["--env=atari_pong", "--algo=DQN", "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=4"]
    args += ["--batch_size=32", "--num_batches_per_epoch=2", "--learning_starts=128", "--replay_buffer_capacity=4096"]
    args += ["--train_for_env_steps=2048", "--save_replay_buffer=True", "--seed=1", "--device=cpu"]
    with one_torch_thread():
        assert train_main([*args, f"--train_dir={tmp_path}", "--experiment=pong"]) == 0
    exp = tmp_path / "pong"
    assert json.loads((exp / "cfg.json").read_text())["preset"] == "atari_dqn"
    assert sum(scalar_values(exp / ".summary" / "0", "train/sgd_steps")) > 0
    replay = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], weights_only=False)["algo"]["replay"]
    assert not replay["obs"] and replay["frames"]["obs"].shape[-2:] == (84, 84)  # [blocks, T + 4, 84, 84]
    assert replay["filled_blocks"] > 0


@pytest.mark.timeout(240)
def test_a_resumed_replay_buffer_survives_every_save_and_a_misfit_is_refused(tmp_path, capsys):
    """A resume that saves before its first batch (here: the budget is already reached, as with a Ctrl+C right
    after the "resumed from" line) writes the same file name again: it must still hold the buffer. A resume whose
    --replay_buffer_capacity does not fit the saved buffer is refused before anything runs, files untouched."""
    flags = ["--experiment=r", "--save_replay_buffer=True"]
    assert train(tmp_path, *flags, "--train_for_env_steps=3000") == 0
    d = tmp_path / "r" / "checkpoint_p0"
    (path,) = list_checkpoints(d)[-1:]
    saved = torch.load(path, weights_only=True)["algo"]["replay"]
    (tmp_path / "r" / "serial_state.pth").unlink()  # resume from the checkpoint, as a multi-process run does
    assert train(tmp_path, *flags, "--train_for_env_steps=3000") == 0
    assert list_checkpoints(d)[-1] == path  # the same version and env steps: the same file, written again
    again = torch.load(path, weights_only=True)["algo"]["replay"]
    assert again["filled_blocks"] == saved["filled_blocks"] and torch.equal(again["valid"], saved["valid"])

    (tmp_path / "r" / "serial_state.pth").unlink(missing_ok=True)
    files = {p.name: p.read_bytes() for p in d.iterdir()}
    capsys.readouterr()
    assert train(tmp_path, *flags, "--train_for_env_steps=9000", "--replay_buffer_capacity=300000") != 0
    out = capsys.readouterr().out
    errors = [ln for ln in out.splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and "--replay_buffer_capacity=300000" in errors[0] and "does not fit" in errors[0], out
    assert "Traceback" not in out, out
    assert {p.name: p.read_bytes() for p in d.iterdir()} == files, "a refused resume changed the checkpoints"
