"""A finished rollout slot that a learner has been told about and not trained on yet (workers/learner.py keeps a
list of them; workers/batch_sources.py copies their trajectories out of shared memory)."""

from __future__ import annotations

from typing import NamedTuple

import torch


class PendingRollout(NamedTuple):
    """A finished slot waiting to be trained on."""

    slot: int
    actor_idx: int
    gen: int  # the actor worker's generation when it sent the slot
    cols: torch.Tensor  # [k] columns of the slot this policy acted in
