"""The learners that train one policy, as an algorithm sees them: `Ranks` is what it asks of them, so that one training
path serves one learner and a data-parallel group (--learners_per_policy > 1) alike. `SingleRank` is one learner,
where every operation is the identity or the plain local computation; `algo/data_parallel.py::DataParallel` is one
rank of a group, where the same operations are collectives (docs/architecture.md, "Data-parallel learners").

This module imports no torch.distributed: a single learner never loads it."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor

from sample_factory.algo.losses import normalize_advantages


class MinibatchShare(Protocol):
    """This rank's part of one APPO minibatch of trajectories (M rows of the iteration's batch, T steps each)."""

    @property
    def rows(self) -> Tensor:
        """[b] indices into this rank's rows of the batch, on the training device."""

    @property
    def mask(self) -> Tensor | None:
        """[b*T] bool: the samples that count (None: every sample)."""

    def merge(self, adv: Tensor, targets: Tensor) -> None:
        """Called once with the minibatch's advantages and value targets [b*T] before the methods below: a group
        merges their count, mean and variance over the ranks here (one identity for one learner)."""

    def has_data(self) -> Tensor | None:
        """Whether the whole minibatch has a sample to learn from (a bool scalar on the device; None: it has)."""

    def normalized_advantages(self, adv: Tensor) -> Tensor:
        """adv [b*T] shifted and scaled to zero mean and unit std over the whole minibatch's valid samples."""

    def update_returns_normalizer(self, normalizer: Any, targets: Tensor) -> None:
        """Merge the whole minibatch's valid value targets (this rank's: targets [b, T]) into `normalizer`."""

    def share(self, loss: Tensor) -> Tensor:
        """`loss`, a mean over this rank's valid samples, as this rank's share of the mean over the whole minibatch."""


class Ranks(Protocol):
    """What an algorithm asks of the learners of its policy."""

    rank: int  # 0: the one that holds the replay buffer, reports and writes checkpoints
    world: int  # how many learners train the policy

    def global_rows(self, local: int) -> int:
        """The number of rows (trajectories) of the iteration's whole batch, of which this rank holds `local`."""

    def my_rows(self, rows: int) -> tuple[int, int]:
        """The rows [lo, hi) of `rows` that this rank trains on."""

    def rows_of(self, batch: dict[str, Any], rows: int) -> dict[str, Any]:
        """This rank's rows (`my_rows`) of each tensor, or dict of tensors, of `batch`, whose rows are the `rows` of
        a whole minibatch (for one learner `batch` itself)."""

    def permutation(self, rows: int, device: torch.device) -> Tensor:
        """A random order of `rows` rows [rows], the same on every rank."""

    def minibatch(self, mb: Tensor, valid: Tensor, all_valid: bool, device: torch.device) -> MinibatchShare:
        """This rank's part of minibatch `mb` (global row indices): valid [M, T] is its rows' loss mask, all_valid
        whether every sample of them counts."""

    def agree(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank."""

    def broadcast_(self, t: Tensor, cpu: bool = False) -> Tensor:
        """Rank 0's values in `t`, in place (`cpu`: a CPU tensor)."""

    def broadcast_object(self, obj: Any = None) -> Any:
        """Rank 0's picklable `obj`."""

    def mean(self, t: Tensor) -> Tensor:
        """The ranks' mean of `t` (for one learner `t` itself)."""

    def sum_counts(self, counts: dict[str, float]) -> dict[str, float]:
        """Host counts summed over the ranks (for one learner `counts` itself, with no read from a device)."""

    def share_of_mean(self, x: Tensor, count: int) -> Tensor:
        """This rank's share of the mean of a minibatch of `count` samples, of which it holds x [b]."""

    def place_rows(self, x: Tensor, rows: int) -> Tensor:
        """x [b] of this rank's rows of a minibatch of `rows`, in place among them [rows] (zeros elsewhere) for a
        sum over the ranks (`reduce_grads`'s `extra`); for one learner `x` itself."""

    def reduce_grads(self, grads: list[Tensor], loss: Tensor, extra: Tensor | None = None) -> Tensor:
        """Sum `grads` and `extra` (in place) and the loss over the ranks; returns the summed loss."""

    def update_normalizers(self, model: Any, obs: dict[str, Tensor], mask: Tensor) -> None:
        """Merge the observations obs {key: [N, *shape]} where mask [N] is set, of every rank, into the model's
        observation normalizers."""

    def sync_start(self, model: torch.nn.Module) -> None:
        """Rank 0's weights, statistics and CPU random state on every rank."""

    def barrier(self) -> None:
        """Every rank got here."""

    def leave(self) -> None:
        """Tear down what joining the group set up."""


class LocalMinibatch:
    """A minibatch of one learner: the plain masked means over its own samples."""

    def __init__(self, rows: Tensor, valid: Tensor | None) -> None:
        self.rows = rows
        self.mask = None if valid is None else valid.reshape(-1)  # [B*T]
        self._has_data = None if valid is None else valid.any()

    def merge(self, adv: Tensor, targets: Tensor) -> None:
        pass

    def has_data(self) -> Tensor | None:
        return self._has_data

    def normalized_advantages(self, adv: Tensor) -> Tensor:
        return normalize_advantages(adv, self.mask)

    def update_returns_normalizer(self, normalizer: Any, targets: Tensor) -> None:
        normalizer.update(targets.reshape(-1), self.mask)

    def share(self, loss: Tensor) -> Tensor:
        return loss


class SingleRank:
    """One learner trains the policy: rank 0 of 1. Collectives are identities; statistics are this learner's."""

    rank, world = 0, 1

    def global_rows(self, local: int) -> int:
        return local

    def my_rows(self, rows: int) -> tuple[int, int]:
        return 0, rows

    def rows_of(self, batch: dict[str, Any], rows: int) -> dict[str, Any]:
        return batch

    def permutation(self, rows: int, device: torch.device) -> Tensor:
        return torch.randperm(rows, device=device)  # on the training device: no copy of the indices per minibatch

    def minibatch(self, mb: Tensor, valid: Tensor, all_valid: bool, device: torch.device) -> LocalMinibatch:
        return LocalMinibatch(mb, None if all_valid else valid[mb])

    def agree(self, flag: bool) -> bool:
        return flag

    def broadcast_(self, t: Tensor, cpu: bool = False) -> Tensor:
        return t

    def broadcast_object(self, obj: Any = None) -> Any:
        return obj

    def mean(self, t: Tensor) -> Tensor:
        return t

    def sum_counts(self, counts: dict[str, float]) -> dict[str, float]:
        return counts

    def share_of_mean(self, x: Tensor, count: int) -> Tensor:
        return x.mean()

    def place_rows(self, x: Tensor, rows: int) -> Tensor:
        return x

    def reduce_grads(self, grads: list[Tensor], loss: Tensor, extra: Tensor | None = None) -> Tensor:
        return loss

    def update_normalizers(self, model: Any, obs: dict[str, Tensor], mask: Tensor) -> None:
        model.update_normalizers(obs, mask)

    def sync_start(self, model: torch.nn.Module) -> None:
        pass

    def barrier(self) -> None:
        pass

    def leave(self) -> None:
        pass
