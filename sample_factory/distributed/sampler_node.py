"""The Ray actor of one sampler node (--sampler_nodes): a sampler-only runtime on its node, the same actor workers,
policy workers, shared-memory slots and supervisor as on the learner node, with an exporter in the learner's place.

The exporter (a thread of the actor process, `_loop`) reads Rollout(actor_idx, slot, gen) messages from the
learner channel, copies the finished slots out ([k, T(+1), n, ...] arrays, rollouts.pack_slots), returns the slots
to their actor workers at once (FreeSlots) and keeps the copies until the learner node pulls them (`next_batch`,
one Ray call per batch of every rollout finished meanwhile). It holds at most one node's worth of slots; beyond
that it leaves Rollout messages unread, so the actor workers park their splits (the same bounded backpressure as a
slow learner). Weights arrive with `set_weights` and are published into the node's shared weights, where the
policy workers pick them up as they do a local learner's publishes; their version is the learner's.

Components poll this process's pid (runtime/component.py), so when the actor is killed with its node they exit by
themselves within a second; their shared memory is unlinked file descriptors (torch's default), nothing in
/dev/shm.
"""

from __future__ import annotations

import collections
import copy
import multiprocessing
import os
import shutil
import socket
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sample_factory.config import Config
from sample_factory.distributed.rollouts import batch_size, choose_compression, concat_batches, encode, pack_slots
from sample_factory.distributed.rollouts import wire_bytes as _wire_bytes
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runtime.component import Component, ComponentKey
from sample_factory.runtime.device import resolve_device_name
from sample_factory.runtime.messages import ROLLOUT, Channels, FreeSlots, Report, decode
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers, make_buffer_spec
from sample_factory.runtime.supervisor import RESTARTABLE, Supervisor
from sample_factory.workers.actor_worker import ActorWorker
from sample_factory.workers.policy_worker import PolicyWorker


def node_cfg(cfg: Config, node_index: int) -> Config:
    """The sampler node's copy of the run's config: its own env seeds, its own device choice, no remote nodes."""
    cfg = copy.copy(cfg)
    cfg.sampler_nodes, cfg.local_samplers = 0, True
    cfg.env_seed_offset += (node_index + 1) * 1_000_003  # envs of different nodes never share a seed
    cfg.device = "auto"  # resolved on the node: a sampler node may have a GPU the learner node lacks, or not
    return cfg


