"""The learner node's side of --sampler_nodes (the shape of IMPALA's AsyncSamplesOptimizer on Ray): one
sampler_node.SamplerNode actor per remote node, an importer thread in the runner process, weight broadcasts.

Import slots: the learner node's trajectory buffers get extra "virtual" actor workers after the local ones,
--num_workers of them per sampler node (so a node has as many slots here as it has at home). The importer writes a
received rollout into a free slot of its node's virtual workers and sends the learner the Rollout(actor_idx, slot,
gen=0) message a local actor worker would; the learner returns the slot with FreeSlots on that virtual worker's
channel, which only the importer reads. The learner code does not know where a rollout came from.

The importer pulls: one outstanding `next_batch` call per node, the next one only after the previous batch is all
in slots, so a learner that falls behind holds the remote nodes back as it holds local actors back.

Policy lag: rollouts carry the versions of the weights that acted (policy_version), as local ones do, and the
learner measures and masks lag as usual (--max_policy_lag). Rollouts with no step within --max_policy_lag of the
learner's version when they arrive are dropped here, unimported, and counted as discarded rollouts.

Weights: every --broadcast_interval policy versions, one `ray.put` of (flat weights, version), passed to every
live node (Ray ships the object once per node).

A lost node (its actor died, its node left the cluster, a component of it failed for good, or its `next_batch` did
not return within --heartbeat_timeout_sec: hung) is logged in one line and its actor killed; the run goes on with
the others and the local samplers. With --local_samplers=False the run stops when the last node is lost.
"""

from __future__ import annotations

import collections
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from sample_factory.config import Config
from sample_factory.distributed.rollouts import decode, policy_lags, stale_rollouts, write_rollout
from sample_factory.experiment.progress import ProgressTracker, unit_name
from sample_factory.launcher.ray_init import init_ray
from sample_factory.runtime.messages import FREE_SLOTS, Channels, Rollout
from sample_factory.runtime.shared_buffers import BufferSpec, SharedWeights, SlotPool, TrajectoryBuffers

PULL_TIMEOUT_S = 0.5  # how long a node's next_batch waits for a rollout before answering None
START_TIMEOUT_S = 180.0


def short_error(e: BaseException, limit: int = 160) -> str:
    """One line for a Ray error (they carry remote tracebacks)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = lines[-1] if lines else ""
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_reachable(address: str | None, timeout: float = 10.0) -> None:
    """Fail fast on a head that does not answer: Ray's driver retries a dead address for minutes."""
    if not address or address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except (OSError, ValueError) as e:
        raise ConnectionError(f"--ray_address={address}: no Ray head answers there ({e})") from None


class NodeState:
    def __init__(self, index: int, handle: Any, workers: list[int], slots: list[int]):
        self.index, self.handle, self.workers = index, handle, workers
        self.pool = SlotPool(slots)
        self.alive = True
        self.info: dict = {}
        self.call: Any = None  # the outstanding next_batch ObjectRef
        self.call_sent = 0.0  # time.monotonic() when it was sent
        self.backlog: collections.deque = collections.deque()  # (batch, rollout index) not yet in a slot


