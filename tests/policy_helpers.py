"""Experiments for the policy API / ONNX / plot tests: a tiny real training run (serial mode, in-process) or a fake
experiment (cfg.json + a checkpoint of a freshly built model with randomised weights, no training)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import gymnasium as gym
import torch

from sample_factory.config import parse_cfg
from sample_factory.experiment.checkpoints import save_checkpoint
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.train import main as train_main

# 4096 steps from 4 envs: ~2-4 s on a 2-core machine; many finished CartPole episodes, so reward/mean is written.
TINY_RUN = [
    "--serial_mode=True",
    "--num_workers=1",
    "--train_for_env_steps=4096",
    "--num_envs_per_worker=4",
    "--batch_size=128",
    "--rollout=32",
    "--seed=1",
    "--device=cpu",
]


@contextlib.contextmanager
def one_torch_thread():
    """Tiny tensors: with 2 intra-op threads on a loaded 2-core machine a 4096-step serial run took 10-30 s
    instead of ~2.5 s (serial mode runs in the caller's process and keeps its thread count)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def train_tiny(train_dir: Path, experiment: str, *extra: str, env: str = "CartPole-v1") -> Path:
    """Train in this process; returns the experiment folder."""
    argv = [f"--env={env}", f"--experiment={experiment}", *TINY_RUN, *extra, "--train_dir", str(train_dir)]
    with one_torch_thread():
        assert train_main(argv) == 0
    return train_dir / experiment


def fake_experiment(
    train_dir: Path, experiment: str, argv: list[str], obs_space: gym.Space, action_space: gym.Space, seed: int = 0
) -> tuple[Path, ActorCritic]:
    """An experiment folder as training leaves it, with a model whose weights are all random (so that logits,
    values and states are far from the near-zero outputs of a fresh init and a comparison means something)."""
    cfg = parse_cfg([f"--experiment={experiment}", "--train_dir", str(train_dir), *argv])
    torch.manual_seed(seed)
    model = ActorCritic(cfg, obs_space, action_space)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    exp_dir = train_dir / experiment
    exp_dir.mkdir(parents=True, exist_ok=True)
    (exp_dir / "cfg.json").write_text(json.dumps(vars(cfg)))
    state = {"model": model.state_dict(), "policy_version": 7, "env_steps": 123, "cfg": vars(cfg)}
    save_checkpoint(exp_dir / "checkpoint_p0", state, version=7, env_frames=123, keep=2)
    return exp_dir, model.eval()


def rollout_lengths(policy, env_id: str, seed: int, episodes: int, deterministic: bool) -> list[int]:
    """What enjoy does: reset(seed) once, carry the state, reset it at episode ends; the episode lengths."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    lengths = []
    state, n = policy.initial_state(), 0
    while len(lengths) < episodes:
        action, state = policy.act(obs, state, deterministic=deterministic)
        obs, _, term, trunc, _ = env.step(action)
        n += 1
        if term or trunc:
            lengths.append(n)
            n = 0
            obs, _ = env.reset()
            state = policy.initial_state()
    env.close()
    return lengths


class Run:
    """train.py in a subprocess (own session), output collected by a thread; killed by pid at teardown."""

    def __init__(self, args: list[str]):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("SF_DEBUG", None)
        self.proc = subprocess.Popen(
            [sys.executable, "train.py", *args],
            cwd=Path(__file__).resolve().parent.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(ln.rstrip("\n") for ln in self.proc.stdout))
        self.reader.start()

    @property
    def output(self) -> str:
        return "\n".join(list(self.lines))

    def samples_trained(self) -> int:
        found = re.findall(r"samples collected/trained: \d+/(\d+)", self.output)
        return int(found[-1]) if found else 0

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout)
        self.reader.join(10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session this test started, by its id
            self.proc.wait(10)
        self.reader.join(10)


def assert_cpu_and_cuda_agree(experiment: str, train_dir: Path, batch: int):
    """The experiment's policy loaded on the CPU and on CUDA gives the same greedy actions and (nearly) the same
    recurrent state on a batch of random CartPole-sized observations; returns the CUDA policy."""
    import numpy as np

    from sample_factory.evaluation.policy_api import load_policy

    cpu = load_policy(experiment, train_dir=train_dir, device="cpu")
    gpu = load_policy(experiment, train_dir=train_dir, device="cuda")
    obs = np.random.default_rng(0).standard_normal((batch, 4)).astype(np.float32)
    a_cpu, h_cpu = cpu.act_batch(obs, cpu.initial_state(batch), deterministic=True)
    a_gpu, h_gpu = gpu.act_batch(obs, gpu.initial_state(batch), deterministic=True)
    np.testing.assert_array_equal(a_cpu, a_gpu)
    np.testing.assert_allclose(h_cpu, h_gpu, atol=1e-4)
    return gpu, obs
