"""Experience replay: a fixed-capacity buffer of transitions in preallocated tensors, uniform or prioritized
sampling (a sum-tree), importance weights and n-step targets. Pure data structures and math, no process code: the
learner's algorithm (algo/dqn.py) owns one buffer and writes every finished rollout into it.

Layout. Transitions arrive as rollouts: trajectories [M, T+1] of one env column each (T = --rollout, position T
is the bootstrap observation). The buffer stores them as *blocks* of T transitions in ring order, and every
observation once ([blocks, T+1, *shape]: obs[t] is the state of transition t, obs[t + m] its n-step bootstrap
state), instead of an (obs, next_obs) pair per transition. A transition is addressed by a flat index
block * T + t. n-step windows end at the block's end (position T bootstraps them), as RLlib's do at the end of
a sample fragment; each transition records its own bootstrap offset m <= n and discount.

Frame stacks (`stacked` keys, e.g. Atari's [4, 84, 84]) are stored as frames, once: per block the k - 1 older frames
of obs[0]'s stack and the newest frame of every position ([blocks, T + k, 84, 84]), plus where the latest episode
start after position 0 lies; a stack is rebuilt from them on sampling, repeating an episode's first frame before its
start (what gymnasium's FrameStackObservation does at a reset). Every added rollout is checked to follow that rule
(each stack is the previous one shifted by a frame, or its first frame repeated where an episode starts), so a stack
that does not is an error, never silently wrong data.

Where the observations live (`device`): the observation storage (obs, frames and their episode starts) may sit on
the learner's GPU. Then every transition crosses to the device once, when its rollout is added, and a sampled
minibatch is gathered there, instead of gathering it on the host and copying it over for every SGD step (14 MB a
step for 256 Atari transitions and their bootstrap states). The bookkeeping (priorities, validity, offsets, actions,
returns) stays on the host, where the sampling decisions are made.

Terminated vs truncated inside a window: a termination at step t + k ends the return there (no bootstrap); a
truncation adds gamma^(k+1) * V(final observation), the value the policy worker computed for the final
observation when the episode was cut (`final_values`), and also stops bootstrapping from obs[t + m] (that is
already the next episode's first observation).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor


class NStepTargets(NamedTuple):
    """Per transition of a rollout [M, T]: what the n-step Q target needs besides the bootstrap Q-value."""

    returns: Tensor  # [M, T] discounted reward sum over the window (plus gamma^(k+1) V(final obs) on truncation)
    discounts: Tensor  # [M, T] gamma^m where the target bootstraps from obs[t + m]; 0 when the episode ended
    offsets: Tensor  # [M, T] int64 m in 1..n: the bootstrap observation is obs[t + m]


def nstep_targets(
    rewards: Tensor, terminated: Tensor, truncated: Tensor, final_values: Tensor, gamma: float, n: int
) -> NStepTargets:
    """rewards, terminated, truncated, final_values: [M, T] (terminated excludes truncation) -> n-step targets.
    The window of transition t covers steps t .. t + m - 1 with m = min(n, T - t), cut at the first episode end."""
    M, T = rewards.shape
    returns = torch.zeros(M, T, dtype=torch.float32)
    discounts = torch.zeros(M, T, dtype=torch.float32)
    offsets = torch.zeros(M, T, dtype=torch.int64)
    # Backwards over k = 0..n-1 is awkward with the ends; forwards over the window is vectorized over t instead.
    alive = torch.ones(M, T, dtype=torch.bool)  # the window of t has not ended yet (episode end or block end)
    scale = torch.ones(M, T, dtype=torch.float32)  # gamma^k
    t_idx = torch.arange(T)
    rewards, final_values = rewards.float(), final_values.float()
    for k in range(n):
        pos = t_idx + k  # [T] the step at window offset k
        inside = pos < T  # [T]
        p = pos.clamp(max=T - 1)
        step = alive & inside  # [M, T] this step belongs to the window
        r = rewards[:, p]
        term, trunc = terminated[:, p] & step, truncated[:, p] & step
        returns += torch.where(step, scale * r, 0.0)
        returns += torch.where(trunc, scale * gamma * final_values[:, p], 0.0)
        offsets = torch.where(step, k + 1, offsets)
        scale = scale * gamma
        # the window keeps bootstrapping unless the episode ended in it
        ended = term | trunc
        discounts = torch.where(step & ~ended, scale, torch.where(step, 0.0, discounts))
        alive = alive & inside & ~ended
    return NStepTargets(returns, discounts, offsets)


def importance_weights(probs: Tensor, size: int, beta: float) -> Tensor:
    """probs [B]: sampling probabilities P(i) of a batch from `size` stored transitions -> weights [B]
    (size * P(i))^-beta, divided by the batch's largest so they only ever scale the loss down."""
    w = (size * probs.double()).pow(-beta)
    return (w / w.max()).float()


