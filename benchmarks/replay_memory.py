"""Memory of an Atari-size replay buffer (algo/replay.py), measured: allocate a buffer of --capacity transitions of
uint8 [4, 84, 84] frame stacks, fill it through ReplayBuffer.add with rollouts of consistent frame stacks (episode
ends included), and print the process RSS before and after with the bytes per transition.

    python -m benchmarks.replay_memory --capacity=1000000            # frames stored once
    python -m benchmarks.replay_memory --capacity=100000 --stacked=False   # whole stacks (4x the frames)
"""

from __future__ import annotations

import argparse
import json
import time

import psutil
import torch

from sample_factory.algo.replay import ReplayBuffer, nstep_targets
from sample_factory.config.options import str2bool

K, H, W = 4, 84, 84


def stacked_rollouts(M: int, T: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """obs [M, T+1, K, H, W] uint8 as FrameStackObservation builds them, one episode start per rollout."""
    frames = torch.randint(0, 256, (M, T + K, H, W), generator=g, dtype=torch.uint8)
    idx = torch.arange(T + 1).unsqueeze(1) + torch.arange(K)  # [T+1, K]
    start = int(torch.randint(1, T, (1,), generator=g))
    first = start + K - 1
    idx[start:] = torch.maximum(idx[start:], torch.tensor(first))
    is_first = torch.zeros(M, T + 1, dtype=torch.bool)
    is_first[:, start] = True
    return frames[:, idx], is_first


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=int, default=1_000_000)
    p.add_argument("--rollout", type=int, default=32)
    p.add_argument("--stacked", type=str2bool, default=True, help="store frames once (False: whole stacks)")
    args = p.parse_args(argv)
    proc = psutil.Process()
    T, M = args.rollout, 64
    rss0 = proc.memory_info().rss
    buf = ReplayBuffer(
        args.capacity,
        T,
        {"obs": ((K, H, W), torch.uint8)},
        (),
        torch.int64,
        prioritized=True,
        stacked={"obs": K} if args.stacked else None,
    )
    g = torch.Generator().manual_seed(0)
    z = torch.zeros(M, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(M, T), z, z, torch.zeros(M, T), 0.99, 3)
    obs, is_first = stacked_rollouts(M, T, g)
    t0 = time.monotonic()
    for _ in range(-(-buf.num_blocks // M)):  # every block written once
        buf.add({"obs": obs}, torch.zeros(M, T, dtype=torch.int64), targets, ~z, torch.rand(M, T), is_first)
    fill_s = time.monotonic() - t0
    rss1 = proc.memory_info().rss
    out = {
        "capacity": buf.capacity,
        "stacked_frames_once": args.stacked,
        "buffer_bytes": buf.nbytes(),
        "bytes_per_transition": buf.nbytes() / buf.capacity,
        "rss_before_gib": rss0 / 2**30,
        "rss_after_gib": rss1 / 2**30,
        "rss_growth_per_transition": (rss1 - rss0) / buf.capacity,
        "fill_s": fill_s,
    }
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
