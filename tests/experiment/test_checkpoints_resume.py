"""Checkpoints and resume, end to end on CartPole: keep-N rotation, the best checkpoint, bit-identical serial
resume, resume after SIGINT (multi-process), refusal of an architecture change, and falling back to the previous
checkpoint when the latest one is corrupted."""

from __future__ import annotations

import csv
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import sample_factory.workers.learner as learner_module
from sample_factory.config import Config
from sample_factory.experiment.best_checkpoints import BestCheckpoints
from sample_factory.experiment.checkpoints import best_metric_of, list_best_checkpoints, list_checkpoints
from sample_factory.runtime.messages import SAVE_BEST, SaveBest, decode
from sample_factory.train import main as train_main
from tests.policy_helpers import Run, one_torch_thread

REPO_ROOT = Path(__file__).resolve().parents[2]
SERIAL = [
    "--env=CartPole-v1",
    "--serial_mode=True",
    "--num_workers=1",
    "--num_envs_per_worker=8",
    "--batch_size=256",
    "--rollout=32",
    "--seed=1",
    "--device=cpu",
]
RESUMED = re.compile(r"policy 0 resumed from (\S+) at (\d+) env steps")


def train(train_dir: Path, experiment: str, *extra: str) -> int:
    with one_torch_thread():
        return train_main([*SERIAL, f"--experiment={experiment}", f"--train_dir={train_dir}", *extra])


def ckpt_key(path: Path) -> tuple[int, int]:
    """(policy version, env steps) from checkpoint_<version>_<steps>.pth."""
    _, version, steps = path.stem.split("_")
    return int(version), int(steps)


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    """A serial run of 5 s that saves every second (keep 2) and checks the best metric every second from the
    first step on. (The seconds include the run's start-up: 3.5 s gave 4 saves at load 9, one more than the
    3 needed.) The learner's save functions are wrapped (serial mode: the learner runs in this process) to record
    every save: the paths written and the metric of each best checkpoint."""
    td = tmp_path_factory.mktemp("saves")
    record = SimpleNamespace(checkpoints=[], best=[])
    orig_save, orig_best = learner_module.save_checkpoint, learner_module.save_best_checkpoint

    def save_checkpoint(directory, state, version, env_steps, keep):
        path = orig_save(directory, state, version, env_steps, keep)
        record.checkpoints.append(path)
        return path

    def save_best_checkpoint(directory, state, version, env_steps, metric):
        path = orig_best(directory, state, version, env_steps, metric)
        record.best.append((metric, path))
        return path

    mp = pytest.MonkeyPatch()
    mp.setattr(learner_module, "save_checkpoint", save_checkpoint)
    mp.setattr(learner_module, "save_best_checkpoint", save_best_checkpoint)
    try:
        flags = ["--train_for_seconds=5", "--save_every_sec=1", "--keep_checkpoints=2"]
        flags += ["--save_best_after=0", "--save_best_every_sec=1"]
        assert train(td, "saves", *flags) == 0
    finally:
        mp.undo()
    record.train_dir, record.exp_dir = td, td / "saves"
    return record


def test_keep_n_leaves_exactly_n(saves):
    assert len(saves.checkpoints) >= 3, f"expected several saves in 5 s, got {saves.checkpoints}"
    left = list_checkpoints(saves.exp_dir / "checkpoint_p0")
    # the final save may rewrite the last periodic one (no training in between: the same version and env steps)
    written = list(dict.fromkeys(saves.checkpoints))
    assert left == written[-2:], (left, saves.checkpoints)
    assert sorted(p.name for p in left[0].parent.glob("checkpoint_*.pth")) == [p.name for p in left]
    assert not list(left[0].parent.glob(".*.tmp")), "a temporary file of an atomic write was left behind"


def test_best_checkpoint_is_the_best_metric_seen(saves):
    """The observable: the metric of every best checkpoint written (what the runner measured at its checks, the
    mean reward of the last --stats_avg episodes) must strictly increase, exactly one best_*.pth remains, and it
    is the last (= highest) one, with that metric in its name and matching counters inside."""
    metrics = [m for m, _ in saves.best]
    assert metrics, "no best checkpoint written"
    assert all(b > a for a, b in zip(metrics, metrics[1:])), f"a best checkpoint without improvement: {metrics}"
    (best,) = list_best_checkpoints(saves.exp_dir / "checkpoint_p0")
    assert best == saves.best[-1][1]
    assert best_metric_of(best) == pytest.approx(max(metrics), abs=5e-5)
    version, steps = (int(x) for x in best.stem.split("_")[1:3])
    state = torch.load(best, weights_only=False)
    assert (state["policy_version"], state["env_steps"]) == (version, steps)


