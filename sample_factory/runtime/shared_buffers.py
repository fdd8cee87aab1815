"""Shared-memory trajectory tensors and the bounded pool of rollout slots.

A *slot* holds the rollout of one split of one actor worker: n agent columns (envs per split x agents per env)
stepped in lockstep for T steps. Slot tensors (S slots in total, T = --rollout):

    obs[key]        [S, T+1, n, *shape]      one tensor per observation key (envs/spaces.py; "obs" for a plain
                                             Box): obs[t] is seen before step t; obs[T] bootstraps the rollout
    rnn_states      [S, T+2, n, H]           core state fed with obs[t], raw (reset where is_first);
                                             [T+1] is the state after position T, carried to the next slot
    is_first        [S, T+1, n]    bool      obs[t] starts an episode, so the core state must be reset
    actions         [S, T+1, n, *act_shape]  written by policy workers ([T] is carried to the next slot)
    log_probs       [S, T+1, n]    f32       behaviour log-probability of the action
    values          [S, T+1, n]    f32       behaviour value estimate
    policy_version  [S, T+1, n]    i64       version of the weights that produced the action
    policy_id       [S, T+1, n]    i64       the policy that acts at position t (with several policies a column
                                             passes to another policy at an episode start, and agents of one env
                                             may be mixed; each learner masks the others' steps)
    rewards         [S, T, n]      f32       raw env reward of step t
    dones           [S, T, n]      bool      step t ended the episode (terminated or truncated)
    truncated       [S, T, n]      bool      step t ended the episode by a time limit
    active          [S, T, n]      bool      the agent took part in step t (multi-agent envs: False after it
                                             finished before the others; such steps are masked in training)
    final_values    [S, T, n]      f32       V(final observation) where truncated (value bootstrap)

Per split (actor_idx * splits + split_idx), a side area for the final observation of truncated episodes,
read by policy workers to compute `final_values`:

    final_obs[key]  [num_splits_total, n, *shape]

Per policy worker (W = num_policies x policy_workers_per_policy, worker p * policy_workers_per_policy + i) and
split, where it writes its answers; the actor copies the answer it accepts into the slot (actor_worker.py,
`_take_answer`), so a late or duplicate answer to a request (re-sent after a policy-worker restart) can never
overwrite a step the actor has already taken:

    answer_actions       [W, num_splits_total, n, *act_shape]
    answer_log_probs     [W, num_splits_total, n]    f32
    answer_values        [W, num_splits_total, n]    f32
    answer_version       [W, num_splits_total]       i64   version of the weights of the answer
    answer_rnn_states    [W, num_splits_total, n, H]       core state after the step (-> rnn_states[slot, t + 1])
    answer_final_values  [W, num_splits_total, n]    f32   V(final observation) of episodes truncated at t - 1

Liveness bookkeeping shared by every process (see docs/architecture.md, "Worker restarts"):

    generation      [num_workers]                 i64  bumped by the runner when it restarts actor worker w;
                                                       messages of an older generation are ignored
    request_seq     [num_workers, splits]         i64  sequence number of each split's outstanding request;
                                                       policy workers skip requests that are no longer current
    learner_busy    [num_policies]                f64  time.monotonic() when learner p last showed it is working
                                                       (between SGD steps, while writing a checkpoint): an actor
                                                       waiting for its slots gives up only when no learner has
                                                       been busy for --heartbeat_timeout_sec

Slots are owned by actor workers: worker w owns `slots_of_worker(w)` and only it writes into them; a slot index
travels to the learner when the rollout is complete and comes back when the learner has copied it out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from sample_factory.algo.base import TRAJECTORY_KEYS
from sample_factory.algo.distributions import action_columns
from sample_factory.config import Config
from sample_factory.envs.spaces import ObsField, obs_fields


def torch_dtype(np_dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=np_dtype)).dtype


@dataclass
class BufferSpec:
    num_workers: int
    splits_per_worker: int
    agents_per_split: int  # columns of a slot: envs per split x agents per env
    rollout: int
    slots_per_split: int
    obs_fields: dict[str, ObsField]
    action_shape: tuple
    action_dtype: torch.dtype
    rnn_size: int  # 0 when the model has no recurrent core
    policy_workers: int = 1  # in all policies: each has its own answer area
    num_policies: int = 1

    @property
    def slots_per_worker(self) -> int:
        return self.splits_per_worker * self.slots_per_split

    @property
    def num_slots(self) -> int:
        return self.num_workers * self.slots_per_worker

    @property
    def samples_per_slot(self) -> int:
        return self.agents_per_split * self.rollout


def slots_per_split_for(cfg: Config, agents_per_split: int) -> int:
    """Enough slots that every learner can hold one iteration (plus the accumulation allowance) while every split
    still fills a slot; in sync mode exactly one iteration's worth, so no sample is collected ahead."""
    assert cfg.num_workers is not None, "parse_cfg resolves --num_workers"
    splits = cfg.num_workers * cfg.worker_num_splits
    slot_samples = agents_per_split * cfg.rollout
    iteration_slots = math.ceil(cfg.batch_size * cfg.num_batches_per_epoch / slot_samples)
    if not cfg.async_rl:
        return max(1, iteration_slots // splits)
    accumulate_slots = math.ceil(cfg.batch_size * cfg.num_minibatches_to_accumulate / slot_samples)
    # Every learner may hold almost an iteration's worth while it waits for the rest. With P policies a slot carries
    # about 1/P of a learner's trajectories (envs pass between policies), so a learner's iteration spans about
    # P times as many slots, and the P learners hold (sharing) slots at the same time.
    held = cfg.num_policies**2 * (iteration_slots + accumulate_slots)
    return max(cfg.min_traj_buffers_per_worker, math.ceil(held / splits) + 1)


def make_buffer_spec(
    cfg, obs_space: gym.Space, action_space: gym.Space, rnn_size: int, num_agents: int = 1
) -> BufferSpec:
    agents_per_split = cfg.num_envs_per_worker // cfg.worker_num_splits * num_agents
    action_shape = action_columns(action_space)
    int_actions = isinstance(action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
    action_dtype = torch.int64 if int_actions else torch.float32
    return BufferSpec(
        num_workers=cfg.num_workers,
        splits_per_worker=cfg.worker_num_splits,
        agents_per_split=agents_per_split,
        rollout=cfg.rollout,
        slots_per_split=slots_per_split_for(cfg, agents_per_split),
        obs_fields=obs_fields(obs_space),
        action_shape=action_shape,
        action_dtype=action_dtype,
        rnn_size=rnn_size,
        policy_workers=cfg.num_policies * cfg.policy_workers_per_policy,
        num_policies=cfg.num_policies,
    )


class TrajectoryBuffers:
    """The slot tensors of one run, allocated once (shared memory in multi-process mode)."""

    SLOT_KEYS = TRAJECTORY_KEYS
    ANSWER_KEYS = (
        "answer_actions",
        "answer_log_probs",
        "answer_values",
        "answer_version",
        "answer_rnn_states",
        "answer_final_values",
    )

    def __init__(self, spec: BufferSpec, share: bool = True):
        self.spec = spec
        S, T, n = spec.num_slots, spec.rollout, spec.agents_per_split
        h = max(spec.rnn_size, 1)  # a 1-wide dummy keeps indexing uniform for models without a core
        num_splits = spec.num_workers * spec.splits_per_worker
        self.obs = {
            k: torch.zeros((S, T + 1, n, *f.shape), dtype=torch_dtype(f.dtype)) for k, f in spec.obs_fields.items()
        }
        self.final_obs = {
            k: torch.zeros((num_splits, n, *f.shape), dtype=torch_dtype(f.dtype)) for k, f in spec.obs_fields.items()
        }
        self.rnn_states = torch.zeros((S, T + 2, n, h), dtype=torch.float32)
        self.is_first = torch.zeros((S, T + 1, n), dtype=torch.bool)
        self.active = torch.ones((S, T, n), dtype=torch.bool)
        self.actions = torch.zeros((S, T + 1, n, *spec.action_shape), dtype=spec.action_dtype)
        self.log_probs = torch.zeros((S, T + 1, n), dtype=torch.float32)
        self.values = torch.zeros((S, T + 1, n), dtype=torch.float32)
        self.policy_version = torch.zeros((S, T + 1, n), dtype=torch.int64)
        self.policy_id = torch.zeros((S, T + 1, n), dtype=torch.int64)
        self.rewards = torch.zeros((S, T, n), dtype=torch.float32)
        self.dones = torch.zeros((S, T, n), dtype=torch.bool)
        self.truncated = torch.zeros((S, T, n), dtype=torch.bool)
        self.final_values = torch.zeros((S, T, n), dtype=torch.float32)
        self.generation = torch.zeros(spec.num_workers, dtype=torch.int64)
        self.request_seq = torch.zeros((spec.num_workers, spec.splits_per_worker), dtype=torch.int64)
        self.learner_busy = torch.zeros(spec.num_policies, dtype=torch.float64)
        W = spec.policy_workers
        self.answer_actions = torch.zeros((W, num_splits, n, *spec.action_shape), dtype=spec.action_dtype)
        self.answer_log_probs = torch.zeros((W, num_splits, n), dtype=torch.float32)
        self.answer_values = torch.zeros((W, num_splits, n), dtype=torch.float32)
        self.answer_version = torch.zeros((W, num_splits), dtype=torch.int64)
        self.answer_rnn_states = torch.zeros((W, num_splits, n, h), dtype=torch.float32)
        self.answer_final_values = torch.zeros((W, num_splits, n), dtype=torch.float32)
        if share:
            for t in self.tensors().values():
                t.share_memory_()

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor by a flat name ("obs.<key>" and "final_obs.<key>" for the observation dicts)."""
        out = {f"obs.{k}": v for k, v in self.obs.items()}
        out.update({f"final_obs.{k}": v for k, v in self.final_obs.items()})
        out.update(
            {
                k: getattr(self, k)
                for k in (*self.SLOT_KEYS, "generation", "request_seq", "learner_busy", *self.ANSWER_KEYS)
            }
        )
        return out

    def slots_of_worker(self, worker_idx: int) -> list[int]:
        k = self.spec.slots_per_worker
        return list(range(worker_idx * k, (worker_idx + 1) * k))

    def worker_of_slot(self, slot: int) -> int:
        return slot // self.spec.slots_per_worker

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def gather(
        self,
        slots: list[int],
        columns: list[torch.Tensor] | None = None,
        keys: Iterable[str] | None = None,
        pin_memory: bool = False,
    ) -> dict:
        """Copy the given slots out as trajectories: every tensor becomes [len(slots) * n, T(+1), ...]; "obs" is
        a dict of such tensors. With `columns` (one index tensor per slot) only those columns are copied:
        [total columns, T(+1), ...]. With `keys` (SLOT_KEYS names, "obs") only those tensors are copied.
        With `pin_memory` the copies are page-locked, so that a CUDA learner moves them without waiting
        (algo/transfer.py). Each byte is copied once, straight into its trajectory-major place."""
        keys = (*self.SLOT_KEYS, "obs") if keys is None else tuple(keys)
        if unknown := set(keys) - {*self.SLOT_KEYS, "obs"}:
            raise KeyError(f"no trajectory tensor named {sorted(unknown)}")
        if columns is not None:
            si = torch.as_tensor(slots, dtype=torch.long).repeat_interleave(torch.tensor([len(c) for c in columns]))
            ci = torch.cat(columns)

            def take(t: torch.Tensor) -> torch.Tensor:
                x = t[si, :, ci]  # [K, L, ...] (advanced indexing copies)
                return x.pin_memory() if pin_memory else x

        else:

            def take(t: torch.Tensor) -> torch.Tensor:
                k, L, n = len(slots), t.shape[1], t.shape[2]
                out = torch.empty((k * n, L, *t.shape[3:]), dtype=t.dtype, pin_memory=pin_memory)
                for j, s in enumerate(slots):  # slot s [L, n, ...] -> rows j*n..(j+1)*n-1 [n, L, ...]
                    out[j * n : (j + 1) * n].copy_(t[s].transpose(0, 1))
                return out

        out: dict = {k: take(getattr(self, k)) for k in self.SLOT_KEYS if k in keys}
        if "obs" in keys:
            out["obs"] = {k: take(v) for k, v in self.obs.items()}
        return out


class SlotPool:
    """The free slots of one actor worker. Never blocks: an empty pool is reported to the caller, which parks
    the split until the learner returns slots (explicit, bounded backpressure)."""

    def __init__(self, slots: list[int]):
        self.owned = frozenset(slots)
        self.free = list(slots)

    def acquire(self) -> int | None:
        return self.free.pop(0) if self.free else None

    def release(self, slots: list[int]) -> None:
        free = set(self.free)
        for s in slots:  # validate everything before changing the pool
            if s not in self.owned:
                raise RuntimeError(f"slot {s} was returned to a worker that does not own it")
            if s in free:
                raise RuntimeError(f"slot {s} returned twice")
            free.add(s)
        self.free.extend(slots)


class SharedWeights:
    """The published weights of one policy, lock-free: two flat shared buffers and a sequence counter (a seqlock).

    The learner writes the buffer readers are not pointed at, points `active` at it, then bumps `seq`. A buffer
    is rewritten only two publishes after it became active, so a policy worker's copy is intact if `seq` did not
    move while it copied; otherwise it copies again (publishes are rare next to a copy).
    No semaphore is involved, so nothing named is left in /dev/shm if a process is SIGKILLed. The ordering relies
    on x86-64's total store order (the platform we test); weakly ordered CPUs (ARM) would need explicit fences.
    """

    def __init__(self, num_values: int, dtype: torch.dtype = torch.float32):
        # float64 when the model holds float64 tensors (normalizer statistics: a count past 2^24 is not exact in
        # float32); float32 weights round-trip exactly through it.
        self.flat = torch.zeros((2, num_values), dtype=dtype).share_memory_()
        # [seq, active buffer index, version of buffer 0, version of buffer 1]
        self.meta = torch.zeros(4, dtype=torch.int64).share_memory_()

    @property
    def version(self) -> int:
        return int(self.meta[2 + int(self.meta[1])])

    @staticmethod
    def tensors_of(model: torch.nn.Module) -> list[torch.Tensor]:
        return [*model.parameters(), *(b for b in model.buffers() if b.is_floating_point())]

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> SharedWeights:
        tensors = cls.tensors_of(model)
        wide = any(t.dtype == torch.float64 for t in tensors)
        return cls(sum(t.numel() for t in tensors), torch.float64 if wide else torch.float32)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1).to("cpu", self.flat.dtype) for t in self.tensors_of(model)])
        self.publish_flat(flat, version)

    def publish_flat(self, flat: torch.Tensor, version: int) -> None:
        """Publish weights that arrive already flat ([num_values], e.g. from another node's `snapshot`)."""
        target = 1 - int(self.meta[1])
        self.flat[target].copy_(flat)
        self.meta[2 + target] = version
        self.meta[1] = target
        self.meta[0] += 1  # last: readers that saw the old seq re-check it after copying

    def snapshot(self) -> tuple[torch.Tensor, int]:
        """A consistent copy of the published weights [num_values] and their version."""
        while True:
            seq = int(self.meta[0])
            active = int(self.meta[1])
            flat = self.flat[active].clone()
            version = int(self.meta[2 + active])
            if int(self.meta[0]) == seq:
                return flat, version

    def load_into(self, model: torch.nn.Module) -> int:
        """Copy the published weights into `model`; returns their version."""
        flat, version = self.snapshot()
        tensors = self.tensors_of(model)
        if sum(t.numel() for t in tensors) != flat.numel():
            raise ValueError("published weights do not match the model's size")
        with torch.no_grad():
            offset = 0
            for t in tensors:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()
        return version
