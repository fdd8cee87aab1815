"""The learner loop measure: `python -m benchmarks.benchmark_learner --loop [--algo=APPO|DQN]
[--env=atari_pong] [--device=cpu|cuda]`.

Runs the algorithm's real `train` (algo/appo.py, algo/dqn.py: preparation, every SGD step, statistics, DQN's replay
sampling and priority updates) on a realistic batch of the env's preset (shapes and dtypes of the shared trajectory
buffers; an Atari batch is uint8 [M, T+1, 4, 84, 84]) and compares it with the isolated SGD step (forward, loss,
backward, Adam on one minibatch that is already on the device, repeated). Host syncs, the calls that make the
host wait for a GPU's queue, are counted with torch.profiler over the timed iterations: scalar reads
(`aten::_local_scalar_dense`, behind `.item()`, `float(t)`, `bool(t)`), `aten::nonzero` (boolean indexing asks the
device how many rows it kept) and the algorithms' one read-back per iteration (`host_read`, algo/transfer.py). On a
CPU they are the same calls that stall a GPU, which is why the count can be kept down by a test on a machine without
one (tests/benchmarks/test_benchmark_learner.py). For DQN it also breaks one SGD step down into its parts
(`dqn_breakdown`: sampling, gathers, copies, the three forward passes, the priority update). The last line printed is
one JSON object."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from sample_factory.algo import replay as replay_module
from sample_factory.algo.registry import make_algorithm
from sample_factory.config import Config, parse_cfg
from sample_factory.config.env_defaults import is_atari_name
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.compile import compile_for_role

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "host_read")
# Kernels whose CPU implementation reads scalars on the host where the CUDA one reads them on the device: the CPU fused
# Adam reads each parameter's step count (`.item()`), its CUDA kernel does not. Reads inside them are not counted.
DEVICE_SIDE_ON_GPU = ("aten::_fused_adam_",)


def spaces_for(env: str) -> tuple[gym.Space, gym.Space]:
    """The model-facing spaces of the env families the measure knows: Atari frames, MinAtar Breakout's grids or
    CartPole's vector."""
    if is_atari_name(env):
        return gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6)
    if env.startswith("MinAtar/"):
        return gym.spaces.Box(0, 1, (4, 10, 10), bool), gym.spaces.Discrete(3)
    return gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2)


def make_batch(cfg: Config, obs_space: gym.Space, action_space: gym.Space, rows: int, seed: int) -> dict[str, Any]:
    """rows trajectories [rows, T(+1), ...] as TrajectoryBuffers.gather returns them (CPU tensors), from a policy one
    version behind, with a few episode ends."""
    T, g = cfg.rollout, torch.Generator().manual_seed(seed)
    is_first = torch.zeros(rows, T + 1, dtype=torch.bool)
    dones = torch.rand(rows, T, generator=g) < 0.01
    if isinstance(obs_space, gym.spaces.Box) and obs_space.dtype == np.uint8:
        # real frame stacks (DQN's replay stores Atari stacks as single frames and checks that they are): frames
        # f_0..f_T per trajectory, obs[t] = f_{t-k+1..t}, the first frame repeated where the episode starts (t = 0)
        k = obs_space.shape[0]
        frames = torch.randint(0, 256, (rows, T + 1, *obs_space.shape[1:]), dtype=torch.uint8, generator=g)
        idx = (torch.arange(T + 1).unsqueeze(1) + torch.arange(-k + 1, 1)).clamp(min=0)  # [T+1, k]
        obs = frames[:, idx]  # [rows, T+1, k, H, W]
        is_first[:, 0] = True
        dones.zero_()
    elif isinstance(obs_space, gym.spaces.Box) and obs_space.dtype == bool:
        obs = torch.rand(rows, T + 1, *obs_space.shape, generator=g) < 0.1  # sparse object planes
    else:
        obs = torch.randn(rows, T + 1, *obs_space.shape, generator=g)
    return {
        "obs": {"obs": obs},
        "rnn_states": torch.zeros(rows, T + 1, 1),
        "is_first": is_first,
        "active": torch.ones(rows, T, dtype=torch.bool),
        "actions": torch.randint(0, int(action_space.n), (rows, T + 1), generator=g),
        "log_probs": torch.full((rows, T + 1), -float(np.log(action_space.n))),
        "values": torch.randn(rows, T + 1, generator=g),
        "policy_version": torch.zeros(rows, T + 1, dtype=torch.int64),
        "policy_id": torch.zeros(rows, T + 1, dtype=torch.int64),
        "rewards": (torch.rand(rows, T, generator=g) < 0.05).float(),
        "dones": dones,
        "truncated": torch.zeros(rows, T, dtype=torch.bool),
        "final_values": torch.zeros(rows, T),
    }


