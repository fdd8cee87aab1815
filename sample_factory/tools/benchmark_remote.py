"""Remote samplers (--sampler_nodes): what one transferred rollout costs, env steps/s with and without a sampler
node, and a projection for N real nodes from those costs. Runs a two-node Ray cluster on loopback
(distributed/local_cluster.py), so both "nodes" share this machine's cores.

    python -m sample_factory.tools.benchmark_remote --envs=CartPole-v1,atari_pong --seconds=40

1. Per rollout, for each env (real observations from the env, random actions):
   - pack: copying a finished slot out of shared memory on the sampler node (rollouts.pack_slots);
   - bytes raw and zlib-compressed (level 1), compress and decompress time;
   - Ray transfer: an actor on the other node holds a batch of k rollouts; the learner side times
     ray.get(actor.give.remote()) (serialize there, object store transfer, deserialize here), minus the same call
     returning nothing (the call overhead, reported apart);
   - import: writing a received rollout into the learner node's slots (rollouts.write_rollout).
2. CartPole (--fps_env) training runs of --seconds each: the learner node alone (this checkout, and --compare_repo's
   code for the default path), learner + 1 sampler node, the sampler node alone (--local_samplers=False). FPS is the
   10 s window at the end of the run.
3. Projection for N nodes (printed with the formula): see `projection`.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
import zlib
from pathlib import Path

import numpy as np

from sample_factory.config import parse_cfg
from sample_factory.distributed.rollouts import pack_slots, write_rollout
from sample_factory.tools.benchmark_atari import REPO, run_train

_SUMMARY = re.compile(r"remote samplers: (\d+) rollouts in (\d+) transfers")
_TRAINED = re.compile(r"samples (?:collected/)?trained: (?:\d+/)?(\d+)")
_TRAIN_S = re.compile(r"learner \(avg of 1\):.* train ([\d.]+) s")


def filled_buffers(env: str, num_envs: int):
    """The env's trajectory buffers (one worker, `num_envs` envs) with every slot's observations taken from the env
    under random actions, as a sampler node would have them."""
    from sample_factory.envs.env_utils import frames_per_env_step, make_env, probe_env
    from sample_factory.model.actor_critic import ActorCritic
    from sample_factory.runtime.shared_buffers import TrajectoryBuffers, make_buffer_spec

    cfg = parse_cfg([f"--env={env}", "--num_workers=1", f"--num_envs_per_worker={num_envs}"])
    cfg.frames_per_env_step = frames_per_env_step(cfg)
    obs_space, action_space, num_agents, _ = probe_env(cfg, False)
    model = ActorCritic(cfg, obs_space, action_space)
    spec = make_buffer_spec(cfg, obs_space, action_space, model.rnn_state_size, num_agents)
    b = TrajectoryBuffers(spec, share=True)
    e = make_env(cfg, {"worker_index": 0, "split": 0, "env_index": 0})
    obs, _ = e.reset(seed=0)
    for s in range(spec.num_slots):
        for t in range(spec.rollout + 1):
            for c in range(spec.agents_per_split):
                obs, _, term, trunc, _ = e.step(e.action_space.sample())
                if term or trunc:
                    obs, _ = e.reset()
                for k, v in (obs if isinstance(obs, dict) else {"obs": obs}).items():
                    b.obs[k][s, t, c] = torch_from(v)
    e.close()
    b.rewards.normal_()
    b.values.normal_()
    b.log_probs.normal_()
    return cfg, b


def torch_from(v):
    import torch

    return torch.as_tensor(np.asarray(v))


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def transfer_costs(env: str, num_envs: int, ks: list[int], repeat: int) -> dict:
    import ray

    cfg, b = filled_buffers(env, num_envs)
    n_slots = b.spec.num_slots
    samples_per_rollout = b.spec.samples_per_slot
    one = pack_slots(b, [0])
    raw = sum(a.nbytes for a in one.values())
    pack_s = _median_time(lambda: pack_slots(b, [0]), repeat)
    # zlib on the uint8/bool arrays (what --remote_compression compresses)
    comp = {k: a for k, a in one.items() if a.dtype in (np.uint8, np.bool_)}
    comp_bytes, comp_s, decomp_s = 0, 0.0, 0.0
    for a in comp.values():
        data = zlib.compress(a.tobytes(), 1)
        comp_bytes += len(data)
        comp_s += _median_time(lambda a=a: zlib.compress(a.tobytes(), 1), repeat)
        decomp_s += _median_time(lambda data=data: zlib.decompress(data), repeat)
    compressed_total = raw - sum(a.nbytes for a in comp.values()) + comp_bytes
    write_s = _median_time(lambda: write_rollout(b, 1, one, 0), repeat)

    @ray.remote(num_cpus=1)
    class Holder:
        def hold(self, batch):
            self.batch = {k: np.array(v) for k, v in batch.items()}  # a local copy, as the exporter has
            return True

        def give(self):
            return self.batch

        def nothing(self):
            return None

    here = ray.get_runtime_context().get_node_id()
    other = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here]
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    holder = Holder.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy((other or [here])[0], soft=False)
    ).remote()
    call_s = _median_time(lambda: ray.get(holder.nothing.remote()), repeat)
    per_k = {}
    for k in ks:
        batch = pack_slots(b, [i % n_slots for i in range(k)])
        ray.get(holder.hold.remote(batch))
        get_s = _median_time(lambda: ray.get(holder.give.remote()), repeat)
        per_k[k] = {"get_s": get_s, "transfer_s_per_rollout": max(get_s - call_s, 0.0) / k}
    ray.kill(holder)
    return {
        "env": env,
        "samples_per_rollout": samples_per_rollout,
        "raw_bytes": raw,
        "compressed_bytes": compressed_total,
        "pack_s": pack_s,
        "compress_s": comp_s,
        "decompress_s": decomp_s,
        "write_s": write_s,
        "call_s": call_s,
        "per_k": per_k,
    }


def print_costs(c: dict) -> None:
    print(
        f"\n{c['env']}: one rollout = {c['samples_per_rollout']} samples; {c['raw_bytes'] / 1024:.1f} KiB raw, "
        f"{c['compressed_bytes'] / 1024:.1f} KiB with zlib-1 on uint8/bool arrays "
        f"(compress {1e3 * c['compress_s']:.3f} ms, decompress {1e3 * c['decompress_s']:.3f} ms)"
    )
    print(
        f"  pack (copy out of shared memory) {1e3 * c['pack_s']:.3f} ms; import (write into a learner slot) "
        f"{1e3 * c['write_s']:.3f} ms; empty Ray call {1e3 * c['call_s']:.2f} ms"
    )
    for k, v in c["per_k"].items():
        print(
            f"  batch of {k:>2} rollouts: ray.get {1e3 * v['get_s']:.2f} ms, "
            f"{1e3 * v['transfer_s_per_rollout']:.3f} ms per rollout beyond the call"
        )


def projection(c: dict, k: int, local_fps: float, node_fps: float, learner_fps: float, link_gbps: float) -> str:
    """FPS(N) = min(local + N * node, importer, link, learner), where
    importer = samples per rollout / (call / k + transfer per rollout + write per rollout): the learner node's
               one importer thread, which pays the Ray call per batch of k, deserialization and the slot copy;
    link     = link bytes/s / (bytes per rollout / samples per rollout): the learner node's inbound link;
    learner  = samples trained per second of learner train time (measured in the runs)."""
    per_rollout = c["call_s"] / k + c["per_k"][k]["transfer_s_per_rollout"] + c["write_s"]
    importer = c["samples_per_rollout"] / per_rollout
    link = link_gbps * 1e9 / 8 / (c["raw_bytes"] / c["samples_per_rollout"])
    rows = []
    for n in (1, 2, 4, 8, 16):
        fps = min(local_fps + n * node_fps, importer, link, learner_fps)
        rows.append(f"N={n}: {fps:,.0f}")
    return (
        f"  importer ceiling {importer:,.0f} samples/s (batches of {k}), link ceiling {link:,.0f} samples/s at "
        f"{link_gbps:g} Gbit/s, learner ceiling {learner_fps:,.0f} samples/s\n  projected FPS " + ", ".join(rows)
    )


def fps_runs(env: str, seconds: float, address: str, compare_repo: Path | None) -> dict:
    base = [f"--env={env}", "--num_workers=1"]
    remote = [f"--ray_address={address}", "--sampler_nodes=1"]
    cases = [("learner node alone", base, REPO)]
    if compare_repo is not None:
        cases.append((f"learner node alone ({compare_repo} code)", base, compare_repo))
    cases += [
        ("learner node + 1 sampler node", [*base, *remote], REPO),
        ("1 sampler node alone (--local_samplers=False)", [*base, *remote, "--local_samplers=False"], REPO),
    ]
    out = {}
    for name, args, repo in cases:
        result, summary = run_train(args, seconds, repo=repo)
        text = "\n".join(summary)
        result["remote"] = next((ln for ln in summary if "remote samplers:" in ln), "")
        trained = _TRAIN_S.search(text)
        result["train_s"] = float(trained.group(1)) if trained else None
        out[name] = result
        print(
            f"{name}: rc {result['rc']}, FPS (10 s window at the end) {result.get('fps10', 0):,.0f}, overall "
            f"{result.get('fps', 0):,} over {result.get('seconds', 0):.0f} s, learner train time "
            f"{result['train_s']} s for {result.get('env_steps', 0):,} env steps"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from sample_factory.distributed.local_cluster import loopback_cluster

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="CartPole-v1", help="Comma-separated envs for the transfer costs.")
    p.add_argument("--num_envs", type=int, default=64, help="Envs per worker (columns of a rollout), CartPole.")
    p.add_argument("--batch", default="1,4,16", help="Rollouts per transfer to time.")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--fps_env", default="CartPole-v1", help="Env of the training runs ('' to skip them).")
    p.add_argument("--seconds", type=float, default=40.0, help="Length of each training run.")
    p.add_argument("--compare_repo", type=Path, default=None, help="Another checkout for the default-path run.")
    p.add_argument("--link_gbps", type=float, default=10.0, help="Link bandwidth assumed in the projection.")
    args = p.parse_args(argv)
    ks = [int(k) for k in args.batch.split(",")]
    with loopback_cluster(num_nodes=2, num_cpus=2) as cluster:
        import ray

        ray.init(address=cluster.address, logging_level="warning")
        costs = []
        for env in args.envs.split(","):
            num_envs = args.num_envs if env == "CartPole-v1" else 8
            costs.append(transfer_costs(env, num_envs, ks, args.repeat))
            print_costs(costs[-1])
        ray.shutdown()
        if not args.fps_env:
            return 0
        print()
        runs = fps_runs(args.fps_env, args.seconds, cluster.address, args.compare_repo)
    alone = runs["learner node alone"]
    node = runs["1 sampler node alone (--local_samplers=False)"]
    learner_fps = alone.get("env_steps", 0) / alone["train_s"] if alone.get("train_s") else float("inf")
    c = next((c for c in costs if c["env"] == args.fps_env), None)
    if c is not None:
        print(f"\nprojection for {args.fps_env} ({projection.__doc__.strip()})")
        print(projection(c, max(ks), alone.get("fps10", 0.0), node.get("fps10", 0.0), learner_fps, args.link_gbps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
