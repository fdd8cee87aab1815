"""Remote samplers (--sampler_nodes): what one transferred rollout costs, env steps/s with and without a sampler
node, and a projection for N real nodes from those costs. Runs a two-node Ray cluster on loopback
(distributed/local_cluster.py), so both "nodes" share this machine's cores.

    python -m benchmarks.benchmark_remote --envs=CartPole-v1,atari_pong --seconds=40

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

from benchmarks.benchmark import REPO
from sample_factory.config import parse_cfg
from sample_factory.distributed.rollouts import pack_slots, write_rollout
from sample_factory.tools.timed_run import run_train

_SUMMARY = re.compile(r"remote samplers: (\d+) rollouts in (\d+) transfers")
_TRAINED = re.compile(r"samples (?:collected/)?trained: (?:\d+/)?(\d+)")
_TRAIN_S = re.compile(r"learner \(avg of 1\):.* train ([\d.]+) s")


def filled_buffers(env: str, num_envs: int | None):
    """The env's trajectory buffers (one worker, `num_envs` envs, default: the env's preset) with every slot's
    observations taken from the env under random actions, as a sampler node would have them."""
    from sample_factory.envs.env_utils import frames_per_env_step, make_env, probe_env
    from sample_factory.model.actor_critic import ActorCritic
    from sample_factory.runtime.shared_buffers import TrajectoryBuffers, make_buffer_spec

    flags = [f"--env={env}", "--num_workers=1", *([f"--num_envs_per_worker={num_envs}"] if num_envs else [])]
    cfg = parse_cfg(flags)
    cfg.frames_per_env_step = frames_per_env_step(cfg)
    obs_space, action_space, num_agents = probe_env(cfg, False)[:3]
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


def transfer_costs(env: str, num_envs: int | None, ks: list[int], repeat: int) -> dict:
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
    # import: distinct freshly received rollouts into distinct slots (a repeated copy of one would run from cache)
    fresh = [pack_slots(b, [i % n_slots]) for i in range(repeat)]
    t0 = time.perf_counter()
    for i, r in enumerate(fresh):
        write_rollout(b, (i + 1) % n_slots, r, 0)
    write_s = (time.perf_counter() - t0) / repeat

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


def ceilings(c: dict, k: int) -> dict[str, float]:
    """Samples/s the learner node can take in, from the measured per-rollout costs:
    importer raw   = samples per rollout / (call / k + transfer per rollout + write per rollout): the learner
                     node's one importer thread pays the Ray call per batch of k, the transfer and deserialization
                     (the measured ray.get beyond the call) and the slot copy;
    importer zlib  = the same with the transfer scaled by compressed / raw bytes (an estimate: the compressed
                     transfer was not timed) plus decompression;
    link X Gbit/s  = X Gbit/s / bytes per sample (raw, and compressed), the learner node's inbound link."""
    n = c["samples_per_rollout"]
    transfer = c["per_k"][k]["transfer_s_per_rollout"]
    base = c["call_s"] / k + c["write_s"]
    ratio = c["compressed_bytes"] / c["raw_bytes"]
    out = {
        "importer raw": n / (base + transfer),
        "importer zlib": n / (base + transfer * ratio + c["decompress_s"]),
    }
    for gbps in (1, 10):
        out[f"link {gbps} Gbit/s raw"] = gbps * 1e9 / 8 / (c["raw_bytes"] / n)
        out[f"link {gbps} Gbit/s zlib"] = gbps * 1e9 / 8 / (c["compressed_bytes"] / n)
    return out


def projection(local_fps: float, node_fps: float, limit: float) -> str:
    """FPS(N) = min(local + N * node, limit): `local` what the learner node samples itself, `node` what one sampler
    node adds, `limit` the smallest ceiling (importer, link, learner training throughput)."""
    return ", ".join(f"N={n}: {min(local_fps + n * node_fps, limit):,.0f}" for n in (1, 2, 4, 8, 16))


