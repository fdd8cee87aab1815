"""Where a learner's batches come from (workers/batch_sources.py): one learner copies its slots itself; rank 0 of a
data-parallel group tells each other rank which slot columns are its share, and those copy them."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sample_factory.algo.data_parallel import DataParallel
from sample_factory.runtime.messages import RANK_DONE, LocalChannel, RankWork
from sample_factory.workers.batch_sources import LeaderBatches, LocalBatches, RankBatches, columns_in
from sample_factory.workers.pending_rollout import PendingRollout

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


class FakeBuffers:
    """TrajectoryBuffers.gather, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def gather(self, slots: list[int], columns: Any, keys: Any, pin_memory: bool = False) -> dict:
        cols = None if columns is None else [c.tolist() for c in columns]
        self.calls.append((slots, cols, keys, pin_memory))
        return {"slots": slots}


def group(rank: int, world: int) -> tuple[DataParallel, list[str]]:
    """A rank's DataParallel that joined no process group: its barrier is recorded."""
    dp = DataParallel(rank, world, timeout_sec=5.0)
    events: list[str] = []
    dp.barrier = lambda: events.append("barrier")  # type: ignore[method-assign]
    return dp, events


TAKEN = [PendingRollout(s, 0, 0, c) for s, c in zip(SLOTS, COLUMNS, strict=True)]


def test_one_learner_copies_whole_slots_or_its_policys_columns():
    buffers = FakeBuffers()
    assert LocalBatches(buffers, {"obs"}, True, whole_slots=True).take(TAKEN, 3, 100) == {"slots": SLOTS}
    LocalBatches(buffers, {"obs"}, False, whole_slots=False).take(TAKEN, 3, 100)
    assert buffers.calls == [(SLOTS, None, {"obs"}, True), (SLOTS, [c.tolist() for c in COLUMNS], {"obs"}, False)]
    assert not LocalBatches(buffers, {"obs"}, False, whole_slots=True).too_few_rows(TAKEN[:1])


@pytest.mark.parametrize("whole", [False, True])
def test_rank0_sends_each_rank_its_share_and_copies_its_own(whole: bool):
    """3 ranks, 9 trajectories: rows [0, 3), [3, 6), [6, 9); with `whole` (DQN) rank 0 copies all of them."""
    dp, events = group(0, 3)
    buffers, inboxes = FakeBuffers(), [LocalChannel(), LocalChannel()]
    batch = LeaderBatches(dp, buffers, {"obs"}, False, inboxes, whole).take(TAKEN, 7, 640)
    assert dp.rows == 9 and events == ["barrier"]  # every rank has copied when it returns
    works = [RankWork._make(inbox.get_many()[0]) for inbox in inboxes]
    assert all((w.rows, w.version, w.env_frames) == (9, 7, 640) for w in works)
    if whole:
        assert all(w.slots == [] for w in works) and batch == {"slots": SLOTS}
        assert buffers.calls[0][1] == [c.tolist() for c in COLUMNS]
    else:
        assert [(w.slots, w.columns) for w in works] == [([7, 9], [[0, 3], [1]]), ([9], [[2, 3, 4]])]
        assert buffers.calls == [([5], [[0, 1, 2]], {"obs"}, False)] and batch == {"slots": [5]}


def test_rank0_stops_the_other_ranks():
    dp, _ = group(0, 3)
    inboxes = [LocalChannel(), LocalChannel()]
    LeaderBatches(dp, FakeBuffers(), {"obs"}, False, inboxes, False).close()
    assert [inbox.get_many() for inbox in inboxes] == [[(RANK_DONE,)], [(RANK_DONE,)]]


def test_another_rank_copies_the_share_rank0_named():
    dp, events = group(2, 3)
    buffers = FakeBuffers()
    shares = RankBatches(dp, buffers, {"obs"}, True)
    batch = shares.take(RankWork._make(RankWork.wire([9], [[2, 3, 4]], 9, 7, 640)))
    assert batch == {"slots": [9]} and buffers.calls == [([9], [[2, 3, 4]], {"obs"}, True)]
    assert (dp.rows, dp.lo, dp.hi) == (9, 6, 9) and events == ["barrier"]
    assert shares.take(RankWork._make(RankWork.wire([], [], 2, 7, 640))) is None  # no share: only the barrier
    assert events == ["barrier", "barrier"]


def test_an_iteration_with_fewer_trajectories_than_ranks_is_dropped_unless_rank0_takes_all():
    taken = [PendingRollout(3, 0, 0, torch.tensor([2]))]
    dp, _ = group(0, 2)
    leader = LeaderBatches(dp, FakeBuffers(), {"obs"}, False, [LocalChannel()], whole_batch=False)
    assert leader.too_few_rows(taken)
    assert not leader.too_few_rows([*taken, PendingRollout(4, 0, 0, torch.tensor([1]))])
    whole = LeaderBatches(dp, FakeBuffers(), {"obs"}, False, [LocalChannel()], whole_batch=True)  # DQN's replay
    assert not whole.too_few_rows(taken)