def _best_checkpoints(best: float | None = None) -> tuple[BestCheckpoints, SimpleNamespace, list]:
    sent: list = []
    cfg = Config.from_dict(dict(num_policies=1, save_best_after=0, save_best_metric="reward", evaluation_run=False))
    tracker = BestCheckpoints(cfg, lambda p, value: sent.append(SaveBest.wire(value)))
    if best is not None:
        tracker.on_resumed_best(0, best)
    progress = SimpleNamespace(total_env_frames=lambda: 10**6, value=None)
    progress.metric = lambda policy, name: progress.value
    return tracker, progress, sent


def test_best_saved_only_on_improvement():
    """The runner's rule, driven with a fake metric sequence: SAVE_BEST only for a new maximum; None (too few
    episodes yet) never; a best found on resume (reported by the learner) is the bar to beat."""
    tracker, progress, sent = _best_checkpoints()
    for value in (None, 5.0, 3.0, 5.0, 7.5, 7.0, 9.0):
        progress.value = value
        tracker.check(progress)
    assert [decode(m) for m in sent] == [SaveBest(SAVE_BEST, 5.0), SaveBest(SAVE_BEST, 7.5), SaveBest(SAVE_BEST, 9.0)]
    tracker, progress, sent = _best_checkpoints(best=8.0)
    for value in (7.0, 8.0, 8.5):
        progress.value = value
        tracker.check(progress)
    assert [decode(m).metric_value for m in sent] == [8.5]


ATARI = [
    "--env=atari_breakout",  # lives (episodic life) and FIRE resets
    "--env_sticky_actions=0.25",  # the emulator's RNG must travel too
    "--num_envs_per_worker=2",
    "--batch_size=64",
    "--num_batches_per_epoch=1",
    "--num_epochs=1",
    "--use_rnn=False",
]


@pytest.mark.parametrize(
    "flags,first,total",
    [
        ([], 3000, 8000),
        (ATARI, 2048, 4096),  # Atari budgets in frames: 512 and 1,024 agent steps
        # the policy worker's exploration matrices (with their ages and generator) travel in the snapshot
        (["--env=Pendulum-v1", "--use_sde=True", "--sde_sample_freq=50"], 3000, 8000),
    ],
    ids=["cartpole", "atari", "gsde"],
)
def test_exact_serial_resume(tmp_path, capsys, flags, first, total):
    """train N, stop, resume to N + M  ==  train N + M: identical final checkpoint, bit for bit (Atari: the emulator
    state travels with the env in the snapshot, envs/atari_frames.py), and the same final mean reward (the episode
    window, 1,000 episodes wide so that it spans the stop, travels too)."""
    flags = [*flags, "--stats_avg=1000"]
    assert train(tmp_path, "split", *flags, f"--train_for_env_steps={first}") == 0
    capsys.readouterr()
    assert train(tmp_path, "split", *flags, f"--train_for_env_steps={total}") == 0
    out = capsys.readouterr().out
    assert re.search(r"exact resume from the serial snapshot at \d+ env (?:steps|frames)", out), out
    assert train(tmp_path, "straight", *flags, f"--train_for_env_steps={total}") == 0

    (a_path,), (b_path,) = (list_checkpoints(tmp_path / e / "checkpoint_p0")[-1:] for e in ("split", "straight"))
    assert a_path.name == b_path.name
    a, b = (torch.load(p, weights_only=False) for p in (a_path, b_path))
    assert a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]), "weights differ"
    opt_a, opt_b = a["algo"]["optimizer"]["state"], b["algo"]["optimizer"]["state"]
    assert all(torch.equal(opt_a[i][k], opt_b[i][k]) for i in opt_a for k in opt_a[i]), "optimizer state differs"
    last = [list(csv.DictReader((tmp_path / e / "progress.csv").open()))[-1] for e in ("split", "straight")]
    for row in last:
        del row["time_s"], row["fps_10s"]
    assert last[0] == last[1], last  # the env steps and the mean reward