def count_syncs(prof: torch.profiler.profile) -> int:
    def inside_device_side_kernel(e) -> bool:
        while (e := e.cpu_parent) is not None:
            if e.name in DEVICE_SIDE_ON_GPU:
                return True
        return False

    return sum(1 for e in prof.events() if e.name in SYNC_OPS and not inside_device_side_kernel(e))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(algo_name: str, env: str, device: torch.device, iterations: int, extra: list[str] | None = None) -> dict:
    """Time `iterations` training iterations of the real loop after one warm-up (DQN: after filling the buffer to
    --learning_starts), count their host syncs, and time the isolated SGD step on one of their minibatches."""
    where = "gpu" if device.type == "cuda" else "cpu"  # the preset as a run on this device gets it
    cfg = parse_cfg([f"--env={env}", f"--algo={algo_name}", "--seed=1", f"--device={where}", *(extra or [])])
    obs_space, action_space = spaces_for(env)
    torch.manual_seed(0)
    model = ActorCritic(cfg, obs_space, action_space).to(device).train()
    algo = make_algorithm(cfg, model, device)
    compile_for_role(model, cfg, "learner", print)  # as the learner does (--torch_compile_learner), after the algo
    rows = cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout  # trajectories of one iteration
    batches = [make_batch(cfg, obs_space, action_space, rows, seed) for seed in range(2)]
    version = 1
    if algo_name == "DQN":  # fill the buffer so that every timed iteration trains
        cfg.learning_starts = min(cfg.learning_starts, rows * cfg.rollout)
        cfg.replay_buffer_capacity = min(cfg.replay_buffer_capacity, 8 * rows * cfg.rollout)
    for b in batches:  # warm-up: allocations, kernels picked, the buffer filled
        _, version = algo.train(b, version, 0)
    synchronize(device)
    steps = 0
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        for i in range(iterations):
            for b in batches:
                b["policy_version"].fill_(version - 1)
            stats, new_version = algo.train(batches[i % 2], version, 0)
            steps += new_version - version
            version = new_version
        synchronize(device)
        loop_s = time.perf_counter() - t0
    syncs = count_syncs(prof)
    loop_s_plain = time_loop(algo, batches, version, iterations, device)
    repeats = max(4, steps // max(iterations, 1))
    isolated = time_isolated(algo, cfg, batches[0], device, repeats)
    breakdown = dqn_breakdown(algo, cfg, device, min(repeats, 32)) if algo_name == "DQN" else {}
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "algo": algo_name,
        "env": env,
        "iterations": iterations,
        "sgd_steps": steps,
        "samples_per_iteration": rows * cfg.rollout,
        "minibatch": cfg.batch_size,
        "host_syncs": syncs,
        "host_syncs_per_sgd_step": round(syncs / max(steps, 1), 4),
        "loop_ms_per_sgd_step": round(loop_s_plain * 1e3 / max(steps, 1), 3),
        "loop_ms_per_sgd_step_profiled": round(loop_s * 1e3 / max(steps, 1), 3),
        "isolated_ms_per_sgd_step": round(isolated * 1e3, 3),
        "loop_over_isolated": round(loop_s_plain / max(steps, 1) / isolated, 3),
        "threads": torch.get_num_threads(),
        "train_flags": " ".join(extra or []),
        **({"breakdown_ms": breakdown} if breakdown else {}),
    }


def time_loop(algo, batches: list[dict], version: int, iterations: int, device: torch.device) -> float:
    """The same iterations without the profiler (its bookkeeping slows small steps): seconds per SGD step x steps."""
    synchronize(device)
    t0 = time.perf_counter()
    for i in range(iterations):
        for b in batches:
            b["policy_version"].fill_(version - 1)
        _, version = algo.train(batches[i % 2], version, 0)
    synchronize(device)
    return time.perf_counter() - t0


