"""The policy worker's whole inference step, eager against CUDA graphs (workers/batched_inference.py): run by
`python -m benchmarks.benchmark_learner --inference [--device=cuda]` after its forward-pass timing.

Each timed step is what the worker does per batch after gathering the rows from the slots: host staging -> device,
the algorithm's `act` (forward and action sampling: APPO's categorical sample, DQN's epsilon-greedy), outputs back to
the host. On CUDA the graphs column replays captured graphs (a batch padded to its bucket); on a CPU it runs the
same bucket path without graphs ("padded": what padding costs where there is no launch overhead to save). A failed
capture is reported and the step runs eagerly; the benchmark goes on.
"""

from __future__ import annotations

import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from sample_factory.algo.registry import algorithm_class
from sample_factory.config import parse_cfg
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.workers.batched_inference import BatchedInference

OBS_SHAPE = (4, 84, 84)  # the atari preset's frames
NUM_ACTIONS = 6


def compared_mode(device: torch.device) -> str:
    """What the eager step is compared with on `device`."""
    return "graphs" if device.type == "cuda" else "padded"


def time_inference_step(batches: list[int], rounds: int, device: torch.device, algos: tuple[str, ...]) -> None:
    """Per algorithm and batch size: the median step eager and from graphs (or padded, on a CPU), interleaved."""
    mode = compared_mode(device)
    for algo in algos:
        cfg = parse_cfg(["--env=atari_pong", f"--algo={algo}"])
        torch.manual_seed(0)
        obs_space = gym.spaces.Dict({"obs": gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8)})
        model = ActorCritic(cfg, obs_space, gym.spaces.Discrete(NUM_ACTIONS)).to(device).eval()
        spec = {"obs": (OBS_SHAPE, torch.uint8)}
        notes: list[str] = []
        runners = {
            name: BatchedInference(cfg, model, algorithm_class(cfg), spec, device, max(batches), m, notes.append)
            for name, m in (("eager", "eager"), (mode, mode))
        }
        print(f"inference step of the atari model ({algo} act, host -> {device} -> host), eager / {mode}:")
        for batch in batches:
            captures = runners[mode].captures
            cells, first = _time_batch(runners, batch, rounds)
            ratio = f"{cells['eager'] / cells[mode]:4.2f}x" if "eager" in cells and mode in cells else "n/a"
            row = "  ".join(f"{name} {t * 1e3:7.3f} ms" for name, t in cells.items())
            captured = runners[mode].captures > captures
            extra = f"  (first call {first * 1e3:.0f} ms: its capture)" if captured else ""
            print(f"  batch {batch:4d}: {row}  speed-up {ratio}{extra}")
        for note in notes:
            print(f"  note: {note}")
        if mode == "graphs":
            graphs = runners[mode]
            state = f"{graphs.captures} graphs captured" if graphs.failure is None else "FAILED, eager instead"
            print(f"  graphs: {state}")


def _time_batch(runners: dict[str, BatchedInference], batch: int, rounds: int) -> tuple[dict[str, float], float]:
    """Median seconds per step of each runner on one random batch; and the padded/graph runner's first call (its
    capture). A runner that raises is reported and left out."""
    g = torch.Generator().manual_seed(batch)
    frames = torch.randint(0, 256, (batch, *OBS_SHAPE), dtype=torch.uint8, generator=g)
    for r in runners.values():
        r.staging(batch).obs["obs"].copy_(frames)
    times: dict[str, list[float]] = {name: [] for name in runners}
    first = 0.0
    for i in range(rounds + 2):
        for name, r in list(runners.items()):
            if name not in times:
                continue
            t0 = time.perf_counter()
            try:
                r.run(batch, deterministic=False)
            except Exception as e:  # noqa: BLE001 - report and go on: one variant must not end the benchmark
                print(f"  batch {batch}: {name} failed ({type(e).__name__}: {str(e).strip()[:200]})")
                del times[name]
                continue
            dt = time.perf_counter() - t0
            if i == 0 and name != "eager":
                first = dt
            if i >= 2:
                times[name].append(dt)
    return {name: statistics.median(ts) for name, ts in times.items() if ts}, first
