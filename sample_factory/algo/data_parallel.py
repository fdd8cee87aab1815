"""One rank of a policy's data-parallel learner group (--learners_per_policy > 1): the collectives an algorithm
needs so that N ranks, each training on its share of a batch, make exactly the update one learner makes on the
whole batch (docs/scale-out.md, "One machine, many GPUs"; docs/architecture.md, "Data-parallel learners").

- Shares: an iteration's M trajectories (rows) are split in contiguous blocks, rank r holding rows
  [r * M // N, (r + 1) * M // N). Trajectories are never split: V-trace, GAE and RNN sequences stay per rank.
- Minibatches: every rank draws the same permutation of the M global rows (one CPU generator state, shared at
  start and restored from the checkpoint) and trains on the rows of each minibatch it holds, so minibatches are
  those of one learner on the whole batch.
- Means: a loss that is a mean over the minibatch's valid samples is computed per rank as a sum over its own samples
  divided by the global count; gradients are then summed over the ranks (one all-reduce per SGD step that also sums
  the loss), so clipping sees the global gradient norm and the NaN/inf guard decides the same on every rank.
- Statistics that need the whole minibatch (advantage normalization, the returns and observation normalizers) are
  merged from per-rank sums: count and sum first, then the sum of squares about the global mean (two passes, as one
  learner computes them).
- Stop requests (between SGD steps) are rank 0's, broadcast, so all ranks leave an iteration at the same step.

Device tensors travel on the group's backend (NCCL or gloo); CPU tensors (stop flags, RNG state, DQN's sampled
minibatches) on a gloo group. Every operation is bounded by --collective_timeout_sec."""

from __future__ import annotations

import datetime
import os
import pickle
import socket
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from sample_factory.algo.transfer import host_read


class GroupMinibatch:
    """A data-parallel rank's part of one APPO minibatch (`Ranks.minibatch`). A rank holding none of its rows
    computes on one of its rows with every sample masked out: the ranks' collectives must match one for one."""

    def __init__(self, dp: DataParallel, mb: Tensor, valid: Tensor, device: torch.device) -> None:
        self.dp = dp
        local = dp.local_rows(mb)
        empty = local.numel() == 0
        local = torch.zeros(1, dtype=torch.long) if empty else local
        self.rows = local.to(device, non_blocking=True)  # [b]
        self.mask = (valid[self.rows] & (not empty)).reshape(-1)  # [b*T]
        self.n = self.mean = self.var = torch.zeros(())  # set by merge

    def merge(self, adv: Tensor, targets: Tensor) -> None:
        # count, means and variances of the global minibatch [2]: advantages, targets (one pair of all-reduces)
        self.n, self.mean, self.var = self.dp.moments(torch.stack([adv, targets.reshape(-1)], dim=1), self.mask)

    def has_data(self) -> Tensor:
        return self.n > 0

    def normalized_advantages(self, adv: Tensor) -> Tensor:
        return ((adv.double() - self.mean[0]) / (self.var[0].sqrt() + 1e-7)).to(adv.dtype)

    def update_returns_normalizer(self, normalizer: Any, targets: Tensor) -> None:
        normalizer.update_moments(self.n, self.mean[1], self.var[1])

    def share(self, loss: Tensor) -> Tensor:
        n_local = self.mask.sum(dtype=torch.float32)
        return loss * (n_local / self.n.clamp(min=1.0)).to(loss.dtype)