def time_isolated(algo, cfg: Config, batch: dict, device: torch.device, repeats: int) -> float:
    """Seconds per SGD step of the algorithm's own loss on one minibatch that stays on the device: the floor the
    loop is compared with (no preparation, no statistics, no read-back, one sync at the end)."""
    if cfg.algo == "DQN":
        sample = algo.replay.sample(cfg.batch_size, 0.4)
        step = lambda: algo.sgd_step(sample)  # noqa: E731 (staged copy of an already sampled minibatch)
    else:
        p = algo.prepare(batch, 1, 0)
        mb = torch.arange(min(cfg.batch_size // cfg.rollout, p.is_first.shape[0]), device=device)

        def step() -> None:
            loss = algo.minibatch_loss(p, mb).loss
            algo.device_step(loss, algo.optimizer)

    for _ in range(2):
        step()
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        step()
    synchronize(device)
    return (time.perf_counter() - t0) / repeats


def dqn_breakdown(algo, cfg: Config, device: torch.device, repeats: int) -> dict[str, float]:
    """Milliseconds of each part of one DQN SGD step (algo/dqn.py::sgd_step and the replay work around it), each
    part timed on its own (CPU time on a CPU device), medians over `repeats` rounds, the device synchronized after
    each: sampling (sum tree and importance weights), the minibatch's gathers, its host -> device copies, the three
    forward passes (the online network on s with a graph, on s' and the target network on s' without), the whole
    step, and the priority update; beside them the alternative of one online forward over cat([s, s']) with its
    backward, against the forward on s with its backward plus the no-grad one on s'."""
    from sample_factory.algo.base import forward_autocast

    replay, model, B = algo.replay, algo.model, cfg.batch_size
    beta = cfg.prioritized_replay_beta
    sample = replay.sample(B, beta)
    staged = algo.staging.to_device({"obs": sample.obs, "next_obs": sample.next_obs})
    s, s_next = staged["obs"], staged["next_obs"]
    both = {k: torch.cat([s[k], s_next[k]]) for k in s}  # [2B, *shape]
    td_abs = torch.rand(B)

    def weights() -> None:
        idx = replay.tree.sample(B, replay.rng)
        if replay.prioritized:
            probs = torch.from_numpy(replay.tree.get(idx) / replay.tree.total)
            replay_module.importance_weights(probs, len(replay), beta)

    def forward(net, obs, grad: bool):
        with torch.set_grad_enabled(grad), forward_autocast(algo):
            return net.forward_step(obs, None)

    def backward(params: Tensor, values: Tensor) -> None:
        loss = params[:B].float().mean() + values[:B].float().mean()  # only s's rows carry a gradient
        algo.optimizer.zero_grad(set_to_none=True)
        loss.backward()

    parts: dict[str, Callable[[], object]] = {
        "sample: sum tree, importance weights": weights,
        "gather minibatch (replay.take)": lambda: replay.take(sample.indices, sample.weights),
        "host -> device copies": lambda: algo.staging.to_device(
            {k: getattr(sample, k) for k in ("obs", "next_obs", "actions", "returns", "discounts", "weights")}
        ),
        "online forward on s (graph)": lambda: forward(model, s, True),
        "online forward on s' (no grad)": lambda: forward(model, s_next, False),
        "target forward on s' (no grad)": lambda: forward(algo.target, s_next, False),
        "whole sgd_step": lambda: algo.sgd_step(sample),
        "priority update (sum tree)": lambda: replay.update_priorities(sample.indices, td_abs),
        "online forward on s + backward": lambda: backward(*forward(model, s, True)[:2]),
        "online forward on cat([s, s']) + backward": lambda: backward(*forward(model, both, True)[:2]),
    }
    # A CPU device: the process's CPU time, which other jobs on a shared machine hardly move (wall time there
    # preempts the long parts more than the short ones); a GPU: wall time, each part synchronized.
    clock = time.process_time if device.type == "cpu" else time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in parts}
    for i in range(repeats + 2):  # round-robin, so that a busy machine slows every part alike
        for name, part in parts.items():
            synchronize(device)
            t0 = clock()
            part()
            synchronize(device)
            if i >= 2:
                times[name].append(clock() - t0)
    out = {name: round(statistics.median(ts) * 1e3, 3) for name, ts in times.items()}
    algo.priority_reads.drain()  # the timed steps' priority reads, applied nowhere
    algo.optimizer.zero_grad(set_to_none=True)
    return out


def main(args) -> int:
    """Called by benchmark_learner's --loop."""
    device = torch.device(args.device)
    result = measure(args.algo, args.env, device, args.iterations, args.train_flags.split())
    r = result
    print(
        f"{r['algo']} learner loop on {r['device_name']} ({args.env}, {r['samples_per_iteration']} samples an "
        f"iteration, minibatch {r['minibatch']}): {r['loop_ms_per_sgd_step']} ms per SGD step in the loop, "
        f"{r['isolated_ms_per_sgd_step']} ms isolated ({r['loop_over_isolated']}x); "
        f"{r['host_syncs_per_sgd_step']} host syncs per SGD step"
    )
    if "breakdown_ms" in result:
        clock = "CPU time" if device.type == "cpu" else "wall time"
        print(f"one SGD step's parts ({clock}, medians):")
    for name, ms in result.get("breakdown_ms", {}).items():
        print(f"  {name:45s} {ms:9.3f} ms")
    print(json.dumps(result))
    return 0
