"""enjoy.py on an experiment trained here (CartPole, serial mode, in-process): headless evaluation, its printed
lines and eval_results.json, deterministic actions (checked against a rollout of our own), latest/best
checkpoints, mp4 videos, parallel evaluation through the runner, and one-line errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.evaluation.enjoy import main as enjoy_main
from sample_factory.evaluation.policy_api import load_policy
from sample_factory.experiment.checkpoints import list_checkpoints, save_best_checkpoint
from sample_factory.train import main as train_main
from tests.policy_helpers import fake_experiment, one_torch_thread, rollout_lengths
from tests.render_envs import ENV_ID as RENDER_ENV_ID

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN = [
    "--env=CartPole-v1",
    "--serial_mode=True",
    "--num_workers=1",
    "--num_envs_per_worker=8",
    "--batch_size=256",
    "--train_for_env_steps=20000",
    "--seed=1",
    "--device=cpu",
]
EPISODE_LINE = re.compile(r"^episode (\d+): reward (-?[\d.]+), length (\d+)$", re.M)
SUMMARY_LINE = re.compile(r"^(\d+) episodes: reward (-?[\d.]+) \+- ([\d.]+), length ([\d.]+) \+- ([\d.]+)$", re.M)


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory) -> Path:
    """`cp`: trained for 20000 steps (~6 s). `cp_best`: a copy with a best checkpoint added (the latest weights
    saved under best_* with policy version 1, so a test can tell which file was loaded)."""
    td = tmp_path_factory.mktemp("enjoy")
    with one_torch_thread():
        assert train_main([*TRAIN, "--experiment=cp", f"--train_dir={td}"]) == 0
    shutil.copytree(td / "cp", td / "cp_best")
    latest = list_checkpoints(td / "cp_best" / "checkpoint_p0")[-1]
    state = torch.load(latest, weights_only=False)
    state["policy_version"], state["env_steps"] = 1, 64
    save_best_checkpoint(td / "cp_best" / "checkpoint_p0", state, version=1, env_frames=64, metric=9.5)
    return td


def enjoy(td: Path, *args: str, experiment: str = "cp") -> int:
    with one_torch_thread():
        return enjoy_main([f"--experiment={experiment}", f"--train_dir={td}", *args])


def enjoy_subprocess(td: Path, *args: str, experiment: str = "cp", env: dict | None = None, timeout: float = 60):
    return subprocess.run(
        [sys.executable, "enjoy.py", f"--experiment={experiment}", f"--train_dir={td}", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def results(path: Path) -> dict:
    return json.loads(path.read_text())


def check_printed_matches_results(out: str, res: dict) -> None:
    eps = [(int(i), float(r), int(n)) for i, r, n in EPISODE_LINE.findall(out)]
    assert [i for i, _, _ in eps] == list(range(1, res["episodes"] + 1)), out
    assert [r for _, r, _ in eps] == pytest.approx(res["rewards"], abs=0.005)
    assert [n for _, _, n in eps] == res["lengths"]
    (summary,) = SUMMARY_LINE.findall(out)
    assert int(summary[0]) == res["episodes"]
    assert float(summary[1]) == pytest.approx(np.mean(res["rewards"]), abs=0.005)
    assert float(summary[2]) == pytest.approx(np.std(res["rewards"]), abs=0.005)
    assert res["reward_mean"] == pytest.approx(np.mean(res["rewards"]))
    assert res["reward_std"] == pytest.approx(np.std(res["rewards"]))
    assert res["length_mean"] == pytest.approx(np.mean(res["lengths"]))
    assert res["length_std"] == pytest.approx(np.std(res["lengths"]))


def test_headless_episodes_and_results_file(train_dir, capsys):
    assert enjoy(train_dir, "--no_render=True", "--max_num_episodes=3") == 0
    out = capsys.readouterr().out
    res = results(train_dir / "cp" / "eval_results.json")
    assert res["episodes"] == 3 and len(res["rewards"]) == len(res["lengths"]) == 3
    check_printed_matches_results(out, res)
    assert res["rewards"] == [float(n) for n in res["lengths"]]  # CartPole: +1 per step
    assert res["length_mean"] > 50, "a random policy lasts ~20 steps: the trained weights were not used"
    latest = list_checkpoints(train_dir / "cp" / "checkpoint_p0")[-1]
    assert res["checkpoint"] == str(latest) and res["checkpoint_env_steps"] > 0
    assert res["deterministic"] is False and res["load_checkpoint_kind"] == "latest"


def test_cli_renders_headless_when_no_window_can_open(train_dir, tmp_path):
    """Without --no_render: with DISPLAY pointing nowhere (and no pygame here) the window cannot open; enjoy says
    so in one line and evaluates anyway. --eval_results_file puts the summary elsewhere."""
    out_file = tmp_path / "sub" / "r.json"
    p = enjoy_subprocess(
        train_dir,
        "--max_num_episodes=2",
        f"--eval_results_file={out_file}",
        env={"DISPLAY": ":97", "SDL_VIDEODRIVER": "x11"},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    notices = [ln for ln in p.stdout.splitlines() if "evaluating headless" in ln]
    assert len(notices) == 1, p.stdout
    res = results(out_file)
    assert res["episodes"] == 2
    check_printed_matches_results(p.stdout, res)


def test_no_display_notice(train_dir, capsys, monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert enjoy(train_dir, "--max_num_episodes=1") == 0
    assert "no display" in capsys.readouterr().out


def test_deterministic_matches_own_rollout(train_dir, capsys):
    assert enjoy(train_dir, "--no_render=True", "--max_num_episodes=2", "--eval_deterministic=True") == 0
    res = results(train_dir / "cp" / "eval_results.json")
    assert res["deterministic"] is True
    assert "deterministic actions" in capsys.readouterr().out
    with one_torch_thread():
        expected = rollout_lengths(load_policy("cp", train_dir=train_dir), "CartPole-v1", 1, 2, True)
    assert res["lengths"] == expected


def test_recurrent_state_carried_and_reset(tmp_path, capsys):
    """A GRU policy with random weights (short episodes): enjoy's episodes equal a rollout that carries the state
    and zeroes it at every episode start."""
    env = gym.make("CartPole-v1")
    argv = ["--env=CartPole-v1", "--use_rnn=True", "--rnn_size=16", "--encoder_mlp_layers=16", "--seed=3"]
    fake_experiment(tmp_path, "rnn", argv, env.observation_space, env.action_space)
    assert enjoy(tmp_path, "--no_render=True", "--max_num_episodes=4", "--eval_deterministic", experiment="rnn") == 0
    res = results(tmp_path / "rnn" / "eval_results.json")
    policy = load_policy("rnn", train_dir=tmp_path)
    assert policy.recurrent
    with one_torch_thread():
        assert res["lengths"] == rollout_lengths(policy, "CartPole-v1", 3, 4, True)


def test_max_num_frames_stops_early(tmp_path, capsys):
    env = gym.make("CartPole-v1")
    argv = ["--env=CartPole-v1", "--use_rnn=False", "--encoder_mlp_layers=16", "--seed=0"]
    fake_experiment(tmp_path, "ff", argv, env.observation_space, env.action_space)
    assert enjoy(tmp_path, "--no_render", "--max_num_episodes=1000", "--max_num_frames=100", experiment="ff") == 0
    res = results(tmp_path / "ff" / "eval_results.json")
    assert 1 <= res["episodes"] < 1000 and sum(res["lengths"]) <= 100


def test_best_checkpoint(train_dir, capsys):
    assert enjoy(train_dir, "--no_render=True", "--load_checkpoint_kind=best") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no best checkpoint" in err[0] and "--load_checkpoint_kind=latest" in err[0], err

    args = ("--no_render=True", "--max_num_episodes=2", "--load_checkpoint_kind=best")
    assert enjoy(train_dir, *args, experiment="cp_best") == 0
    res = results(train_dir / "cp_best" / "eval_results.json")
    assert Path(res["checkpoint"]).name == "best_000000001_64_9.5000.pth"
    assert res["checkpoint_policy_version"] == 1 and res["load_checkpoint_kind"] == "best"
    assert res["episodes"] == 2


def _frames(path: Path) -> tuple[int, tuple]:
    import imageio.v2 as imageio

    reader = imageio.get_reader(path)
    try:
        return reader.count_frames(), reader.get_data(0).shape
    finally:
        reader.close()


def test_save_video(train_dir, capsys):
    """One replay.mp4 per evaluation (Sample Factory 2's name) with every episode; --video_per_episode=True adds
    <name>_ep<N>.mp4. An episode's video has the frame after reset plus one per step: length + 1 frames (63x95
    frames are padded to 64x96). --video_frames caps each file."""
    pytest.importorskip("imageio_ffmpeg")
    exp = train_dir / "cp"
    common = (f"--env=tests.render_envs:{RENDER_ENV_ID}", "--no_render=True", "--save_video=True")

    assert enjoy(train_dir, *common, "--max_num_episodes=2") == 0
    out = capsys.readouterr().out
    lengths = results(exp / "eval_results.json")["lengths"]
    assert re.findall(r"^video: (.*)$", out, re.M) == [str(exp / "replay.mp4")]
    assert _frames(exp / "replay.mp4") == (sum(n + 1 for n in lengths), (64, 96, 3))
    assert not list(exp.glob("*_ep*.mp4"))

    assert enjoy(train_dir, *common, "--max_num_episodes=2", "--video_per_episode=True", "--video_name=both") == 0
    out = capsys.readouterr().out
    lengths = results(exp / "eval_results.json")["lengths"]
    printed = re.findall(r"^video: (.*)$", out, re.M)
    assert printed == [str(exp / "both.mp4"), *(str(exp / f"both_ep{i}.mp4") for i in (1, 2))], printed
    assert _frames(exp / "both.mp4")[0] == sum(n + 1 for n in lengths)
    for i, n in enumerate(lengths, 1):
        assert _frames(exp / f"both_ep{i}.mp4") == (n + 1, (64, 96, 3))

    capped = ("--max_num_episodes=2", "--video_frames=10", "--video_per_episode=True", "--video_name=capped.mp4")
    assert enjoy(train_dir, *common, *capped) == 0
    assert [_frames(exp / name)[0] for name in ("capped.mp4", "capped_ep1.mp4", "capped_ep2.mp4")] == [10, 10, 10]
    capsys.readouterr()

    try:
        import pygame  # noqa: F401
    except ImportError:  # CartPole-v1's own renderer needs pygame: a clear error, not a traceback
        assert enjoy(train_dir, "--save_video=True", "--no_render=True") == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "cannot render frames" in err[0] and "pygame" in err[0], err


def test_video_extra_brings_what_cartpole_videos_need():
    """The README's video command (CartPole-v1 drawn by pygame) works after installing the [video] extra."""
    import ast

    tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    extras = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "EXTRAS_REQUIRE" for t in n.targets)
    )
    assert {"imageio", "imageio-ffmpeg", "pygame-ce"} <= set(extras["video"]), extras["video"]
    pins = {line.split("==")[0] for line in (REPO_ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    assert set(extras["video"]) <= pins


def test_documented_video_command_is_silent_headless(train_dir, tmp_path):
    """README: enjoy.py --env=CartPole-v1 ... --save_video=True --no_render=True on a machine without a display or
    XDG_RUNTIME_DIR: exit 0, replay.mp4 written, nothing on stderr (SDL printed `error: XDG_RUNTIME_DIR is invalid
    or not set`)."""
    pytest.importorskip("imageio_ffmpeg")
    pytest.importorskip("pygame", reason="CartPole-v1 draws with pygame: the [video] extra")
    shutil.copytree(train_dir / "cp", tmp_path / "cartpole")
    headless = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR")}
    headless = {k: v for k, v in headless.items() if not k.startswith(("SDL_", "PYGAME_"))}
    cmd = [sys.executable, "enjoy.py", "--env=CartPole-v1", "--experiment=cartpole", f"--train_dir={tmp_path}"]
    cmd += ["--save_video=True", "--no_render=True", "--max_num_episodes=1"]
    p = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=headless)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stderr == "", p.stderr
    assert f"video: {tmp_path / 'cartpole' / 'replay.mp4'}" in p.stdout
    assert _frames(tmp_path / "cartpole" / "replay.mp4")[1] == (400, 600, 3)


def test_parallel_evaluation_through_runner(train_dir):
    """--num_workers=2: actor and policy worker processes evaluate; the learner only loads the best checkpoint.
    Nothing in the experiment folder but eval_results.json changes."""
    exp = train_dir / "cp_best"
    before = {p.name: p.stat().st_mtime_ns for p in exp.rglob("*") if p.is_file() and p.name != "eval_results.json"}
    args = ["--num_workers=2", "--max_num_episodes=4", "--no_render=True", "--load_checkpoint_kind=best"]
    p = enjoy_subprocess(train_dir, *args, experiment="cp_best", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    res = results(exp / "eval_results.json")
    assert res["episodes"] == 4 and res["num_workers"] == 2
    check_printed_matches_results(p.stdout, res)
    assert Path(res["checkpoint"]).name.startswith("best_") and res["checkpoint_policy_version"] == 1
    # Policy workers act with the checkpoint's weights from the first step (a random policy lasts ~20 steps).
    assert res["length_mean"] > 50, res
    after = {p.name: p.stat().st_mtime_ns for p in exp.rglob("*") if p.is_file() and p.name != "eval_results.json"}
    assert after == before


def test_missing_experiment_or_checkpoint(train_dir, tmp_path, capsys):
    p = enjoy_subprocess(tmp_path, experiment="nope")
    assert p.returncode == 1
    assert p.stderr.strip() == f"enjoy: error: no experiment at {tmp_path / 'nope'} (cfg.json not found)", p.stderr

    (tmp_path / "empty").mkdir()
    shutil.copy(train_dir / "cp" / "cfg.json", tmp_path / "empty" / "cfg.json")
    assert enjoy(tmp_path, "--no_render=True", experiment="empty") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("enjoy: error: no checkpoint in"), err


def _echo_experiment(td: Path, experiment: str, *argv: str) -> Path:
    """A fake experiment on the OptionEcho env (episodes of env_frameskip steps paying env_sticky_actions each)."""
    from tests.evaluation.option_env import ENV_ID, OptionEchoEnv

    env = OptionEchoEnv(4, 0.25)
    flags = [f"--env=tests.evaluation.option_env:{ENV_ID}", "--use_rnn=False", "--encoder_mlp_layers=16", *argv]
    return fake_experiment(td, experiment, flags, env.observation_space, env.action_space)[0]


def test_env_overrides_reach_the_env_and_the_results(tmp_path, capsys, monkeypatch):
    """--eval_env_overrides goes on top of cfg.json and of flags typed now; eval_results.json records it with the
    policy evaluated. A bad override is one line and exit code 1."""
    monkeypatch.chdir(REPO_ROOT)  # `--env=tests.evaluation...` is imported by module name
    _echo_experiment(tmp_path, "echo")
    args = ("--no_render=True", "--max_num_episodes=2", "--env_frameskip=9")
    assert enjoy(tmp_path, *args, experiment="echo") == 0
    assert results(tmp_path / "echo" / "eval_results.json")["lengths"] == [9, 9]  # the typed flag
    overrides = "--eval_env_overrides=env_frameskip=3, env_sticky_actions=0.5"
    assert enjoy(tmp_path, *args, overrides, experiment="echo") == 0
    res = results(tmp_path / "echo" / "eval_results.json")
    assert res["lengths"] == [3, 3] and res["rewards"] == [1.5, 1.5]
    assert res["env_overrides"] == {"env_frameskip": 3, "env_sticky_actions": 0.5} and res["policy_index"] == 0
    assert "env overrides env_frameskip=3, env_sticky_actions=0.5" in capsys.readouterr().out

    assert enjoy(tmp_path, "--no_render=True", "--eval_env_overrides=learning_rate=1", experiment="echo") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("enjoy: error: --eval_env_overrides: learning_rate is not an env"), err


def test_policy_index_checkpoint_is_checked(tmp_path, capsys, monkeypatch):
    """--policy_index=1 looks for checkpoint_p1 (not checkpoint_p0) before anything starts."""
    monkeypatch.chdir(REPO_ROOT)
    exp = _echo_experiment(tmp_path, "two", "--num_policies=2")
    assert enjoy(tmp_path, "--no_render=True", "--policy_index=1", experiment="two") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"enjoy: error: no checkpoint in {exp / 'checkpoint_p1'}: the run has not saved one yet"], err
