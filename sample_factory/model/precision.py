"""`--learner_precision=auto` and `--inference_precision=auto` on a CPU: bf16 only where it measures faster.

oneDNN runs bf16 convolutions natively on any CPU with AVX512-BF16, but that does not make them faster everywhere.
The Atari conv net's training step ran about twice as fast in bf16 on one such CPU and slower on another
(benchmarks/notebook.md, "bf16 where it is faster"). So the runner times the run's own model both ways once, before any
component starts, and writes the choice into the config every process gets (`resolve_auto_precision`). On a GPU,
auto keeps its rule (bf16 where the GPU supports it: it is faster on every GPU that does). The model's weights are
not touched: the timings run on copies, on zero observations."""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import torch

from sample_factory.algo.base import reduced_precision_dtype
from sample_factory.config import Config, reproducible
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.compile import zero_obs

MIN_SPEEDUP = 1.1  # bf16 must be at least this much faster: near a tie, fp32's accuracy (and stable choice) wins
TRAIN_ROWS = 64  # rows of a timed training pass (the per-row ratio of fp32 to bf16 holds from about 32 rows up)


def _timed(fn: Callable[[], None], repeats: int) -> float:
    fn()  # warm-up: oneDNN builds its kernels for the shape on the first call
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _inputs(model: ActorCritic, obs_space: gym.Space, rows: int):
    obs = zero_obs(obs_space, rows)
    h = torch.zeros(rows, sum(model.state_sizes)) if model.recurrent else None
    return obs, h


def time_training_pass(model: ActorCritic, obs_space: gym.Space, dtype: torch.dtype | None, repeats: int = 3) -> float:
    """Median seconds of one forward and backward pass of a copy of `model` on TRAIN_ROWS zero observations,
    under autocast to `dtype` (None: fp32), as the learner runs it."""
    model = copy.deepcopy(model).train()
    obs, h = _inputs(model, obs_space, TRAIN_ROWS)
    autocast = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()

    def step() -> None:
        with autocast:
            params, values, _ = model.forward_step(obs, h)
        (params.float().sum() + values.float().sum()).backward()
        model.zero_grad(set_to_none=True)

    return _timed(step, repeats)


def time_inference(
    model: ActorCritic, obs_space: gym.Space, rows: int, dtype: torch.dtype | None, repeats: int = 7
) -> float:
    """Median seconds of one forward pass of a copy of `model` on `rows` zero observations, its conv encoders in
    `dtype` (None: fp32), as a policy worker runs it."""
    model = copy.deepcopy(model).eval()
    if dtype is not None:
        model.run_conv_encoders_in(dtype)
    obs, h = _inputs(model, obs_space, rows)

    def forward() -> None:
        with torch.inference_mode():
            model.forward_step(obs, h)

    return _timed(forward, repeats)


def bf16_pays(t_fp32: float, t_bf16: float) -> bool:
    return t_bf16 * MIN_SPEEDUP <= t_fp32


def resolve_auto_precision(cfg: Config, model: ActorCritic, obs_space: gym.Space, log: Callable[[str], None]) -> None:
    """Replace `auto` in cfg.learner_precision / cfg.inference_precision by what runs faster here (fp32 or bf16),
    timed on `model` with one thread (a policy worker's; per thread the ratio is what matters). Does nothing on a
    GPU or where neither option is auto; on a CPU without native bf16, and in serial mode, auto is fp32 untimed."""
    roles = [name for name in ("learner_precision", "inference_precision") if getattr(cfg, name) == "auto"]
    device = torch.device("cuda" if cfg.device == "gpu" else cfg.device)
    if not roles or device.type != "cpu":
        return
    # No native bf16: nothing to time. Serial mode and reproducible sync runs: no timed choice either, it would flip
    # on a loaded CPU and they promise the same weights for a seed (runner.py pins tanh's kernel for the same reason).
    if cfg.serial_mode or reproducible(cfg) or reduced_precision_dtype("auto", device) is None:
        for name in roles:
            setattr(cfg, name, "fp32")
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        parts = []
        for name in roles:
            if name == "learner_precision":
                fp32, bf16 = (time_training_pass(model, obs_space, d) for d in (None, torch.bfloat16))
                what = f"training pass of {TRAIN_ROWS}"
            else:
                rows = max(cfg.num_envs_per_worker // max(cfg.worker_num_splits, 1), 1)
                fp32, bf16 = (time_inference(model, obs_space, rows, d) for d in (None, torch.bfloat16))
                what = f"inference of {rows}"
            choice = "bf16" if bf16_pays(fp32, bf16) else "fp32"
            setattr(cfg, name, choice)
            parts.append(f"--{name}={choice} ({what}: fp32 {1e3 * fp32:.1f} ms, bf16 {1e3 * bf16:.1f} ms)")
    finally:
        torch.set_num_threads(threads)
    log("precision auto, timed on this CPU: " + "; ".join(parts))
