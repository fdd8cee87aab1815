"""One learner's view of the learners of its policy (algo/ranks.py): the data-parallel interface with identities and
plain local statistics, so the algorithms have one training path; DataParallel (algo/data_parallel.py) offers the
same members."""

from __future__ import annotations

import torch

from sample_factory.algo.data_parallel import DataParallel, GroupMinibatch
from sample_factory.algo.losses import normalize_advantages
from sample_factory.algo.ranks import MinibatchShare, Ranks, SingleRank


def _members(protocol: type) -> set[str]:
    return {n for n in vars(protocol) if not n.startswith("_")} | set(getattr(protocol, "__annotations__", {}))


def test_one_learner_and_a_group_rank_offer_every_member_of_the_interface():
    cpu, valid = torch.device("cpu"), torch.ones(4, 2, dtype=torch.bool)
    rank = DataParallel(0, 2, timeout_sec=5.0)  # joins no process group: nothing below runs a collective
    rank.set_rows(4)
    one = SingleRank()
    for protocol, instances in (
        (Ranks, (one, rank)),
        (
            MinibatchShare,
            (one.minibatch(torch.arange(2), valid, False, cpu), rank.minibatch(torch.arange(2), valid, False, cpu)),
        ),
    ):
        for instance in instances:
            missing = sorted(m for m in _members(protocol) if not hasattr(instance, m))
            assert not missing, f"{type(instance).__name__} lacks {missing}"
    assert isinstance(rank.minibatch(torch.arange(2), valid, True, cpu), GroupMinibatch)  # a group always masks


def test_collectives_of_one_learner_are_identities():
    one, t = SingleRank(), torch.tensor([1.0, 2.0])
    assert (one.rank, one.world, one.global_rows(7), one.my_rows(7)) == (0, 1, 7, (0, 7))
    assert one.broadcast_(t) is t and one.mean(t) is t and one.place_rows(t, 2) is t
    assert one.agree(True) and not one.agree(False) and one.broadcast_object(t) is t
    assert one.sum_counts({"samples": 3}) == {"samples": 3}
    minibatch = {"obs": {"obs": torch.arange(4)}, "actions": torch.arange(4)}
    assert one.rows_of(minibatch, 4) is minibatch
    second = DataParallel(1, 2, timeout_sec=5.0).rows_of(minibatch, 4)  # rank 1 of 2: rows [2, 4)
    assert second["obs"]["obs"].tolist() == second["actions"].tolist() == [2, 3]
    grads = [torch.ones(2)]
    assert one.reduce_grads(grads, t.sum(), extra=t) is not None and grads[0].tolist() == [1.0, 1.0]
    assert one.share_of_mean(t, 2).item() == 1.5
    assert sorted(one.permutation(5, torch.device("cpu")).tolist()) == [0, 1, 2, 3, 4]


def test_a_minibatch_of_one_learner_takes_plain_masked_means():
    valid = torch.tensor([[True, False], [True, True], [False, False]])  # [M=3, T=2]
    mb = torch.tensor([2, 0])
    every = SingleRank().minibatch(mb, valid, all_valid=True, device=torch.device("cpu"))
    assert every.mask is None and every.has_data() is None and every.rows is mb
    some = SingleRank().minibatch(mb, valid, all_valid=False, device=torch.device("cpu"))
    assert some.mask.tolist() == [False, False, True, False] and bool(some.has_data())
    none = SingleRank().minibatch(torch.tensor([2]), valid, all_valid=False, device=torch.device("cpu"))
    assert not bool(none.has_data())  # nothing to learn from: the step is skipped on the device
    adv = torch.tensor([1.0, 2.0, 3.0, 5.0])
    some.merge(adv, adv.view(2, 2))
    assert torch.equal(some.normalized_advantages(adv), normalize_advantages(adv, some.mask))
    loss = torch.tensor(0.25)
    assert some.share(loss) is loss
