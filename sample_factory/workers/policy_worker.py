"""Policy worker: drains every pending inference request of its policy, runs one batched forward pass, writes
actions, log-probs, values and core states into the shared slot tensors, and tells each actor which of its
splits are ready. New weights are picked up between batches when the learner has published a newer version."""

from __future__ import annotations

import collections

import gymnasium as gym
import torch

from sample_factory.algo.registry import algorithm_class
from sample_factory.config import Config
from sample_factory.envs.spaces import ACTION_MASK_KEY
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runtime.component import Component
from sample_factory.runtime.device import torch_device
from sample_factory.runtime.messages import ACTIONS_READY, REQUEST, STOP, Channels
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers


class PolicyWorker(Component):
    role = "policy"

    def __init__(
        self,
        cfg: Config,
        policy_id: int,
        worker_idx: int,
        buffers: TrajectoryBuffers,
        channels: Channels,
        weights: SharedWeights,
        obs_space: gym.Space,
        action_space: gym.Space,
    ):
        super().__init__((policy_id, worker_idx), channels.policy[policy_id], channels.report)
        self.cfg, self.policy_id, self.buffers, self.channels = cfg, policy_id, buffers, channels
        self.weights, self.obs_space, self.action_space = weights, obs_space, action_space
        self.num_splits = cfg.worker_num_splits

    def init(self) -> None:
        self.device = torch_device(self.cfg.device)
        self.model = ActorCritic(self.cfg, self.obs_space, self.action_space).to(self.device).eval()
        self.version = self.weights.load_into(self.model)
        self.algo = algorithm_class(self.cfg)  # the class: how to act (act, values), no training state
        self.deterministic = bool(self.cfg.evaluation_run and self.cfg.eval_deterministic)
        self.bind_views()
        self.multi_policy = self.cfg.num_policies > 1
        self.all_columns = torch.arange(self.buffers.spec.agents_per_split)
        self.requests_served = 0
        self.batches = 0
        self.activity = "waiting for requests"

    _view_attrs = ("generation", "request_seq")

    def bind_views(self) -> None:
        # Shared views: which requests are still current.
        self.generation = self.buffers.generation.numpy()
        self.request_seq = self.buffers.request_seq.numpy()

    def on_messages(self, msgs: list) -> None:
        gen, seq = self.generation, self.request_seq
        # (REQUEST, actor, split, slot, t, has_truncations, gen, seq): drop those of replaced workers and
        # re-sent duplicates that were already answered.
        requests = [m for m in msgs if m[0] == REQUEST and m[6] == gen[m[1]] and m[7] == seq[m[1], m[2]]]
        if any(m[0] != REQUEST for m in msgs):
            others = [m for m in msgs if m[0] != REQUEST]
            stops = [m for m in others if m[0] == STOP]
            # The inbox is shared by this policy's workers: pass on STOPs meant for the others.
            for extra in stops[1:]:
                self.inbox.put(extra)
            super().on_messages([m for m in others if m[0] != STOP] + stops[:1])
        if requests:
            self.activity = "inference"
            with self.timing.add("weight_update"):
                self._maybe_update_weights()
            with self.timing.add("inference"):
                self._serve(requests)
            self.activity = "waiting for requests"

    def _maybe_update_weights(self) -> None:
        if self.weights.version != self.version:
            self.version = self.weights.load_into(self.model)
        self.deterministic = bool(self.cfg.evaluation_run and self.cfg.eval_deterministic)

    def _columns(self, slot: int, t: int, within: torch.Tensor | None = None) -> torch.Tensor:
        """[k] columns of slot at position t that this policy acts for (all of them with a single policy),
        optionally only among the columns where `within` [n] is True."""
        b = self.buffers
        mine = b.policy_id[slot, t] == self.policy_id if self.multi_policy else None
        if within is not None:
            mine = within if mine is None else mine & within
        return self.all_columns if mine is None else torch.nonzero(mine).squeeze(1)

    @torch.inference_mode()
    def _serve(self, requests: list[tuple]) -> None:
        b, dev = self.buffers, self.device
        cols = [self._columns(r[3], r[4]) for r in requests]
        counts = torch.tensor([len(c) for c in cols])
        # one row per (request, column): flat indices into the [S, T+1, n] slot tensors
        si = torch.tensor([r[3] for r in requests]).repeat_interleave(counts)
        ti = torch.tensor([r[4] for r in requests]).repeat_interleave(counts)
        ci = torch.cat(cols)
        N = ci.numel()
        if N:
            obs = {k: v[si, ti, ci].to(dev, non_blocking=True) for k, v in b.obs.items()}  # {key: [N, *shape]}
            h = None
            if self.model.recurrent:
                keep = (~b.is_first[si, ti, ci]).unsqueeze(-1)  # [N, 1]
                h = (b.rnn_states[si, ti, ci] * keep).to(dev)
            actions, log_probs, values, h_new = self.algo.act(
                self.cfg, self.model, obs, h, obs.get(ACTION_MASK_KEY), self.deterministic
            )  # values: real scale, as the buffers hold them
            b.actions[si, ti, ci] = actions.to("cpu", b.actions.dtype).view(N, *b.actions.shape[3:])
            b.log_probs[si, ti, ci] = log_probs.cpu()
            b.values[si, ti, ci] = values.cpu()
            b.policy_version[si, ti, ci] = self.version
            if h_new is not None:
                b.rnn_states[si, ti + 1, ci] = h_new.cpu()
        for r in requests:
            if r[5]:
                self._final_values(r)
        ready: dict[tuple[int, int], list[tuple[int, int]]] = collections.defaultdict(list)
        for r in requests:
            ready[r[1], r[6]].append((r[2], r[7]))
        for (actor_idx, gen), splits in ready.items():
            self.channels.actor[actor_idx].put((ACTIONS_READY, splits, gen, self.policy_id))
        self.requests_served += len(requests)
        self.batches += 1

    def _final_values(self, request: tuple) -> None:
        """V(final observation) of this policy's agents whose episode was truncated at step t - 1 (value
        bootstrap). Other columns keep stale values; the learner only reads final_values where truncated."""
        _, actor_idx, split_idx, slot, t = request[:5]
        b = self.buffers
        cols = self._columns(slot, t - 1, within=b.truncated[slot, t - 1])
        if not cols.numel():
            return
        split = actor_idx * self.num_splits + split_idx
        final_obs = {k: v[split, cols].to(self.device) for k, v in b.final_obs.items()}  # {key: [k, *shape]}
        h = b.rnn_states[slot, t, cols].to(self.device) if self.model.recurrent else None  # state before the reset
        b.final_values[slot, t - 1, cols] = self.algo.values(self.cfg, self.model, final_obs, h).cpu()

    def on_idle(self) -> None:
        if self.batches >= 200:
            self.report("inference", (self.policy_id, self.requests_served, self.batches))
            self.requests_served = self.batches = 0
