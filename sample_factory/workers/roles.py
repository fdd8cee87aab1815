"""The components of a run on its main node, by role: one learner per policy (its rank 0; ranks 1.. of a learner
group are LearnerRank), --policy_workers_per_policy policy workers per policy, and the actor workers. Keys, as the
supervisor and the reports name them: ("learner", p), ("learner", (p, r)) for rank r >= 1, ("policy", (p, i)),
("actor", w). Each learner and policy worker gets the device its placement gave it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from sample_factory.config import Config
from sample_factory.runtime.component import Component
from sample_factory.runtime.messages import Channels
from sample_factory.runtime.placement import RunPlacement
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers
from sample_factory.workers.actor_worker import ActorWorker
from sample_factory.workers.learner import Learner
from sample_factory.workers.learner_rank import LearnerRank
from sample_factory.workers.policy_worker import PolicyWorker


@dataclass
class RunComponents:
    cfg: Config
    placement: RunPlacement
    buffers: TrajectoryBuffers
    channels: Channels
    weights: list[SharedWeights]  # one per policy
    obs_space: gym.Space
    action_space: gym.Space
    hyperparams: Callable[[int], dict | None]  # policy -> its PBT hyperparameters now (None without PBT)
    # the checkpoints a resumed run starts from: (policy versions, env steps of all policies); None: a new run
    resume_point: tuple[tuple[int, ...], int] | None = None

    def keys(self) -> list[tuple[str, Any]]:
        cfg = self.cfg
        keys: list[tuple[str, Any]] = []
        for p in range(cfg.num_policies):
            keys.append(("learner", p))
            keys += [("learner", (p, r)) for r in range(1, cfg.learners_per_policy)]
            keys += [("policy", (p, i)) for i in range(cfg.policy_workers_per_policy)]
        local = cfg.local_samplers or cfg.evaluation_run  # evaluations of a run trained by sampler nodes play here
        assert cfg.num_workers is not None, "parse_cfg resolves --num_workers"
        keys += [("actor", w) for w in range(cfg.num_workers if local else 0)]
        return keys

    def make(self, role: str, index: Any) -> Component:
        """A new component for the key: at the start, and for each restart of an actor or policy worker."""
        b, ch, spaces = self.buffers, self.channels, (self.obs_space, self.action_space)
        if role == "learner":
            p, r = index if isinstance(index, tuple) else (index, 0)
            cfg = self.placement.cfg_for(self.cfg, self.placement.learners[p, r])
            kind = Learner if r == 0 else LearnerRank
            group = self.placement.groups.get(p)
            return kind(cfg, p, b, ch, self.weights[p], *spaces, self.weights, self.hyperparams(p), rank=r, group=group)
        if role == "policy":
            cfg = self.placement.cfg_for(self.cfg, self.placement.policy_workers[index])
            return PolicyWorker(cfg, index[0], index[1], b, ch, self.weights[index[0]], *spaces)
        # no random decorrelation steps once a policy has trained (a resumed run)
        resumed = any(w.version > 0 for w in self.weights)
        return ActorWorker(
            self.cfg, index, b, ch, resumed=resumed, weights=self.weights, resume_point=self.resume_point
        )
