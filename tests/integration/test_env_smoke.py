"""Multi-process training smoke runs of the built-in env families (train.py as a subprocess): each trains for
8,192 env steps (frames on Atari and VizDoom: 2,048 agent steps, 16 batches of 128) with 2 workers and small
batches, exits 0 after training on some samples, and leaves nothing behind.
Skipped, naming the extra, when the family's package is not installed."""

from __future__ import annotations

import json
import re

import pytest
import torch

from tests.integration.conftest import TrainRun, progress_samples_trained

# Small on purpose: several SGD steps within seconds on a loaded 2-core machine. The runs end at their env-step
# budget (6-9 s, most of it start-up; they trained for a fixed 15 s before); the time limit only caps a stall.
SMALL = [
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--batch_size=128",
    "--train_for_env_steps=8192",
    "--train_for_seconds=60",
    "--report_interval_sec=1",
    "--device=cpu",
]


def smoke(train_run, tmp_path, env_id: str, extra: tuple[str, ...] = ()) -> TrainRun:
    run = train_run([*SMALL, *extra], tmp_path / "td", env_id=env_id)
    rc = run.wait(timeout=120)
    assert rc == 0, run.describe()
    trained = progress_samples_trained(run) or 0
    assert trained > 0, f"nothing trained\n{run.describe()}"
    assert run.checkpoints(), f"no checkpoint written\n{run.describe()}"
    run.assert_no_leftovers()
    return run


@pytest.mark.timeout(180)
def test_atari_smoke(tmp_path, train_run):
    pytest.importorskip("ale_py", reason="Atari needs the [atari] extra: pip install -e .[atari]")
    pytest.importorskip("cv2", reason="Atari needs the [atari] extra (opencv-python-headless): pip install -e .[atari]")
    # Breakout has lives and needs FIRE: the run goes through the episodic-life and fire-reset wrappers.
    run = smoke(train_run, tmp_path, "ALE/Breakout-v5")
    # the atari preset's --inference_precision=auto: bf16 conv inference where it timed faster at the start (only
    # timed where the CPU runs bf16 natively), as the runner's line says
    timed = re.search(r"--inference_precision=(bf16|fp32) \(inference of", run.output)
    assert bool(timed) == torch.ops.mkldnn._is_mkldnn_bf16_supported(), run.describe()
    bf16 = bool(timed) and timed.group(1) == "bf16"
    assert ("conv encoders infer in bfloat16" in run.output) == bf16, run.describe()


@pytest.mark.timeout(180)
def test_mujoco_smoke(tmp_path, train_run):
    pytest.importorskip("mujoco", reason="MuJoCo needs the [mujoco] extra: pip install -e .[mujoco]")
    smoke(train_run, tmp_path, "mujoco_halfcheetah")


@pytest.mark.timeout(180)
def test_vizdoom_smoke(tmp_path, train_run):
    pytest.importorskip("vizdoom", reason="VizDoom needs the [vizdoom] extra: pip install -e .[vizdoom]")
    # Dict observations (screen + game variables) through buffers, conv + MLP encoders and the learner.
    smoke(train_run, tmp_path, "doom_health_gathering", ("--encoder_mlp_layers=64",))


@pytest.mark.timeout(180)
def test_envpool_smoke(tmp_path, train_run):
    pytest.importorskip("envpool", reason="EnvPool needs the [envpool] extra: pip install -e .[envpool]")
    smoke(train_run, tmp_path, "atari_breakout", ("--env_backend=envpool",))


@pytest.mark.timeout(180)
def test_pettingzoo_smoke(tmp_path, train_run):
    pytest.importorskip("pettingzoo", reason="PettingZoo needs the [pettingzoo] extra: pip install -e .[pettingzoo]")
    pytest.importorskip("pygame", reason="PettingZoo's butterfly envs need pygame-ce (in the [pettingzoo] extra)")
    # 4 agents that die one by one: inactive columns, one policy for all agents.
    smoke(train_run, tmp_path, "pettingzoo.butterfly.knights_archers_zombies_v11", ("--use_rnn=False",))


@pytest.mark.timeout(180)
def test_gymnasium_image_env_smoke(tmp_path, train_run):
    pytest.importorskip("Box2D", reason="CarRacing needs the [box2d] extra: pip install -e .[box2d]")
    # A gymnasium id no family names, with [H, W, C] frames and continuous actions: the `image` space preset (the
    # atari preset's conv net reading the frames channels-last). 1,024 steps (8 batches): CarRacing steps at ~100/s
    # per core, and this test cost 51 CPU-s with 2,048.
    run = smoke(train_run, tmp_path, "CarRacing-v3", ("--train_for_env_steps=1024",))
    assert "obs (96, 96, 3)" in run.output, run.describe()
    cfg = json.loads((run.train_dir / run.experiment / "cfg.json").read_text())
    assert cfg["preset"] == "image" and cfg["encoder_conv_architecture"] == "convnet_simple"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_minatar_smoke(tmp_path, train_run, algo):
    pytest.importorskip("minatar", reason="MinAtar needs the [minatar] extra: pip install -e .[minatar]")
    # bool [C, 10, 10] grids through the workers' buffers, the minatar presets' small conv net and, for DQN, the replay
    extra = ("--algo=DQN", "--learning_starts=1024", "--training_intensity=4") if algo == "DQN" else ()
    run = smoke(train_run, tmp_path, "MinAtar/Breakout-v1", extra)
    cfg = json.loads((run.train_dir / run.experiment / "cfg.json").read_text())
    assert cfg["preset"] == ("minatar_dqn" if algo == "DQN" else "minatar"), run.describe()