def annealed_beta(beta0: float, progress: float) -> float:
    """beta from beta0 at the start to 1 at the end of training (progress in [0, 1]), linearly."""
    return beta0 + (1.0 - beta0) * min(max(progress, 0.0), 1.0)


class SumTree:
    """Priorities of `capacity` items in a complete binary tree of partial sums (float64), so that sampling an item
    with probability priority / total and updating priorities both cost O(log capacity), vectorized over a batch."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.leaves = 1 << max(0, math.ceil(math.log2(max(capacity, 1))))
        self.tree = np.zeros(2 * self.leaves, dtype=np.float64)  # node i has children 2i, 2i+1; leaves at [L, 2L)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, idx: np.ndarray) -> np.ndarray:
        return self.tree[self.leaves + np.asarray(idx)]

    def set(self, idx: np.ndarray, priorities: np.ndarray) -> None:
        nodes = self.leaves + np.atleast_1d(np.asarray(idx, dtype=np.int64))
        if nodes.size == 0:
            return
        self.tree[nodes] = priorities
        # Level by level up to the root. Every leaf is at the same depth, so the parents of a level are one level;
        # a parent listed twice is written twice with the same sum, which is cheaper than np.unique's sort at each
        # of the ~17 levels (0.3 of a CartPole DQN step's 2.7 ms).
        nodes = nodes // 2
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes //= 2

    def find(self, values: np.ndarray) -> np.ndarray:
        """values [B] in [0, total) -> [B] leaf indices i with prefix_sum(i) <= value < prefix_sum(i + 1)."""
        nodes = np.ones(len(values), dtype=np.int64)
        v = np.asarray(values, dtype=np.float64).copy()
        while nodes[0] < self.leaves:  # in place, v - 0.0 where it goes left: 0.7x the time of two np.where a level
            nodes *= 2  # the left children
            left_sum = self.tree[nodes]
            go_right = v >= left_sum
            v -= np.where(go_right, left_sum, 0.0)
            nodes += go_right
        return nodes - self.leaves

    def sample(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """[B] indices drawn with probability priority / total, stratified: one draw per equal slice of the total."""
        total = self.total
        edges = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        idx = self.find(np.minimum(edges, np.nextafter(total, 0)))
        # Float rounding can land on a zero-priority leaf at a boundary: move it to a real item.
        bad = self.get(idx) <= 0
        if bad.any():
            nz = np.flatnonzero(self.tree[self.leaves : self.leaves + self.capacity] > 0)
            idx[bad] = nz[rng.integers(0, len(nz), int(bad.sum()))]
        return idx


def rebuild_stacks(frames: Tensor, starts: Tensor, b: Tensor, t: Tensor, k: int) -> Tensor:
    """Frame stacks from single frames: frames [blocks, T + k, *frame] (per block the k - 1 frames before position 0,
    then the newest frame of every position), starts [blocks, T + 1] (latest episode start at or before a position,
    -1 if before the block); b, t [B] block and position -> [B, k, *frame], oldest first, an episode's first frame
    repeated before its start. All on one device."""
    idx = t.unsqueeze(1) + torch.arange(k, device=t.device)  # [B, k] frame t + i is stack slot i
    s = starts[b, t].long()  # [B]
    first = torch.where(s >= 0, s + k - 1, 0).unsqueeze(1)  # the episode's first frame, where it began here
    rows = b.unsqueeze(1) * frames.shape[1] + torch.maximum(idx, first)  # [B, k] into frames' first two dims
    return gather_rows(frames, rows.view(-1)).view(*rows.shape, *frames.shape[2:])


def gather_rows(x: Tensor, flat: Tensor) -> Tensor:
    """x [N0, N1, *rest] at flat positions flat [B] of its first two dims -> [B, *rest]: x[flat // N1, flat % N1]
    as one row copy (index_select), which on a CPU takes a seventh of the time of advanced indexing for a
    minibatch of Atari stacks."""
    return x.flatten(0, 1).index_select(0, flat)


def stacks_follow_frames(obs: Tensor, starts: Tensor) -> bool:
    """obs [M, T+1, k, *frame] frame stacks, starts [M, T+1] bool (an episode starts at this position, t > 0): whether
    rebuild_stacks gives them back from their newest frames and obs[:, 0]'s stack. It does exactly when every stack
    after position 0 is the previous one shifted by a frame, or, where an episode starts, its first frame repeated
    k times. Compared in place (two shifted views) instead of rebuilding, frames read as 64-bit words where their size
    allows: 1,024 Atari transitions in 4.5 ms instead of 41 ms for the rebuild (2-core machine). Host tensors, checked
    in numpy: host bookkeeping that host-sync counts (benchmarks/learner_loop.py) do not mistake for device reads."""
    x = obs.numpy()
    flat = x.reshape(*x.shape[:3], -1)  # [M, T+1, k, F]
    if flat.flags.c_contiguous and flat.shape[-1] * flat.itemsize % 8 == 0:
        flat = flat.view(np.int64)  # the same bytes, 8 at a time
    later = flat[:, 1:]  # [M, T, k, F']
    shifted = (later[:, :, :-1] == flat[:, :-1, 1:]).reshape(*later.shape[:2], -1).all(-1)  # [M, T]
    start = starts[:, 1:].numpy()
    if not shifted[~start].all():
        return False
    at_start = later[start]  # [S, k, F']
    return bool((at_start == at_start[:, -1:]).all())


class ReplaySample(NamedTuple):
    """A sampled batch of B transitions: host tensors, the observations on the buffer's device."""

    indices: Tensor  # [B] int64 flat indices (for update_priorities)
    obs: dict[str, Tensor]  # {key: [B, *shape]}
    actions: Tensor  # [B, *act_shape]
    returns: Tensor  # [B] n-step returns
    discounts: Tensor  # [B] gamma^m, 0 where the episode ended inside the window
    next_obs: dict[str, Tensor]  # {key: [B, *shape]} obs[t + m]
    weights: Tensor  # [B] importance weights (1 for uniform sampling)


class ReplayBuffer:
    """Fixed capacity in transitions (rounded up to whole blocks of T), preallocated once, overwritten in ring
    order. `prioritized`: proportional prioritization p = (|td| + eps)^alpha; otherwise uniform over the valid
    stored transitions (the same tree with priority 1, so masked steps are never drawn either way)."""

    def __init__(
        self,
        capacity: int,
        rollout: int,
        obs_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        prioritized: bool,
        alpha: float = 0.6,
        eps: float = 1e-6,
        seed: int | None = None,
        stacked: dict[str, int] | None = None,
        device: torch.device | str = "cpu",
    ):
        self.T = rollout
        self.device = torch.device(device)  # of the observation storage
        self.stacked = dict(stacked or {})  # obs key -> frames per stack (the first dim of its shape)
        self.num_blocks = max(1, math.ceil(capacity / rollout))
        self.capacity = self.num_blocks * rollout
        self.prioritized, self.alpha, self.eps = prioritized, alpha, eps
        nb, T = self.num_blocks, rollout
        # Observations are allocated, not zeroed: only written blocks are ever read (sampling draws valid steps of
        # filled blocks), so memory is committed as the buffer fills instead of all at once (4 GB and seconds of
        # zeroing for the atari_dqn preset's 500k transitions before the first SGD step).
        dev = self.device
        self.obs = {
            k: torch.empty((nb, T + 1, *shape), dtype=dt, device=dev)
            for k, (shape, dt) in obs_shapes.items()
            if k not in self.stacked
        }
        self.frames = {
            k: torch.empty((nb, T + self.stacked[k], *shape[1:]), dtype=dt, device=dev)
            for k, (shape, dt) in obs_shapes.items()
            if k in self.stacked
        }
        # latest episode start at or before each position of a block, -1 if the episode began before the block
        self.starts = torch.full((nb, T + 1), -1, dtype=torch.int16, device=dev)
        self.actions = torch.zeros((nb, T, *action_shape), dtype=action_dtype)
        self.returns = torch.zeros((nb, T), dtype=torch.float32)
        self.discounts = torch.zeros((nb, T), dtype=torch.float32)
        self.offsets = torch.zeros((nb, T), dtype=torch.int16)
        self.valid = torch.zeros((nb, T), dtype=torch.bool)
        self._stored: int | None = None  # len(self), counted again when next asked after `valid` changed
        self.tree = SumTree(self.capacity)
        self.max_priority = 1.0  # new transitions without an initial priority get the largest seen so far
        self.next_block = 0
        self.filled_blocks = 0
        self.added = 0  # transitions ever added (valid ones)
        self.rng = np.random.default_rng(seed)

    @staticmethod
    def obs_nbytes(
        capacity: int, rollout: int, obs_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]], stacked: dict[str, int]
    ) -> int:
        """Bytes of the observation storage of a buffer built with these arguments (what `device` would hold)."""
        nb = max(1, math.ceil(capacity / rollout))
        total = nb * (rollout + 1) * 2  # starts, int16
        for k, (shape, dt) in obs_shapes.items():
            rows = rollout + stacked[k] if k in stacked else rollout + 1
            per_row = math.prod(shape[1:] if k in stacked else shape)
            total += nb * rows * per_row * torch.empty((), dtype=dt).element_size()
        return total

    def __len__(self) -> int:
        """Valid transitions stored (what can be sampled). Counted in numpy: host bookkeeping, which host-sync counts
        (benchmarks/learner_loop.py) must not mistake for a read from the training device. Counted once per change,
        not per sample: summing a full 500k buffer's flags took 0.2 ms of CPU time a sample on the 2-core machine."""
        if self._stored is None:
            self._stored = int(np.count_nonzero(self.valid[: self.filled_blocks].numpy()))
        return self._stored

    def nbytes(self) -> int:
        tensors = [*self.obs.values(), *self.frames.values(), self.starts]
        tensors += [self.actions, self.returns, self.discounts, self.offsets, self.valid]
        return sum(t.numel() * t.element_size() for t in tensors) + self.tree.tree.nbytes

    def add(
        self,
        obs: dict[str, Tensor],
        actions: Tensor,
        targets: NStepTargets,
        valid: Tensor,
        priorities: Tensor | None = None,
        is_first: Tensor | None = None,
    ) -> Tensor:
        """Store M rollouts: obs {key: [M, T+1, *shape]}, actions [M, T, *act_shape], n-step targets [M, T],
        valid [M, T] bool (steps that may be sampled), priorities [M, T] initial |TD| (None: the max so far),
        is_first [M, T+1] (episode starts; needed with stacked keys). Returns the flat indices [M*T] written."""
        M = actions.shape[0]
        if M > self.num_blocks:
            raise ValueError(f"{M} rollouts do not fit a replay buffer of {self.num_blocks} blocks of {self.T} steps")
        blocks = (self.next_block + torch.arange(M)) % self.num_blocks  # [M]
        for k, v in obs.items():
            if k not in self.stacked:
                self._put(self.obs[k], v)
        if self.stacked:
            self._add_frames(obs, is_first)
        self._put(self.actions, actions)
        self._put(self.returns, targets.returns)
        self._put(self.discounts, targets.discounts)
        self._put(self.offsets, targets.offsets.to(torch.int16))
        self._put(self.valid, valid)
        self._stored = None
        self.next_block = (self.next_block + M) % self.num_blocks
        self.filled_blocks = min(self.num_blocks, self.filled_blocks + M)
        self.added += int(valid.numpy().sum())
        idx = (blocks.unsqueeze(1) * self.T + torch.arange(self.T)).reshape(-1)  # [M*T]
        if self.prioritized and priorities is not None:
            p = self._priority(priorities.reshape(-1).double().numpy())
            self.max_priority = max(self.max_priority, float(p.max()))
        else:
            p = np.full(len(idx), self.max_priority if self.prioritized else 1.0)
        self.tree.set(idx.numpy(), np.where(valid.reshape(-1).numpy(), p, 0.0))
        return idx

    def _put(self, dst: Tensor, src: Tensor) -> None:
        """src [M, ...] into the M blocks from next_block on, in ring order: at most two slice copies (an indexed
        write of an Atari rollout's frames took 7 ms for 7 MB on the 2-core machine), to whatever device dst is on."""
        first, M = self.next_block, src.shape[0]
        n = min(M, self.num_blocks - first)
        dst[first : first + n].copy_(src[:n])
        if n < M:
            dst[: M - n].copy_(src[n:])

    def _add_frames(self, obs: dict[str, Tensor], is_first: Tensor | None) -> None:
        if is_first is None:
            raise ValueError("a replay buffer with frame-stacked keys needs is_first")
        pos = torch.arange(self.T + 1)
        # is_first at position 0 is no evidence of a reset: an actor's first slot marks it (the core state starts
        # there) with its envs mid-episode after the decorrelation steps. Position 0 needs none: the block keeps
        # obs[0]'s whole stack, reset or not.
        starts = torch.where(is_first & (pos > 0), pos, -1).cummax(dim=1).values.to(torch.int16)  # [M, T+1]
        for k, k_frames in self.stacked.items():
            v = obs[k]  # [M, T+1, k, *frame]
            # checked on the host, before it is stored (wherever the storage is)
            if not stacks_follow_frames(v, starts >= pos):
                raise ValueError(
                    f"observation {k!r} is not a frame stack that repeats the first frame at an episode start: "
                    "it cannot be stored as single frames"
                )
            self._put(self.frames[k], torch.cat([v[:, 0, : k_frames - 1], v[:, :, -1]], dim=1))  # [M, T + k, *frame]
        self._put(self.starts, starts)

    def _stack(self, key: str, b: Tensor, t: Tensor) -> Tensor:
        """The stacks of `key` at blocks b [B], positions t [B] (on the storage's device) -> [B, k, *frame]."""
        return rebuild_stacks(self.frames[key], self.starts, b, t, self.stacked[key])

    def _obs_at(self, b: Tensor, t: Tensor) -> dict[str, Tensor]:
        flat = b * (self.T + 1) + t  # [B] into obs' [blocks, T+1]
        out = {k: gather_rows(v, flat) for k, v in self.obs.items()}
        out.update({k: self._stack(k, b, t) for k in self.frames})
        return out

    def _priority(self, td_abs: np.ndarray) -> np.ndarray:
        return (np.abs(td_abs) + self.eps) ** self.alpha

    def update_priorities(self, indices: Tensor, td_abs: Tensor) -> None:
        """After a learner step: indices [B] of a sample, their new |TD errors| [B]. No-op for uniform replay.
        Indices overwritten since they were sampled (a newer rollout in the block) are left alone."""
        if not self.prioritized:
            return
        idx = indices.numpy()
        still = self.tree.get(idx) > 0  # an overwritten-and-invalid slot keeps priority 0
        p = self._priority(td_abs.detach().double().cpu().numpy())
        self.max_priority = max(self.max_priority, float(p.max()))
        self.tree.set(idx[still], p[still])

    def sample(self, batch_size: int, beta: float = 1.0) -> ReplaySample:
        """batch_size transitions, proportional to priority (uniform: equal), with importance weights for beta."""
        idx = self.tree.sample(batch_size, self.rng)
        if self.prioritized:
            probs = torch.from_numpy(self.tree.get(idx) / self.tree.total)
            weights = importance_weights(probs, len(self), beta)
        else:
            weights = torch.ones(batch_size)
        return self.take(torch.from_numpy(idx), weights)

    def take(self, indices: Tensor, weights: Tensor | None = None) -> ReplaySample:
        """The transitions at flat `indices` [B] (sampled, or all of a fresh rollout for one-time replay)."""
        b, t = indices // self.T, indices % self.T
        nt = t + gather_rows(self.offsets, indices).long()
        where = torch.stack([b, t, nt])  # [3, B] host
        if self.device.type == "cuda":  # one small copy, queued without a wait: the gathers run on the device
            where = where.pin_memory().to(self.device, non_blocking=True)
        elif self.device.type != "cpu":
            where = where.to(self.device)
        return ReplaySample(
            indices=indices,
            obs=self._obs_at(where[0], where[1]),
            actions=gather_rows(self.actions, indices),
            returns=gather_rows(self.returns, indices),
            discounts=gather_rows(self.discounts, indices),
            next_obs=self._obs_at(where[0], where[2]),
            weights=torch.ones(len(indices)) if weights is None else weights,
        )

    def state_dict(self) -> dict:
        """Everything to continue replaying after a resume (--save_replay_buffer), the sampling RNG included."""
        return {
            "obs": self.obs,
            "frames": self.frames,
            "starts": self.starts,
            "actions": self.actions,
            "returns": self.returns,
            "discounts": self.discounts,
            "offsets": self.offsets,
            "valid": self.valid,
            "tree": torch.from_numpy(self.tree.tree),
            "max_priority": self.max_priority,
            "next_block": self.next_block,
            "filled_blocks": self.filled_blocks,
            "added": self.added,
            "rng": self.rng.bit_generator.state,  # plain ints and strings: loads with weights_only
        }

    @staticmethod
    def layout_of(state: dict) -> tuple[int, int, dict[str, tuple[tuple[int, ...], torch.dtype]]]:
        """(blocks, rollout, observation shapes) of a saved buffer: what to build it with. A frame-stacked key's
        frames [blocks, T + k, *frame] give back its stack shape (k, *frame)."""
        blocks, T = state["actions"].shape[:2]
        shapes = {k: (tuple(v.shape[2:]), v.dtype) for k, v in state["obs"].items()}
        shapes.update({k: ((v.shape[1] - T, *v.shape[2:]), v.dtype) for k, v in state["frames"].items()})
        return blocks, T, shapes

    def load_state_dict(self, state: dict) -> None:
        """Takes the saved tensors over (no copy: a saved buffer may be most of the machine's memory)."""
        if state["actions"].shape != self.actions.shape:
            raise ValueError(
                f"saved replay buffer holds {tuple(state['actions'].shape[:2])} blocks x steps, this one "
                f"{tuple(self.actions.shape[:2])}: capacity or --rollout changed"
            )
        mine = {**{f"obs/{k}": v for k, v in self.obs.items()}, **{f"frames/{k}": v for k, v in self.frames.items()}}
        saved = {**{f"obs/{k}": v for k, v in state["obs"].items()}}
        saved.update({f"frames/{k}": v for k, v in state["frames"].items()})
        for k in ("starts", "actions", "returns", "discounts", "offsets", "valid"):
            mine[k], saved[k] = getattr(self, k), state[k]
        for k, t in mine.items():
            if k not in saved or saved[k].shape != t.shape or saved[k].dtype != t.dtype:
                found = "missing" if k not in saved else f"{tuple(saved[k].shape)} {saved[k].dtype}"
                raise ValueError(f"saved replay buffer's {k} is {found}, expected {tuple(t.shape)} {t.dtype}")
        self.obs = {k: state["obs"][k].to(self.device) for k in self.obs}
        self.frames = {k: state["frames"][k].to(self.device) for k in self.frames}
        self.starts = state["starts"].to(self.device)
        for k in ("actions", "returns", "discounts", "offsets", "valid"):
            setattr(self, k, state[k].cpu())
        self.tree.tree[:] = state["tree"].cpu().numpy()
        if not self.prioritized:  # saved by a prioritized buffer: sample the valid transitions uniformly now
            flat = self.valid.reshape(-1).numpy()
            self.tree.set(np.arange(self.capacity), flat.astype(np.float64))
        self.max_priority = float(state["max_priority"])
        self.next_block, self.filled_blocks = int(state["next_block"]), int(state["filled_blocks"])
        self._stored = None
        self.added = int(state["added"])
        if "rng" in state:  # older checkpoints did not save it
            self.rng.bit_generator.state = state["rng"]


