"""Where a learner's training batch comes from: each takes only what it uses (the shared buffers, the keys to copy,
and for a data-parallel group its collectives and the other ranks' inboxes).

- `LocalBatches`: one learner trains the policy and copies an iteration's slot columns out of shared memory itself.
- `LeaderBatches`: rank 0 of a data-parallel group (--learners_per_policy > 1). It alone takes rollouts from the
  actors and decides each iteration's slots; it tells every other rank which trajectories (slot columns) are its
  share, copies its own, and returns the slots once all have copied.
- `RankBatches`: ranks 1.. of a group (workers/learner_rank.py): copy the share that rank 0's `RankWork` names.

Shares: an iteration's M trajectories in the order one learner would copy them (slot by slot, column order) are
split in contiguous blocks, rank r taking rows [r * M // N, (r + 1) * M // N) (algo/data_parallel.py). An algorithm
whose batch goes to rank 0 whole (DQN: its replay buffer lives there) sets `whole_batch_on_rank0`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

from sample_factory.runtime.messages import Channel, RankDone, RankWork
from sample_factory.runtime.shared_buffers import TrajectoryBuffers
from sample_factory.workers.pending_rollout import PendingRollout

if TYPE_CHECKING:  # torch.distributed is imported by data-parallel learners only
    from sample_factory.algo.data_parallel import DataParallel


def columns_in(slots: list[int], columns: list[torch.Tensor], lo: int, hi: int) -> tuple[list[int], list[torch.Tensor]]:
    """The slots and per-slot columns of rows [lo, hi) of the trajectories `columns` (one index tensor per slot)."""
    out_slots, out_cols, start = [], [], 0
    for slot, cols in zip(slots, columns, strict=True):
        a, b = max(lo - start, 0), min(hi - start, len(cols))
        if a < b:
            out_slots.append(slot)
            out_cols.append(cols[a:b])
        start += len(cols)
    return out_slots, out_cols


class BatchSource(Protocol):
    """What the learner (one, or rank 0 of a group) asks of its batch source."""

    def too_few_rows(self, taken: list[PendingRollout]) -> bool:
        """Whether the iteration `taken` is too small to train on (it is then dropped)."""

    def take(self, taken: list[PendingRollout], version: int, env_frames: int) -> dict[str, Any] | None:
        """The batch of the iteration `taken`, trained from `version` at `env_frames` (None: nothing for this rank)."""

    def close(self) -> None:
        """The learner stops."""


class LocalBatches:
    """One learner: the iteration's slots copied whole (`whole_slots`: one policy acts in every column), or the
    columns this policy acted in."""

    def __init__(self, buffers: TrajectoryBuffers, keys: set[str], pin_memory: bool, whole_slots: bool) -> None:
        self.buffers, self.keys, self.pin_memory, self.whole_slots = buffers, keys, pin_memory, whole_slots

    def too_few_rows(self, taken: list[PendingRollout]) -> bool:
        return False  # any iteration will do for one learner

    def take(self, taken: list[PendingRollout], version: int, env_frames: int) -> dict[str, Any] | None:
        columns = None if self.whole_slots else [p.cols for p in taken]
        return self.buffers.gather([p.slot for p in taken], columns, self.keys, self.pin_memory)

    def close(self) -> None:
        pass


class LeaderBatches:
    """Rank 0 of a data-parallel group. `ranks`: the inboxes of ranks 1.. (in rank order); `whole_batch`: the
    algorithm's batch goes to rank 0 whole (`whole_batch_on_rank0`)."""

    def __init__(
        self,
        dp: DataParallel,
        buffers: TrajectoryBuffers,
        keys: set[str],
        pin_memory: bool,
        ranks: list[Channel],
        whole_batch: bool,
    ) -> None:
        self.dp, self.buffers, self.keys, self.pin_memory = dp, buffers, keys, pin_memory
        self.ranks, self.whole_batch = ranks, whole_batch

    def too_few_rows(self, taken: list[PendingRollout]) -> bool:
        """Fewer trajectories than ranks, where each rank needs some (APPO): possible only where several policies
        share slots and a learner trains on what it holds (Learner._take_iteration); such an iteration is dropped."""
        return sum(len(p.cols) for p in taken) < self.dp.world and not self.whole_batch

    def take(self, taken: list[PendingRollout], version: int, env_frames: int) -> dict[str, Any] | None:
        """Send every other rank its share of the iteration `taken` (trained from `version` at `env_frames`:
        learning-rate schedules), copy rank 0's own out of shared memory, and wait (a monitored barrier) until every
        rank has copied, so that the slots can go back to the actors."""
        dp = self.dp
        slots = [p.slot for p in taken]
        columns = [p.cols for p in taken]
        rows = sum(len(c) for c in columns)
        dp.set_rows(rows)
        for r, inbox in enumerate(self.ranks, start=1):
            lo, hi = (0, 0) if self.whole_batch else dp.share(rows, dp.world, r)
            share = columns_in(slots, columns, lo, hi)
            work = RankWork.wire(share[0], [c.tolist() for c in share[1]], rows, version, env_frames)
            inbox.put(work, timeout=dp.timeout.total_seconds())
        mine = columns_in(slots, columns, *((0, rows) if self.whole_batch else dp.share(rows, dp.world, 0)))
        batch = None
        if mine[0]:
            batch = self.buffers.gather(*mine, self.keys, self.pin_memory)
        dp.barrier()
        return batch

    def close(self) -> None:
        """Rank 0 stops: the other ranks stop too (they ignore the runner's STOP while rank 0 may still need them)."""
        for inbox in self.ranks:
            try:
                inbox.put(RankDone.wire(), timeout=1.0)
            except Exception:
                pass  # a dead rank's full inbox: the supervisor ends it


class RankBatches:
    """Ranks 1.. of a data-parallel group: the share of each iteration that rank 0's `RankWork` names."""

    def __init__(self, dp: DataParallel, buffers: TrajectoryBuffers, keys: set[str], pin_memory: bool) -> None:
        self.dp, self.buffers, self.keys, self.pin_memory = dp, buffers, keys, pin_memory

    def take(self, work: RankWork) -> dict[str, Any] | None:
        """This rank's share (None where it has none), copied; returns once every rank has copied its own."""
        self.dp.set_rows(work.rows)
        batch = None
        if work.slots:
            columns = [torch.tensor(c, dtype=torch.long) for c in work.columns]
            batch = self.buffers.gather(work.slots, columns, self.keys, self.pin_memory)
        self.dp.barrier()
        return batch
