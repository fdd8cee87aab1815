"""Rank 0's side of a policy's data-parallel learner group (--learners_per_policy > 1; the other ranks are
workers/learner_rank.py): it alone takes rollouts from the actors, decides each iteration's slots, tells every other
rank which trajectories (slot columns) are its share, copies its own, and returns the slots once all have copied.

Shares: an iteration's M trajectories in the order one learner would copy them (slot by slot, column order) are
split in contiguous blocks, rank r taking rows [r * M // N, (r + 1) * M // N) (algo/data_parallel.py). An algorithm
whose batch goes to rank 0 whole (DQN: its replay buffer lives there) sets `whole_batch_on_rank0`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from sample_factory.runtime.messages import RankDone, RankWork

if TYPE_CHECKING:
    from sample_factory.workers.learner import Learner, PendingRollout


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


def too_few_rows(learner: Learner, taken: list[PendingRollout]) -> bool:
    """Fewer trajectories than ranks, where each rank needs some (APPO): possible only where several policies share
    slots and a learner trains on what it holds (Learner._take_iteration); such an iteration is dropped."""
    rows = sum(len(p.cols) for p in taken)
    return rows < learner.dp.world and not getattr(learner.algo, "whole_batch_on_rank0", False)


def share_out(learner: Learner, taken: list[PendingRollout], env_steps: int) -> dict[str, Any] | None:
    """Rank 0: send every other rank its share of the iteration `taken` (trained at `env_steps`: learning-rate
    schedules), copy its own out of shared memory, and wait (a monitored barrier) until every rank has copied, so
    that the slots can go back to the actors."""
    dp, cfg = learner.dp, learner.cfg
    slots = [p.slot for p in taken]
    columns = [p.cols for p in taken]
    rows = sum(len(c) for c in columns)
    dp.set_rows(rows)
    whole = getattr(learner.algo, "whole_batch_on_rank0", False)
    mine: tuple[list[int], list[torch.Tensor]] = ([], [])
    for r in range(dp.world):
        lo, hi = ((0, rows) if r == 0 else (0, 0)) if whole else dp.share(rows, dp.world, r)
        share = columns_in(slots, columns, lo, hi)
        if r == 0:
            mine = share
        else:
            work = RankWork.wire(share[0], [c.tolist() for c in share[1]], rows, learner.version, env_steps)
            learner.channels.learner_ranks[learner.policy_id, r].put(work, timeout=cfg.collective_timeout_sec)
    batch = None
    if mine[0]:
        batch = learner.buffers.gather(*mine, learner.batch_keys, learner.device.type == "cuda")
    dp.barrier()
    return batch


def release_ranks(learner: Learner) -> None:
    """Rank 0 stops: the other ranks stop too (they ignore the runner's STOP while rank 0 may still need them)."""
    for r in range(1, learner.cfg.learners_per_policy):
        try:
            learner.channels.learner_ranks[learner.policy_id, r].put(RankDone.wire(), timeout=1.0)
        except Exception:
            pass  # a dead rank's full inbox: the supervisor ends it