def fps_runs(env: str, seconds: float, address: str, compare_repo: Path | None, repeats: int) -> dict:
    """Each case `repeats` times, the cases alternating (the machine's load drifts); medians."""
    # agent steps, the unit of the transfer ceilings (Atari/VizDoom would otherwise count env frames)
    base = [f"--env={env}", "--num_workers=1", "--summaries_use_frameskip=False"]
    remote = [f"--ray_address={address}", "--sampler_nodes=1"]
    cases = [("learner node alone", base, REPO)]
    if compare_repo is not None:
        cases.append((f"learner node alone ({compare_repo} code)", base, compare_repo))
    cases += [
        ("learner node + 1 sampler node", [*base, *remote], REPO),
        ("1 sampler node alone (--local_samplers=False)", [*base, *remote, "--local_samplers=False"], REPO),
    ]
    results: dict[str, list[dict]] = {name: [] for name, _, _ in cases}
    for r in range(repeats):
        for name, args, repo in cases:
            result, summary = run_train(args, seconds, repo=repo)
            text = "\n".join(summary)
            trained = _TRAIN_S.search(text)
            result["train_s"] = float(trained.group(1)) if trained else None
            result["remote"] = next((ln.split("] ", 1)[-1] for ln in summary if "remote samplers:" in ln), "")
            results[name].append(result)
            print(
                f"[{r + 1}/{repeats}] {name}: rc {result['rc']}, FPS (10 s window at the end) "
                f"{result.get('fps10', 0):,.0f}, overall {result.get('fps', 0):,} over {result.get('seconds', 0):.0f} s"
                + (f"\n    {result['remote']}" if result["remote"] else ""),
                flush=True,
            )
    out = {}
    for name, rs in results.items():
        fps10 = statistics.median(r.get("fps10", 0.0) for r in rs)
        overall = statistics.median(r.get("fps", 0) for r in rs)
        learner = [r["env_steps"] / r["train_s"] for r in rs if r.get("train_s") and r.get("env_steps")]
        out[name] = {
            "fps10": fps10,
            "fps": overall,
            "learner_fps": statistics.median(learner) if learner else float("inf"),
        }
        each = ", ".join(f"{r.get('fps10', 0):,.0f}" for r in rs)
        # a sampler-node-only run receives rollouts in bursts: a 10 s window can be empty, the whole run is not
        print(f"{name}: median env steps/s {fps10:,.0f} (10 s windows: {each}), over the whole run {overall:,.0f}")
    return out


def main(argv: list[str] | None = None) -> int:
    from sample_factory.distributed.local_cluster import loopback_cluster

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", default="CartPole-v1", help="Comma-separated envs for the transfer costs.")
    p.add_argument("--num_envs", type=int, default=None, help="Envs per worker (default: each env's preset).")
    p.add_argument("--batch", default="1,4,16", help="Rollouts per transfer to time.")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--fps_env", default="CartPole-v1", help="Env of the training runs ('' to skip them).")
    p.add_argument("--seconds", type=float, default=40.0, help="Length of each training run.")
    p.add_argument("--compare_repo", type=Path, default=None, help="Another checkout for the default-path run.")
    p.add_argument("--link_gbps", type=float, default=10.0, help="Link bandwidth assumed in the projection.")
    p.add_argument("--repeats", type=int, default=1, help="Training runs per case (alternating; medians).")
    args = p.parse_args(argv)
    ks = [int(k) for k in args.batch.split(",")]
    k = max(ks)
    with loopback_cluster(num_nodes=2, num_cpus=2) as cluster:
        import ray

        ray.init(address=cluster.address, logging_level="warning")
        costs = {}
        for env in args.envs.split(","):
            costs[env] = transfer_costs(env, args.num_envs, ks, args.repeat)
            print_costs(costs[env])
            print(
                f"  ceilings (samples/s, batches of {k}): "
                + ", ".join(f"{name} {v:,.0f}" for name, v in ceilings(costs[env], k).items())
            )
        ray.shutdown()
        print(f"\n(ceilings: {ceilings.__doc__.strip()})")
        if not args.fps_env:
            return 0
        print()
        runs = fps_runs(args.fps_env, args.seconds, cluster.address, args.compare_repo, args.repeats)
    alone = runs["learner node alone"]
    node = runs["1 sampler node alone (--local_samplers=False)"]
    learner_fps = max(r["learner_fps"] for r in runs.values())
    if args.fps_env in costs:
        limit = min(learner_fps, *ceilings(costs[args.fps_env], k).values())
        print(f"\nprojection for {args.fps_env}: {projection.__doc__.strip()}")
        print(
            f"  local {alone['fps10']:,.0f}, node {node['fps10']:,.0f}, learner {learner_fps:,.0f} samples/s of "
            f"train time, limit {limit:,.0f}: {projection(alone['fps10'], node['fps10'], limit)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