class TrajectoryReplay:
    """IMPALA-style replay for APPO (RLlib's replay_proportion / replay_buffer_num_slots): a ring of whole
    trajectories [T+1] as the learner's batches hold them (every key of the batch, "obs" a dict), preallocated from
    the first batch's shapes; uniform sampling. V-trace corrects the replayed trajectories' off-policyness."""

    def __init__(self, num_slots: int, seed: int | None = None):
        self.num_slots = num_slots
        self.store: dict | None = None  # like a batch, with num_slots rows
        self.next = 0
        self.filled = 0
        self.gen = torch.Generator()
        if seed is not None:
            self.gen.manual_seed(seed)

    def __len__(self) -> int:
        return self.filled

    def add(self, batch: dict) -> None:
        """batch: {key: [M, ...]} ("obs": {key: [M, ...]}); the newest num_slots trajectories are kept."""
        M = next(v for v in batch.values() if isinstance(v, Tensor)).shape[0]
        if self.store is None:
            self.store = _map(batch, lambda v: torch.zeros((self.num_slots, *v.shape[1:]), dtype=v.dtype))
        rows = (self.next + torch.arange(M)) % self.num_slots

        def write(dst: Tensor, src: Tensor) -> None:
            dst[rows] = src

        _zip(self.store, batch, write)
        self.next = int(rows[-1] + 1) % self.num_slots
        self.filled = min(self.num_slots, self.filled + M)

    def sample(self, k: int) -> dict:
        """k trajectories drawn uniformly (with replacement) from the stored ones, as a batch {key: [k, ...]}."""
        idx = torch.randint(0, self.filled, (k,), generator=self.gen)
        return _map(self.store, lambda v: v[idx])

    def state_dict(self) -> dict:
        """The stored trajectories, the ring position and the sampling generator (--save_replay_buffer)."""
        return {"store": self.store, "next": self.next, "filled": self.filled, "gen": self.gen.get_state()}

    @staticmethod
    def slots_of(state: dict) -> int:
        return next(v for v in _leaves(state["store"])).shape[0]

    def load_state_dict(self, state: dict) -> None:
        """Takes the saved trajectories over; they were stored from batches of this experiment (same env)."""
        if self.slots_of(state) != self.num_slots:
            raise ValueError(
                f"saved trajectory replay holds {self.slots_of(state)} trajectories, this one {self.num_slots}: "
                "--replay_buffer_num_slots changed"
            )
        self.store = _map(state["store"], lambda v: v.cpu())
        self.next, self.filled = int(state["next"]), int(state["filled"])
        self.gen.set_state(state["gen"].cpu())


def replayed_count(proportion: float, fresh: int, gen: torch.Generator | None = None) -> int:
    """How many replayed trajectories go with `fresh` new ones: proportion * fresh, the fraction drawn at random so
    that the mean is exact (RLlib's replay_proportion: replayed / new)."""
    x = proportion * fresh
    whole = math.floor(x)
    return whole + int(torch.rand((), generator=gen) < (x - whole))


def _map(d: dict, fn) -> dict:
    return {k: _map(v, fn) if isinstance(v, dict) else fn(v) for k, v in d.items()}


def _leaves(d: dict):
    for v in d.values():
        yield from _leaves(v) if isinstance(v, dict) else (v,)


def _zip(dst: dict, src: dict, fn) -> None:
    for k, v in dst.items():
        _zip(v, src[k], fn) if isinstance(v, dict) else fn(v, src[k])


def concat_batches(a: dict, b: dict) -> dict:
    """Two batches {key: [M, ...]} ("obs" nested) joined along the trajectory dimension."""
    return {k: concat_batches(v, b[k]) if isinstance(v, dict) else torch.cat([v, b[k]]) for k, v in a.items()}
