"""A plain advantage actor-critic (A2C): one SGD step per batch on the n-step returns of the behaviour values.
Not a registered algorithm: tests register it to show that the learner and the policy workers are generic.
docs/architecture.md ("The algorithm interface") names it as the plug-in example."""

from __future__ import annotations

from typing import Any

import torch

from sample_factory.algo.appo import shaped_rewards
from sample_factory.algo.base import TRAJECTORY_KEYS, Algorithm, learning_rate_at
from sample_factory.algo.losses import masked_mean
from sample_factory.algo.returns import calculate_gae


class A2CAlgorithm(Algorithm):
    # no behaviour log-probs, versions or policy ids: the learner copies only these out of shared memory
    required_buffers = ("obs", *(k for k in TRAJECTORY_KEYS if k not in ("log_probs", "policy_version", "policy_id")))

    def __init__(self, cfg: Any, model: torch.nn.Module, device: torch.device):
        super().__init__(cfg, model, device)
        self.optimizer = torch.optim.RMSprop(model.parameters(), lr=cfg.learning_rate)

    def update_learning_rate(self, env_frames: int) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = learning_rate_at(self.cfg, env_frames)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])

    def on_weights_replaced(self) -> None:
        self.optimizer.state.clear()

    def train(
        self, batch: dict[str, Any], policy_version: int, policy_id: int | None = None
    ) -> tuple[dict[str, float], int]:
        cfg, T = self.cfg, self.cfg.rollout
        b = {k: v.to(self.device) for k, v in batch.items() if k != "obs"}
        obs = {k: v.to(self.device) for k, v in batch["obs"].items()}  # {key: [M, T+1, *shape]}
        M = b["is_first"].shape[0]
        mask = b["active"].reshape(-1)  # [M*T] (a single policy: no other policy's steps to mask)
        rewards = shaped_rewards(b["rewards"], b["truncated"], b["final_values"], cfg)  # [M, T]
        # n-step returns bootstrapped from the behaviour value of the last observation (GAE with lambda = 1)
        adv, returns = calculate_gae(rewards.T, b["dones"].float().T, b["values"].T, cfg.gamma, 1.0)  # [T, M]
        params, values = self.model.forward_sequence(obs, b["rnn_states"][:, : T + 1], b["is_first"], cfg.recurrence)
        dist = self.model.distribution(params[:, :T].reshape(M * T, -1))
        log_probs = dist.log_prob(b["actions"][:, :T].reshape(M * T, *b["actions"].shape[2:]))  # [M*T]
        policy_loss = -masked_mean(log_probs * adv.T.reshape(-1), mask)
        value_loss = 0.5 * masked_mean((values[:, :T].reshape(-1) - returns.T.reshape(-1)) ** 2, mask)
        entropy = masked_mean(dist.entropy(), mask)
        loss = policy_loss + cfg.value_loss_coeff * value_loss - cfg.exploration_loss_coeff * entropy
        grad_norm = self.guarded_step(loss, self.optimizer)  # None: a NaN/inf step, skipped and counted
        stats = {
            "loss": float(loss.detach()),
            "policy_loss": float(policy_loss.detach()),
            "value_loss": float(value_loss.detach()),
            "entropy": float(entropy.detach()),
            "grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
            "skipped_updates": self.skipped_updates,
            "lr": self.optimizer.param_groups[0]["lr"],
            "samples": int(mask.sum()),  # counted as trained in the progress line
        }
        return stats, policy_version + (grad_norm is not None)
