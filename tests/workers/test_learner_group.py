"""Rank 0's share-out of an iteration (workers/learner_group.py): which slot columns each rank copies."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from sample_factory.algo.data_parallel import DataParallel
from sample_factory.workers.learner import PendingRollout
from sample_factory.workers.learner_group import columns_in, too_few_rows

SLOTS = [5, 7, 9]
COLUMNS = [torch.tensor([0, 1, 2]), torch.tensor([0, 3]), torch.tensor([1, 2, 3, 4])]  # 9 trajectories


def test_shares_are_contiguous_rows_in_one_learners_order():
    rows = [(s, int(c)) for s, cols in zip(SLOTS, COLUMNS, strict=True) for c in cols]  # one learner's row order
    for world in (1, 2, 3, 4):
        got = []
        for rank in range(world):
            lo, hi = DataParallel.share(len(rows), world, rank)
            slots, cols = columns_in(SLOTS, COLUMNS, lo, hi)
            share = [(s, int(c)) for s, cs in zip(slots, cols, strict=True) for c in cs]
            assert share == rows[lo:hi] and all(len(c) > 0 for c in cols)
            got += share
        assert got == rows
    slots, cols = columns_in(SLOTS, COLUMNS, 0, 4)  # rank 0 of 2: a whole slot and the first column of the next
    assert slots == [5, 7] and [c.tolist() for c in cols] == [[0, 1, 2], [0]]


def test_an_iteration_with_fewer_trajectories_than_ranks_is_dropped_unless_rank0_takes_all():
    taken = [PendingRollout(3, 0, 0, torch.tensor([2]))]
    learner = SimpleNamespace(dp=SimpleNamespace(world=2), algo=SimpleNamespace())
    assert too_few_rows(learner, taken)
    assert not too_few_rows(learner, [*taken, PendingRollout(4, 0, 0, torch.tensor([1]))])
    learner.algo.whole_batch_on_rank0 = True  # DQN: the batch goes to rank 0's replay whole
    assert not too_few_rows(learner, taken)