class SamplerNode:
    """Body of the Ray actor (remote_samplers.py wraps it with ray.remote): start, next_batch, set_weights, stop."""

    def __init__(
        self,
        cfg: Config,
        node_index: int,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_agents: int,
        flat_weights: np.ndarray,
        version: int,
    ):
        self.cfg, self.node_index = node_cfg(cfg, node_index), node_index
        self.spaces, self.num_agents = (obs_space, action_space), num_agents
        self.initial_weights = (flat_weights, version)
        self.cond = threading.Condition()
        self.pending: list[dict[str, np.ndarray]] = []  # packed rollouts not pulled yet (guarded by cond)
        self.pending_rollouts = 0
        self.samples: list[tuple] = []  # "samples" report payloads of the actor workers since the last pull
        self.discarded = 0  # rollouts of crashed actor workers (their slots were reused)
        self.failed: str | None = None  # why the node cannot go on (a component failed for good)
        self.stopping = False
        self.compress: dict[str, bool] | None = None  # decided on the first batch
        self.thread: threading.Thread | None = None
        self._supervisor: Supervisor | None = None
        self._channels: Channels | None = None

    @property
    def supervisor(self) -> Supervisor:
        assert self._supervisor is not None, "the node's components are made by start()"
        return self._supervisor

    @property
    def channels(self) -> Channels:
        assert self._channels is not None, "the node's channels are made by start()"
        return self._channels

    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] [sampler node {self.node_index}] {msg}", flush=True)

    # ---- start --------------------------------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        cfg = self.cfg
        niceness = self._reset_niceness()
        cfg.device = resolve_device_name(cfg.device)
        model = ActorCritic(cfg, *self.spaces)
        spec = make_buffer_spec(cfg, *self.spaces, model.rnn_state_size, self.num_agents)
        self.buffers = TrajectoryBuffers(spec, share=True)
        self.weights = SharedWeights.for_model(model)
        flat, version = self.initial_weights
        self.weights.publish_flat(torch.from_numpy(np.array(flat)), version)
        assert cfg.num_workers is not None, "parse_cfg resolves --num_workers"
        self._channels = Channels(cfg.num_workers, 1, cfg.message_queue)
        self.max_pending = spec.num_slots  # copies held at most: one node's worth of slots
        # forkserver with the components' modules preloaded, as on the learner node (runtime/fork_server.py)
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(
            ["torch", "sample_factory.workers.actor_worker", "sample_factory.workers.policy_worker"]
        )
        self._supervisor = Supervisor(cfg, ctx, self._make_component, self.buffers, self.channels, self.log)
        keys: list[tuple[str, Any]] = [("policy", (0, i)) for i in range(cfg.policy_workers_per_policy)]
        keys += [("actor", w) for w in range(cfg.num_workers)]
        for role, index in keys:
            self.supervisor.start(self._make_component(role, index))
        self.thread = threading.Thread(target=self._loop, name="sf_exporter", daemon=True)
        self.thread.start()
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "device": cfg.device,
            "pids": self.pids(),
            "niceness": niceness,
        }

    @staticmethod
    def _reset_niceness() -> int:
        """Ray starts its workers at niceness 15 (RAY_worker_niceness); the components inherit this process's, and
        would lose every CPU they share with anything else (measured: a sampler node sharing the learner's machine
        then sampled 20x slower than alone). Back to 0 where allowed (root or CAP_SYS_NICE); returns the niceness
        the components run at."""
        try:
            if os.getpriority(os.PRIO_PROCESS, 0) > 0:
                os.setpriority(os.PRIO_PROCESS, 0, 0)
        except OSError:
            pass  # not allowed: the sampler node's machine should then have nothing else to run
        return os.getpriority(os.PRIO_PROCESS, 0)

    def _make_component(self, role: str, index: Any) -> Component:
        cfg, b, ch = self.cfg, self.buffers, self.channels
        if role == "policy":
            return PolicyWorker(cfg, 0, index[1], b, ch, self.weights, *self.spaces)
        # as on the learner node: no random decorrelation steps once the policy has trained (a resumed run, or a
        # node that joins a run under way)
        return ActorWorker(cfg, index, b, ch, resumed=self.weights.version > 0)

    def pids(self) -> list[int]:
        """Component processes (for tests: they must be gone after the node is stopped or killed)."""
        if self._supervisor is None:
            return []
        return [p.ps.pid for p in self.supervisor.processes.values() if p.ps is not None]

    # ---- the exporter -------------------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self.stopping:
                for r in self.channels.report.get_many(timeout=0.02):
                    self._on_report(r)
                self._export()
                why = self.supervisor.check(stopping=False)
                if why:
                    self.failed = why
                    break
        except Exception as e:
            self.failed = f"exporter: {type(e).__name__}: {e}"
        finally:
            with self.cond:
                self.cond.notify_all()

    def _on_report(self, msg: tuple) -> None:
        r = Report._make(msg)
        key = ComponentKey(r.role, r.index)
        self.supervisor.monitor.seen(key, r.payload if r.report_kind == "heartbeat" else "")
        if r.report_kind == "samples":
            with self.cond:
                self.samples.append(r.payload)
        elif r.report_kind == "finished":
            self.supervisor.on_finished(key, r.payload)
        elif r.report_kind == "error":
            message, _trace, *fatal = r.payload
            self.log(f"ERROR in {r.role} {r.index}: {message}")
            if r.role not in RESTARTABLE or any(fatal):
                self.failed = f"{r.role} {r.index} failed: {message}"

    def _export(self) -> None:
        room = self.max_pending - self.pending_rollouts
        if room <= 0:
            return  # the learner node is behind: leave the slots full, the actors park their splits
        msgs = [decode(m) for m in self.channels.learner[0].get_many(block=False, max_messages=room)]
        rollouts = [m for m in msgs if m.kind == ROLLOUT]
        if not rollouts:
            return
        gen = self.buffers.generation.tolist()
        fresh = [m for m in rollouts if m.gen == gen[m.actor_idx]]  # others: from a replaced actor worker
        if fresh:
            batch = pack_slots(self.buffers, [m.slot for m in fresh])
            returned: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
            for m in fresh:
                returned[m.actor_idx, m.gen].append(m.slot)
            for (actor_idx, g), slots in returned.items():
                self.channels.actor[actor_idx].put(FreeSlots.wire(slots, g))
        with self.cond:
            self.discarded += len(rollouts) - len(fresh)
            if fresh:
                self.pending.append(batch)
                self.pending_rollouts += len(fresh)
                self.cond.notify_all()

    # ---- called by the learner node -----------------------------------------------------------------------
    def next_batch(self, timeout: float) -> dict | None:
        """Every rollout finished since the last call (waits up to `timeout` s for one), encoded for the wire,
        with the actor workers' progress reports; None if nothing finished. Raises once the node has failed."""
        with self.cond:
            self.cond.wait_for(lambda: self.pending or self.failed or self.stopping, timeout)
            if self.failed:
                raise RuntimeError(self.failed)
            pending, self.pending, self.pending_rollouts = self.pending, [], 0
            samples, self.samples = self.samples, []
            discarded, self.discarded = self.discarded, 0
        if not pending and not samples:
            return None
        t0 = time.perf_counter()
        wire, raw = None, 0
        if pending:
            batch = concat_batches(pending)
            if self.compress is None:
                self.compress = choose_compression(batch, self.cfg.remote_compression, self.cfg.remote_link_mbps)
            wire = encode(batch, self.compress)
            raw = sum(a.nbytes for a in batch.values())
        stats = {
            "rollouts": batch_size(batch) if pending else 0,
            "raw_bytes": raw,
            "wire_bytes": _wire_bytes(wire) if wire else 0,
            "encode_s": time.perf_counter() - t0,
            "sent_at": time.time(),
        }
        return {"wire": wire, "samples": samples, "discarded": discarded, "stats": stats}

    def set_weights(self, weights: tuple[np.ndarray, int]) -> int:
        flat, version = weights
        if version > self.weights.version:  # broadcasts may overtake one another
            self.weights.publish_flat(torch.from_numpy(np.array(flat)), version)
        return version

    def stop(self) -> dict:
        """Stop the components in order (actors first) and release the channels; returns the exporter's state."""
        self.stopping = True
        with self.cond:
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=10)
        if self._supervisor is not None:

            def drain(timeout: float) -> None:
                for r in self.channels.report.get_many(block=timeout > 0, timeout=timeout):
                    self._on_report(r)

            self.supervisor.stop_all(("actor", "policy"), drain, self.cfg.shutdown_timeout_sec, hurry=lambda: False)
            self.channels.close()
            if self.supervisor.runner_tmpdir:
                # The learner node kills this actor next (no exit handlers run): the fork server's socket dir goes now.
                shutil.rmtree(self.supervisor.runner_tmpdir, ignore_errors=True)
        return {"failed": self.failed, "unsent_rollouts": self.pending_rollouts}
