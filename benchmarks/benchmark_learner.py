"""Training-step speed of the Atari model: `python -m benchmarks.benchmark_learner [--threads=2]`.

Times one SGD step (forward, backward, Adam) of the `atari` preset's model (conv net + MLP + heads, uint8 frames
[B, 4, 84, 84]) on a minibatch of --batch samples, in the four combinations of memory format (NCHW, the PyTorch
default, vs channels_last = NHWC, which the model uses) and precision (fp32 vs --learner_precision=bf16 autocast),
interleaved over --rounds so that a noisy machine affects all variants alike, and prints medians and ratios to
the NCHW fp32 step. Runs on --device (cpu by default).

--inference times the policy worker's forward pass (no grad) at the batch sizes of --inference_batches: fp32 against
the conv encoder in bf16 (--inference_precision=bf16); then its whole inference step (host -> device, act, device
-> host) eager against CUDA graphs (--inference_cuda_graphs; on a CPU, the same bucket path without graphs), for APPO
and DQN (benchmarks/benchmark_inference.py). --compile adds the channels_last variants with
torch.compile'd encoders (--torch_compile_learner: static shapes, compiled in the warm-up steps, which are not timed)
and, to the inference timing, fp32 compiled for dynamic shapes (--torch_compile_worker).

--loop runs the real learner loop instead (benchmarks/learner_loop.py): the algorithm's `train` on a realistic batch,
APPO or DQN, against the isolated SGD step, with host syncs per SGD step counted by torch.profiler.

--mlp times one whole APPO training iteration (algo/appo.py: V-trace, 4 epochs x 2 minibatches, Adam) of the
classic_control preset on a CartPole-shaped batch of 2,048 samples, with each CPU fast path on its own and all
together against torch's plain ops: tanh through the sigmoid identity (model/activations.py), the returns' loop in
numpy (algo/returns.py), fused Adam (algo/base.py::make_adam). "all (the default)" takes tanh the way a run on this
CPU does (the faster of the two, timed once per process), which the output names.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time

import gymnasium as gym
import numpy as np
import torch

from benchmarks.benchmark_inference import time_inference_step
from sample_factory.algo import returns
from sample_factory.algo.base import make_adam
from sample_factory.algo.registry import make_algorithm
from sample_factory.config import parse_cfg
from sample_factory.model import activations
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.compile import compile_encoders
from sample_factory.model.encoders import ConvEncoder

VARIANTS = {  # name: (channels_last, bf16, compiled)
    "NCHW fp32": (False, False, False),
    "channels_last fp32": (True, False, False),
    "NCHW bf16": (False, True, False),
    "channels_last bf16": (True, True, False),
}
COMPILED_VARIANTS = {
    "compiled fp32": (True, False, True),
    "compiled bf16": (True, True, True),
}


def make_model(channels_last: bool, device: torch.device, compiled: bool = False, dynamic: bool | None = None):
    cfg = parse_cfg(["--env=atari_pong"])  # the atari preset's model flags
    torch.manual_seed(0)
    model = ActorCritic(cfg, gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6)).to(device)
    if compiled:
        compile_encoders(model, print, dynamic=dynamic)
    if not channels_last:
        for m in model.modules():
            if isinstance(m, ConvEncoder):
                m.convs.to(memory_format=torch.contiguous_format)
                m.channels_last = False
    return model


def make_step(channels_last: bool, bf16: bool, compiled: bool, batch: int, device: torch.device):
    model = make_model(channels_last, device, compiled)
    opt = torch.optim.Adam(model.parameters(), 2.5e-4)
    obs = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8, device=device)
    target = torch.randn(batch, device=device)
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def step() -> None:
        with cast:
            params, values, _ = model.forward_step(obs, None)
        loss = (values.float() - target).pow(2).mean() + params.float().logsumexp(-1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1, help="torch threads (the learner's --learner_main_loop_num_cores)")
    p.add_argument("--batch", type=int, default=256, help="Samples per SGD step.")
    p.add_argument("--rounds", type=int, default=10, help="Timed steps per variant (after 2 warm-up steps).")
    p.add_argument("--device", default="cpu", help="torch device.")
    p.add_argument("--compile", action="store_true", help="Also time torch.compile'd encoders (training, inference).")
    p.add_argument(
        "--inference",
        action="store_true",
        help="Also time inference, fp32 vs bf16 conv encoder (--inference_precision).",
    )
    p.add_argument("--inference_batches", default="8,16,32,128", help="Batch sizes of the inference timing.")
    p.add_argument("--mlp", action="store_true", help="Time a CartPole APPO iteration instead (CPU fast paths).")
    p.add_argument(
        "--loop",
        action="store_true",
        help="Time the real learner loop (the algorithm's train) against the isolated SGD step and count host syncs "
        "per SGD step (benchmarks/learner_loop.py); the last line printed is one JSON object.",
    )
    p.add_argument("--algo", default="APPO", choices=("APPO", "DQN"), help="With --loop: the algorithm.")
    p.add_argument("--env", default="atari_pong", help="With --loop: whose preset gives the model and the batch.")
    p.add_argument("--iterations", type=int, default=4, help="With --loop: timed training iterations.")
    p.add_argument(
        "--train_flags",
        default="",
        help='With --loop: train.py flags on top of the preset, e.g. "--batch_size=256 --rollout=128".',
    )
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.loop:
        from benchmarks import learner_loop

        return learner_loop.main(args)
    if args.mlp:
        time_mlp_iteration(args.rounds)
        return 0
    device = torch.device(args.device)
    variants = {**VARIANTS, **(COMPILED_VARIANTS if args.compile else {})}
    steps = {name: make_step(*flags, args.batch, device) for name, flags in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds + 2):
        for name, step in steps.items():
            t0 = time.perf_counter()
            step()
            if r >= 2:
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["NCHW fp32"])
    print(f"one SGD step of the atari model, batch {args.batch}, {args.threads} thread(s), {device}:")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:20s} median {med * 1e3:7.1f} ms (min {min(ts) * 1e3:6.1f})  speed-up {base / med:4.2f}x")
    if args.inference or args.compile:
        time_inference([int(b) for b in args.inference_batches.split(",")], args.rounds, device, args.compile)
    return 0


def time_inference(batches: list[int], rounds: int, device: torch.device, compiled: bool) -> None:
    """Policy-worker inference (channels_last, no grad) at each batch size: fp32, the conv encoder in bf16
    (--inference_precision=bf16), and with `compiled` fp32 compiled for dynamic shapes (--torch_compile_worker)."""
    models = {"fp32": make_model(True, device), "bf16": make_model(True, device)}
    models["bf16"].run_conv_encoders_in(torch.bfloat16)
    if compiled:
        models["compiled"] = make_model(True, device, compiled=True, dynamic=True)
    print(f"inference (forward, no grad) of the atari model, {device}, {' / '.join(models)}:")
    with torch.inference_mode():
        for batch in batches:
            obs = torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8, device=device)
            times: dict[str, list[float]] = {name: [] for name in models}
            for r in range(rounds + 2):
                for name, model in models.items():
                    t0 = time.perf_counter()
                    model.forward_step(obs, None)
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    if r >= 2:
                        times[name].append(time.perf_counter() - t0)
            med = {name: statistics.median(ts) for name, ts in times.items()}
            cells = "  ".join(f"{name} {t * 1e3:7.2f} ms ({med['fp32'] / t:4.2f}x)" for name, t in med.items())
            print(f"  batch {batch:4d}: {cells}")
    time_inference_step(batches, rounds, device, ("APPO", "DQN"))


def time_mlp_iteration(rounds: int) -> None:
    """One APPO iteration (gather excluded) of the classic_control preset's MLP on a random CartPole batch, per
    combination of the CPU fast paths, interleaved over `rounds`."""
    cfg = parse_cfg(["--env=CartPole-v1"])
    obs_space, action_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)
    torch.manual_seed(0)
    model = ActorCritic(cfg, obs_space, action_space).train()
    algo = make_algorithm(cfg, model, torch.device("cpu"))
    M, T = cfg.batch_size // cfg.rollout, cfg.rollout  # trajectories [M, T(+1)]
    g = torch.Generator().manual_seed(0)
    batch = {
        "obs": {"obs": torch.randn(M, T + 1, 4, generator=g)},
        "rnn_states": torch.zeros(M, T + 1, 1),
        "is_first": torch.zeros(M, T + 1, dtype=torch.bool),
        "active": torch.ones(M, T, dtype=torch.bool),
        "actions": torch.randint(0, 2, (M, T + 1), generator=g),
        "log_probs": torch.full((M, T + 1), -0.69),
        "values": torch.randn(M, T + 1, generator=g),
        "policy_version": torch.zeros(M, T + 1, dtype=torch.int64),
        "policy_id": torch.zeros(M, T + 1, dtype=torch.int64),
        "rewards": torch.ones(M, T),
        "dones": torch.rand(M, T, generator=g) < 0.01,
        "truncated": torch.zeros(M, T, dtype=torch.bool),
        "final_values": torch.zeros(M, T),
    }
    adams = {fused: make_adam(cfg, model.parameters(), fused) for fused in (False, True)}
    timed_choice = activations.identity_pays()  # what a run on this CPU uses
    combos = {  # name: (fast tanh, numpy loop, fused adam)
        "torch ops": (False, False, False),
        "fast tanh": (True, False, False),
        "numpy returns loop": (False, True, False),
        "fused Adam": (False, False, True),
        "all (the default)": (True, True, True),
    }
    times: dict[str, list[float]] = {name: [] for name in combos}
    try:
        for r in range(rounds + 2):
            for name, (fast_tanh, numpy_loop, fused) in combos.items():
                activations.USE_IDENTITY = timed_choice if name.startswith("all") else fast_tanh
                returns.NUMPY_LOOP = numpy_loop
                algo.optimizer = adams[fused]
                t0 = time.perf_counter()
                algo.train(batch, 0, 0)
                if r >= 2:
                    times[name].append(time.perf_counter() - t0)
    finally:
        activations.USE_IDENTITY, returns.NUMPY_LOOP = timed_choice, True
    base = statistics.median(times["torch ops"])
    threads = torch.get_num_threads()
    print(f"one APPO iteration of the classic_control preset ({cfg.batch_size} samples, {threads} thread(s)):")
    print(f"  tanh in a run on this CPU: {'the sigmoid identity' if timed_choice else 'torch.tanh'} (timed faster)")
    for name, ts in times.items():
        med = statistics.median(ts)
        rate = cfg.batch_size / med
        print(f"  {name:20s} median {med * 1e3:6.2f} ms ({rate:9,.0f} samples/s)  speed-up {base / med:4.2f}x")


if __name__ == "__main__":
    sys.exit(main())