class RemoteSamplers:
    def __init__(self, cfg: Config, spec: BufferSpec, log: Callable[[str], None]):
        """Adds the import slots to `spec` (before the runner allocates the buffers)."""
        self.cfg, self.log = cfg, log
        assert cfg.num_workers is not None, "parse_cfg resolves --num_workers"
        self.first_worker = spec.num_workers
        self.workers_per_node: int = cfg.num_workers
        spec.num_workers += cfg.sampler_nodes * self.workers_per_node
        self.nodes: list[NodeState] = []
        self.lock = threading.Lock()
        self.events: list[str] = []  # log lines from the importer thread (guarded by lock)
        self.samples: list[tuple] = []  # forwarded "samples" payloads (guarded by lock)
        self.discarded = 0  # (guarded by lock)
        self.error: str | None = None
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None
        self.broadcast_version = -1
        self.weight_calls: list = []
        # rollouts, raw/wire bytes, encode/decode/transfer seconds, broadcasts: a Counter holding floats too
        self.totals: dict[str, Any] = collections.Counter()
        self.ray: Any = None
        # the periodic "sampler nodes:" line: (time, remote env frames, all env frames) at the last one
        self.last_line: tuple[float, int, int] | None = None
        self.remote_env_frames = 0

    # ---- start --------------------------------------------------------------------------------------------
    def start(
        self,
        buffers: TrajectoryBuffers,
        channels: Channels,
        weights: SharedWeights,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_agents: int,
    ) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from sample_factory.distributed.sampler_node import SamplerNode

        self.buffers, self.channels, self.weights = buffers, channels, weights
        cfg = self.cfg
        check_reachable(cfg.ray_address)
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        init_ray(ray, cfg.ray_address, logging_level="warning", configure_logging=True, log_to_driver=True)
        self.ray = ray  # connected: stop() disconnects
        for s, h in handlers.items():  # the runner's Ctrl+C / SIGTERM handling stays in charge
            signal.signal(s, h)
        placement = self._placement()
        actor_cls = ray.remote(SamplerNode)
        flat, version = weights.snapshot()
        self.broadcast_version = version
        k_slots = buffers.spec.slots_per_worker
        for k, node_id in enumerate(placement):
            workers = [self.first_worker + k * self.workers_per_node + i for i in range(self.workers_per_node)]
            slots = [s for w in workers for s in range(w * k_slots, (w + 1) * k_slots)]
            handle = actor_cls.options(
                num_cpus=1,
                max_concurrency=4,  # next_batch may wait while set_weights arrives
                max_restarts=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                name=None,
            ).remote(cfg, k, obs_space, action_space, num_agents, flat.numpy(), version)
            self.nodes.append(NodeState(k, handle, workers, slots))
        infos = ray.get([n.handle.start.remote() for n in self.nodes], timeout=START_TIMEOUT_S)
        for n, info, node_id in zip(self.nodes, infos, placement):
            n.info = {**info, "node_id": node_id}
            self.log(
                f"sampler node {n.index}: Ray node {node_id[:12]} ({info['host']}, actor pid {info['pid']}, "
                f"component pids {info['pids']}), {cfg.num_workers} workers x {cfg.num_envs_per_worker} envs, "
                f"device {info['device']}" + (f", niceness {info['niceness']}" if info["niceness"] else "")
            )
        self.thread = threading.Thread(target=self._run, name="sf_importer", daemon=True)
        self.thread.start()

    def _placement(self) -> list[str]:
        """Ray node ids for the sampler nodes: nodes other than this one first, one sampler node each, round-robin
        when there are fewer (with one line saying so)."""
        ray = self.ray
        here = ray.get_runtime_context().get_node_id()
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n.get("Resources", {}).get("CPU", 0) >= 1]
        others = [n for n in alive if n != here] or [here]
        wanted = self.cfg.sampler_nodes
        if len(others) < wanted:
            self.log(
                f"--sampler_nodes={wanted} but the Ray cluster has {len(others)} other node(s) with a CPU: "
                "some sampler nodes share a node" + (" (the learner's)" if others == [here] else "")
            )
        return [others[k % len(others)] for k in range(wanted)]

    # ---- the importer thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self._take_free_slots()
                for n in self.nodes:
                    self._place_backlog(n)
                    if n.alive and n.call is None and not n.backlog:
                        n.call = n.handle.next_batch.remote(PULL_TIMEOUT_S)
                        n.call_sent = time.monotonic()
                self._check_silent()
                self._maybe_broadcast()
                calls = {n.call: n for n in self.nodes if n.call is not None}
                if not calls:
                    time.sleep(0.02)
                    continue
                ready, _ = self.ray.wait(list(calls), num_returns=1, timeout=0.02)
                for ref in ready:
                    node = calls[ref]
                    node.call = None
                    t0 = time.perf_counter()
                    try:
                        out = self.ray.get(ref)
                    except Exception as e:  # the actor or its node died, or the node reported its failure
                        self._lost(node, short_error(e))
                        continue
                    if out is not None:
                        self._import(node, out, time.perf_counter() - t0)
        except Exception as e:
            self.error = f"remote sampler importer: {type(e).__name__}: {e}"

    def _check_silent(self) -> None:
        """The liveness rule of local workers: a node whose next_batch (answered within PULL_TIMEOUT_S when all is
        well) has not returned for --heartbeat_timeout_sec is hung (its actor process stopped, deadlocked, or its
        node unreachable without Ray noticing) and is declared lost."""
        now = time.monotonic()
        for n in self.nodes:
            if n.alive and n.call is not None and now - n.call_sent > self.cfg.heartbeat_timeout_sec:
                n.call = None
                limit = f"--heartbeat_timeout_sec={self.cfg.heartbeat_timeout_sec:g}"
                self._lost(n, f"next_batch silent for {now - n.call_sent:.0f} s, over {limit}")

    def _take_free_slots(self) -> None:
        for n in self.nodes:
            for w in n.workers:
                msgs = self.channels.actor[w].get_many(block=False)
                slots = [s for m in msgs if m[0] == FREE_SLOTS for s in m[1]]  # RESEND etc. are for real actors
                if slots:
                    n.pool.release(slots)

    def _import(self, node: NodeState, out: dict, get_s: float) -> None:
        stats = out["stats"]
        arrived = time.time()
        with self.lock:
            self.samples.extend(out["samples"])
            self.discarded += out["discarded"]
        if out["wire"] is None:
            return
        t0 = time.perf_counter()
        batch = decode(out["wire"])
        decode_s = time.perf_counter() - t0
        # counted apart from the discarded rollouts of crashed actor workers (the summary line at the end)
        current = self.weights.version
        stale = stale_rollouts(batch["policy_version"], current, self.cfg.max_policy_lag)
        lags = policy_lags(batch["policy_version"], current)  # at arrival; the learner measures them again
        node.backlog.extend((batch, int(i)) for i in np.flatnonzero(~stale))
        t = self.totals
        t["batches"] += 1
        t["rollouts"] += stats["rollouts"]
        t["stale"] += int(stale.sum())
        t["raw_bytes"] += stats["raw_bytes"]
        t["wire_bytes"] += stats["wire_bytes"]
        t["encode_s"] += stats["encode_s"]
        t["decode_s"] += decode_s
        t["get_s"] += get_s
        t["latency_s"] += max(0.0, arrived - stats["sent_at"])  # node clocks: meaningful on one machine only
        t["max_lag"] = max(t["max_lag"], lags[1])

    def _place_backlog(self, node: NodeState) -> None:
        t0 = time.perf_counter()
        while node.backlog and node.pool.free:
            batch, i = node.backlog.popleft()
            slot = node.pool.acquire()
            assert slot is not None  # the pool had a free slot
            write_rollout(self.buffers, slot, batch, i)
            self.channels.learner[0].put(Rollout.wire(self.buffers.worker_of_slot(slot), slot, 0))
            self.totals["imported"] += 1
        self.totals["write_s"] += time.perf_counter() - t0

    def _maybe_broadcast(self) -> None:
        if self.weight_calls:  # collect finished calls (errors show up as lost nodes through next_batch)
            done, self.weight_calls = self.ray.wait(self.weight_calls, num_returns=len(self.weight_calls), timeout=0)
            for ref in done:
                try:
                    self.ray.get(ref)
                except Exception:
                    pass
        if self.weights.version - self.broadcast_version < self.cfg.broadcast_interval:
            return
        t0 = time.perf_counter()
        flat, version = self.weights.snapshot()
        ref = self.ray.put((flat.numpy(), version))
        self.weight_calls += [n.handle.set_weights.remote(ref) for n in self.nodes if n.alive]
        self.broadcast_version = version
        self.totals["broadcasts"] += 1
        self.totals["broadcast_s"] += time.perf_counter() - t0

    def _lost(self, node: NodeState, why: str) -> None:
        node.alive = False
        left = sum(n.alive for n in self.nodes)
        rest = f"{left} sampler node(s)" + (" and the local samplers" if self.cfg.local_samplers else "")
        going_on = f"continuing with {rest}" if left or self.cfg.local_samplers else "no sampler left"
        with self.lock:
            self.events.append(f"sampler node {node.index} lost ({why}); {going_on}")
        try:
            self.ray.kill(node.handle)  # a node that failed but still runs: stop its actor (its components follow)
        except Exception:
            pass

    # ---- runner hooks -------------------------------------------------------------------------------------
    def update(self, progress: ProgressTracker) -> str | None:
        """Called by the runner's main loop: forwards the remote samples and discarded counts, logs node losses;
        returns why the run must stop, if it must."""
        with self.lock:
            events, self.events = self.events, []
            samples, self.samples = self.samples, []
            discarded, self.discarded = self.discarded, 0
        for line in events:
            self.log(line)
        for policy, env_frames, episodes, stats in samples:
            progress.add_samples(policy, env_frames, episodes, stats)
            self.remote_env_frames += env_frames
        progress.discarded_rollouts += discarded
        self._progress_line(progress)
        if self.error:
            return self.error
        if not self.cfg.local_samplers and self.nodes and not any(n.alive for n in self.nodes):
            return "every sampler node was lost (--local_samplers=False)"
        return None

    def _progress_line(self, progress: ProgressTracker) -> None:
        """Every --report_interval_sec once the nodes run: how much they sample (and what share of the run)."""
        if self.thread is None:
            return
        now, total = time.monotonic(), progress.total_env_frames()
        if self.last_line is None:
            self.last_line = (now, self.remote_env_frames, total)
            return
        then, remote_then, total_then = self.last_line
        if now - then < self.cfg.report_interval_sec:
            return
        self.last_line = (now, self.remote_env_frames, total)
        remote, everything = self.remote_env_frames - remote_then, total - total_then
        share = f" ({100 * remote / everything:.0f}% of all)" if everything > 0 else ""
        alive, rate = sum(n.alive for n in self.nodes), f"{remote / (now - then):,.0f} {unit_name(self.cfg)}/s"
        self.log(
            f"sampler nodes: {alive} of {len(self.nodes)} alive, {rate} from them"
            f"{share} over the last {now - then:.0f} s, {self.totals['imported']} rollouts imported"
        )

    def stop(self) -> None:
        """Stop the importer, then every live node's components, then the actors; logs the transfer totals."""
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        if self.ray is None:
            return  # never connected (a Ray call now would start a local Ray instance)
        live = [n for n in self.nodes if n.alive]
        calls = [n.handle.stop.remote() for n in live]
        try:
            self.ray.get(calls, timeout=self.cfg.shutdown_timeout_sec + 15)
        except Exception as e:
            self.log(f"stopping the sampler nodes: {short_error(e)}")
        for n in self.nodes:
            try:
                self.ray.kill(n.handle)
            except Exception:
                pass
        self.log(self.summary())
        self.ray.shutdown()

    def summary(self) -> str:
        t = self.totals
        b = max(t["batches"], 1)
        r = max(t["rollouts"], 1)
        return (
            f"remote samplers: {t['rollouts']} rollouts in {t['batches']} transfers from {len(self.nodes)} node(s), "
            f"{t['stale']} stale dropped; per rollout {t['raw_bytes'] / r / 1024:.1f} KiB raw, "
            f"{t['wire_bytes'] / r / 1024:.1f} KiB sent; per transfer encode {1e3 * t['encode_s'] / b:.2f} ms, "
            f"get {1e3 * t['get_s'] / b:.2f} ms, decode {1e3 * t['decode_s'] / b:.2f} ms, "
            f"sent-to-received {1e3 * t['latency_s'] / b:.1f} ms; largest policy lag on arrival {t['max_lag']}; "
            f"{t['broadcasts']} weight broadcasts"
        )