class DataParallel:
    """A rank's view of its group (`algo/ranks.py::Ranks`). `group`: the process group of device tensors (None: the
    default one); `cpu_group`: a gloo group for CPU tensors (None: the default one, when that is gloo)."""

    def __init__(
        self,
        rank: int,
        world: int,
        timeout_sec: float,
        group: Any = None,
        cpu_group: Any = None,
        device: torch.device | None = None,
    ) -> None:
        self.rank, self.world = rank, world
        self.device = device or torch.device("cpu")  # the training device: where host counts are summed
        self.timeout = datetime.timedelta(seconds=timeout_sec)
        self.group, self.cpu_group = group, cpu_group
        self.rows = 0  # the current iteration's global number of trajectories
        self.lo = self.hi = 0  # this rank's rows of it

    @staticmethod
    def share(rows: int, world: int, rank: int) -> tuple[int, int]:
        """The rows [lo, hi) of `rows` global rows that `rank` of `world` holds."""
        return rows * rank // world, rows * (rank + 1) // world

    def set_rows(self, rows: int) -> None:
        self.rows = rows
        self.lo, self.hi = self.share(rows, self.world, self.rank)

    def local_rows(self, mb: Tensor) -> Tensor:
        """Global row indices (CPU) -> the indices into this rank's rows of those it holds (possibly none)."""
        return mb[(mb >= self.lo) & (mb < self.hi)] - self.lo

    def global_rows(self, local: int) -> int:
        return self.rows  # set by the batch source before the iteration (set_rows)

    def my_rows(self, rows: int) -> tuple[int, int]:
        return self.share(rows, self.world, self.rank)

    def rows_of(self, batch: dict[str, Any], rows: int) -> dict[str, Any]:
        lo, hi = self.my_rows(rows)
        return {k: {n: t[lo:hi] for n, t in v.items()} if isinstance(v, dict) else v[lo:hi] for k, v in batch.items()}

    def permutation(self, rows: int, device: torch.device) -> Tensor:
        """Drawn on the CPU, where every rank has the same generator state, and rank 0's broadcast: the ranks
        agree even if their random states ever differed."""
        return self.broadcast_(torch.randperm(rows, device="cpu"), cpu=True)

    def minibatch(self, mb: Tensor, valid: Tensor, all_valid: bool, device: torch.device) -> GroupMinibatch:
        return GroupMinibatch(self, mb, valid, device)  # masked means always: the count is the global one

    def mean(self, t: Tensor) -> Tensor:
        return self.all_reduce_(t.detach().clone().reshape(-1)).view(t.shape) / self.world

    def sum_counts(self, counts: dict[str, float]) -> dict[str, float]:
        """One read-back per iteration (a group's, not one learner's)."""
        t = torch.tensor([float(v) for v in counts.values()], dtype=torch.float64, device=self.device)
        return dict(zip(counts, (int(c) for c in host_read(self.all_reduce_(t))), strict=True))

    def share_of_mean(self, x: Tensor, count: int) -> Tensor:
        return x.sum() / count

    def place_rows(self, x: Tensor, rows: int) -> Tensor:
        whole = torch.zeros(rows, dtype=x.dtype, device=x.device)
        lo, hi = self.my_rows(rows)
        whole[lo:hi] = x
        return whole

    def update_normalizers(self, model: Any, obs: dict[str, Tensor], mask: Tensor) -> None:
        for k, norm in model.obs_normalizers.items():
            n, mean, var = self.moments(obs[k].reshape(len(mask), -1), mask)
            norm.update_moments(n, mean.view(norm.mean.shape), var.view(norm.mean.shape))

    def leave(self) -> None:
        leave_group()

    # ---- collectives --------------------------------------------------------------------------------------------

    def all_reduce_(self, t: Tensor) -> Tensor:
        """Sum over the ranks, in place."""
        dist.all_reduce(t, group=self.group)
        return t

    def broadcast_(self, t: Tensor, cpu: bool = False) -> Tensor:
        """Rank 0's values into `t` on every rank, in place (`cpu`: a CPU tensor on the gloo group)."""
        dist.broadcast(t, 0, group=self.cpu_group if cpu else self.group)
        return t

    def agree(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank (the others' are ignored)."""
        return bool(self.broadcast_(torch.tensor([int(flag)], dtype=torch.int32), cpu=True)[0])

    def broadcast_object(self, obj: Any = None) -> Any:
        """Rank 0's picklable `obj` on every rank (CPU tensors inside it go as bytes)."""
        if self.rank == 0:
            data = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
            size = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(1, dtype=torch.int64)
        self.broadcast_(size, cpu=True)
        if self.rank != 0:
            data = torch.empty(int(size[0]), dtype=torch.uint8)
        self.broadcast_(data, cpu=True)
        return obj if self.rank == 0 else pickle.loads(data.numpy().tobytes())

    def barrier(self) -> None:
        """Every rank got here; a rank missing after --collective_timeout_sec is named in the error (gloo's
        monitored barrier)."""
        dist.monitored_barrier(group=self.cpu_group, timeout=self.timeout)

    def reduce_grads(self, grads: list[Tensor], loss: Tensor, extra: Tensor | None = None) -> Tensor:
        """Sum `grads` (in place), the loss and `extra` (in place) over the ranks in one all-reduce. Returns the
        summed loss."""
        parts = [g.reshape(-1) for g in grads] + [loss.detach().reshape(1).to(torch.float32)]
        if extra is not None:
            parts.append(extra.reshape(-1).to(torch.float32))
        flat = self.all_reduce_(torch.cat(parts))
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        total = flat[offset]
        if extra is not None:
            extra.copy_(flat[offset + 1 :].view_as(extra))
        return total

    def moments(self, x: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Count, mean and (biased) variance over the ranks of x [N, *shape] weighted by w [N] (0/1), in float64:
        (n scalar, mean [*shape], var [*shape]), the same on every rank."""
        x = x.double()
        w = w.double().reshape(-1, *([1] * (x.dim() - 1)))
        n_sum = torch.cat([w.sum().view(1), (x * w).sum(dim=0).reshape(-1)])
        self.all_reduce_(n_sum)
        n = n_sum[0]
        mean = (n_sum[1:] / n.clamp(min=1.0)).view(x.shape[1:])
        sq = self.all_reduce_(((x - mean) ** 2 * w).sum(dim=0))
        return n, mean, sq / n.clamp(min=1.0)

    def sync_start(self, model: torch.nn.Module) -> None:
        """Rank 0's weights, normalizer statistics and CPU random state on every rank: the ranks start identical
        (and draw the same minibatch permutations)."""
        with torch.no_grad():
            for t in [*model.parameters(), *model.buffers()]:
                self.broadcast_(t.data)
        state = self.broadcast_(torch.get_rng_state(), cpu=True)
        torch.set_rng_state(state)


def loopback_interface() -> str:
    """The name of this machine's loopback interface (the one holding 127.0.0.1; "lo" on Linux)."""
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == "127.0.0.1" for a in addrs):
            return name
    return "lo"


def init_group(
    rank: int, world: int, store: str, backend: str, timeout_sec: float, device: torch.device | None = None
) -> DataParallel:
    """Join the group of a policy's learner ranks. The rendezvous is a file store at `store`, in the runner's
    private temp folder (mode 0700): no port is opened for it, and no other user can join or feed the group what
    ranks >= 1 unpickle. The ranks' own connections (gloo's pairs, NCCL's bootstrap) go over the loopback
    interface only (a single-machine group), unless GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME say otherwise.
    `device`: this rank's training device (NCCL binds the rank to it)."""
    timeout = datetime.timedelta(seconds=timeout_sec)
    loopback = loopback_interface()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
    os.environ.setdefault("NCCL_SOCKET_IFNAME", loopback)
    if backend == "nccl" and device is not None:
        torch.cuda.set_device(device)
    file_store = dist.FileStore(store, world)
    dist.init_process_group(backend, store=file_store, rank=rank, world_size=world, timeout=timeout)
    cpu_group = None if backend == "gloo" else dist.new_group(backend="gloo", timeout=timeout)
    return DataParallel(rank, world, timeout_sec, cpu_group=cpu_group, device=device)


def leave_group() -> None:
    """Tear the process group down (its sockets), if this process joined one."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