@pytest.fixture
def runs():
    started: list[Run] = []
    yield lambda args: started.append(Run(args)) or started[-1]
    for r in started:
        r.kill()


@pytest.mark.timeout(120)
def test_resume_after_sigint(tmp_path, runs):
    base = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=mp", "--num_workers=2", "--device=cpu"]
    base += ["--report_interval_sec=0.5"]
    first = runs([*base, "--train_for_env_steps=100000000"])
    deadline = time.monotonic() + 60
    while first.samples_trained() == 0 and first.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)  # the learner has trained: the checkpoint saved at the stop has policy version > 0
    assert first.samples_trained() > 0, first.output
    first.proc.send_signal(signal.SIGINT)
    assert first.wait(30) == 130, first.output  # saved, interrupted: not finished
    assert "stopping: SIGINT received" in first.output
    v1, s1 = ckpt_key(list_checkpoints(tmp_path / "mp" / "checkpoint_p0")[-1])
    assert v1 > 0 and s1 > 0

    second = runs([*base, f"--train_for_env_steps={s1 + 20000}"])
    assert second.wait(90) == 0, second.output
    m = RESUMED.search(second.output)
    assert m and Path(m.group(1)).name == f"checkpoint_{v1:09d}_{s1}.pth" and int(m.group(2)) == s1, second.output
    # A checkpoint counts the env steps the learner trained on; the budget counts collected ones (more).
    v2, s2 = ckpt_key(list_checkpoints(tmp_path / "mp" / "checkpoint_p0")[-1])
    assert v2 > v1 and s2 > s1, (v1, s1, v2, s2)


def test_resume_refuses_architecture_change(saves):
    """A subprocess: the CLI user's view (and a refused run leaves its lock behind in the calling process)."""
    args = [*SERIAL, f"--train_dir={saves.train_dir}", "--experiment=saves", "--encoder_mlp_layers=32,32"]
    p = subprocess.run([sys.executable, "train.py", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    out = p.stdout + p.stderr
    assert "Traceback" not in out, out
    errors = [ln for ln in out.splitlines() if "encoder_mlp_layers" in ln]
    assert len(errors) == 1 and "cannot change on resume" in errors[0], out


def test_corrupted_latest_checkpoint_falls_back(saves, capsys):
    ckpt_dir = saves.exp_dir / "checkpoint_p0"
    previous, latest = list_checkpoints(ckpt_dir)[-2:]
    latest.write_bytes(latest.read_bytes()[: latest.stat().st_size // 2])  # truncated, as by a full disk
    # The serial snapshot names the latest checkpoint and holds the learner's whole state, so a serial resume
    # would not read the checkpoint at all: remove it to resume from the checkpoint files.
    (saves.exp_dir / "serial_state.pth").unlink()
    capsys.readouterr()
    assert train(saves.train_dir, "saves", f"--train_for_env_steps={ckpt_key(previous)[1] + 2048}") == 0
    out = capsys.readouterr().out
    assert f"checkpoint {latest} failed to load" in out and "trying the previous one" in out, out
    m = RESUMED.search(out)
    assert m and Path(m.group(1)) == previous and int(m.group(2)) == ckpt_key(previous)[1], out


def test_new_best_lines_are_rate_limited(tmp_path, monkeypatch, capsys):
    """A new best on nearly every report made the console noisy: the first of each policy, then at most one per
    BEST_LINE_INTERVAL_S; sf_log.txt keeps every one."""
    import sample_factory.experiment.best_checkpoints as best_module

    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(best_module.time, "monotonic", lambda: clock.now)
    tracker = BestCheckpoints(Config.from_dict(dict(num_policies=2)), lambda p, value: None)
    log_file = tmp_path / "sf_log.txt"
    best_module.log.open(log_file)
    try:
        for t, policy in [(0, 0), (5, 0), (10, 1), (30, 0), (61, 0), (65, 0), (75, 1)]:
            clock.now = 1000.0 + t
            tracker.on_saved(policy, f"best_t{t}.pth")
    finally:
        best_module.log.close()
    console = re.findall(r"new best checkpoint (\S+)", capsys.readouterr().out)
    assert console == ["best_t0.pth", "best_t10.pth", "best_t61.pth", "best_t75.pth"], console
    assert len(re.findall("new best checkpoint", log_file.read_text())) == 7
