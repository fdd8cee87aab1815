"""APPO / PPO training step on a batch of trajectories. No process code: the learner process hands it
trajectories copied out of the shared slots and publishes the weights it produces.

An algorithm object implements `train(batch, policy_version) -> (stats, new_version)`, `set_learning_rate(lr)`,
`state_dict()` and `load_state_dict()`; the learner only relies on that, so other algorithms (off-policy with
replay) plug in.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from sample_factory.algo.losses import clipped_value_loss, entropy_loss, masked_mean, ppo_policy_loss
from sample_factory.algo.returns import calculate_gae, calculate_vtrace
from sample_factory.config import Config
from sample_factory.envs.spaces import ACTION_MASK_KEY


def shaped_rewards(rewards: Tensor, truncated: Tensor, final_values: Tensor, cfg: Config) -> Tensor:
    """[B, T] rewards scaled and clipped; with value bootstrap a truncated step also gets gamma * V(final obs),
    so truncation can be treated as an episode end everywhere else."""
    r = (rewards * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)
    if cfg.value_bootstrap:
        r = r + cfg.gamma * final_values * truncated.float()
    return r


def learning_rate_at(cfg: Config, env_steps: int) -> float:
    if cfg.lr_schedule == "linear_decay":
        return cfg.learning_rate * max(0.0, 1.0 - env_steps / cfg.train_for_env_steps)
    return cfg.learning_rate


class PPOAlgorithm:
    """PPO clipped surrogate with V-trace (default) or GAE targets, over whole trajectories so BPTT and V-trace
    see consecutive steps. One policy version is one SGD step."""

    def __init__(self, cfg: Config, model: torch.nn.Module, device: torch.device):
        self.cfg, self.model, self.device = cfg, model, device
        self.optimizer = torch.optim.Adam(
            model.parameters(),
            lr=cfg.learning_rate,
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_eps,
        )
        self.skipped_updates = 0
        self.consecutive_skipped = 0  # the learner stops the run when this exceeds --max_nonfinite_updates

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])

    def set_learning_rate(self, lr: float) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = lr

    def train(
        self, batch: dict[str, Tensor], policy_version: int, policy_id: int | None = None
    ) -> tuple[dict[str, float], int]:
        """batch: trajectories [M, T(+1), ...] as produced by TrajectoryBuffers.gather. With `policy_id`, steps
        another policy acted on (multi-agent envs shared by several policies) are masked out."""
        cfg, dev = self.cfg, self.device
        T = cfg.rollout
        b = {k: v.to(dev, non_blocking=True) for k, v in batch.items() if k != "obs"}
        obs = {k: v.to(dev, non_blocking=True) for k, v in batch["obs"].items()}  # {key: [M, T+1, *shape]}
        is_first = b["is_first"]  # [M, T+1]
        action_mask = obs[ACTION_MASK_KEY][:, :T] if ACTION_MASK_KEY in obs else None  # [M, T, A]
        rnn_states = b["rnn_states"][:, : T + 1]  # [M, T+1, H]
        actions = b["actions"][:, :T]  # [M, T, *act_shape]
        old_log_probs, old_values = b["log_probs"][:, :T], b["values"]  # [M, T], [M, T+1]
        rewards = shaped_rewards(b["rewards"], b["truncated"], b["final_values"], cfg)  # [M, T]
        dones = b["dones"].float()  # [M, T]
        lag = policy_version - b["policy_version"][:, :T]  # [M, T]
        # inactive steps: agents of a multi-agent env that finished before the episode ended
        own = b["active"][:, :T]  # [M, T] steps this policy trains on
        if policy_id is not None and "policy_id" in b:
            own = own & (b["policy_id"][:, :T] == policy_id)
        valid = (lag <= cfg.max_policy_lag) & own

        if getattr(self.model, "obs_normalizers", None) is not None:  # before the values are recomputed
            self.model.update_normalizers({k: v[:, :T][own] for k, v in obs.items()})  # this policy's active steps
        gae_adv = gae_ret = None
        if not cfg.with_vtrace:
            adv, ret = calculate_gae(rewards.T, dones.T, old_values.T, cfg.gamma, cfg.gae_lambda)
            gae_adv, gae_ret = adv.T, ret.T  # [M, T]

        M = is_first.shape[0]
        sums: dict[str, float] = {}
        num_steps = 0
        version = policy_version
        for _ in range(cfg.num_epochs):
            perm = torch.randperm(M, device=dev)
            for mb in torch.tensor_split(perm, min(cfg.num_batches_per_epoch, M)):
                # values: what the value head predicts (normalized with --normalize_returns); values_real: returns
                obs_mb = {k: v[mb] for k, v in obs.items()}
                params, values = self.model.forward_sequence(obs_mb, rnn_states[mb], is_first[mb], cfg.recurrence)
                values_real = self.model.denormalize_values(values.detach())  # [B, T+1]
                B = mb.numel()
                mask_mb = None if action_mask is None else action_mask[mb].reshape(B * T, -1)
                dist = self.model.distribution(params[:, :T].reshape(B * T, -1), mask_mb)
                log_probs = dist.log_prob(actions[mb].reshape(B * T, *actions.shape[2:]))  # [B*T]
                entropy = dist.entropy()
                if cfg.with_vtrace:
                    log_rhos = log_probs.detach().view(B, T) - old_log_probs[mb]
                    vs, pg_adv = calculate_vtrace(
                        rewards[mb].T,
                        dones[mb].T,
                        values_real.T,
                        log_rhos.T,
                        cfg.gamma,
                        cfg.vtrace_rho,
                        cfg.vtrace_c,
                    )
                    targets, adv = vs.T, pg_adv.T
                else:
                    targets, adv = gae_ret[mb], gae_adv[mb]
                mask = valid[mb].reshape(-1)
                adv = adv.reshape(-1)
                if cfg.normalize_advantage:
                    mean = masked_mean(adv, mask)
                    std = masked_mean((adv - mean) ** 2, mask).sqrt()
                    adv = (adv - mean) / (std + 1e-7)
                policy_loss, pstats = ppo_policy_loss(
                    log_probs, old_log_probs[mb].reshape(-1), adv, cfg.ppo_clip_ratio, mask
                )
                self.model.update_returns_normalizer(targets[mask.view(B, T)])
                value_loss = clipped_value_loss(
                    values[:, :T].reshape(-1),
                    self.model.normalize_values(old_values[mb, :T]).reshape(-1),
                    self.model.normalize_values(targets).reshape(-1),
                    cfg.ppo_clip_value,
                    mask,
                )
                ent_loss = entropy_loss(entropy, cfg.exploration_loss_coeff, mask)
                loss = policy_loss + cfg.value_loss_coeff * value_loss + ent_loss

                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if cfg.max_grad_norm > 0:
                    grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                else:
                    grad_norm = torch.sqrt(
                        sum((p.grad**2).sum() for p in self.model.parameters() if p.grad is not None)
                    )
                if not (math.isfinite(float(loss.detach())) and math.isfinite(float(grad_norm))):
                    self.skipped_updates += 1  # never apply a NaN/inf update
                    self.consecutive_skipped += 1
                    continue
                self.consecutive_skipped = 0
                self.optimizer.step()
                version += 1
                num_steps += 1
                step_stats = {
                    "loss": float(loss.detach()),
                    "policy_loss": float(policy_loss.detach()),
                    "value_loss": float(value_loss.detach()),
                    "entropy": float(masked_mean(entropy.detach(), mask)),
                    "grad_norm": float(grad_norm),
                    "value": float(values_real[:, :T].mean()),
                    "value_target": float(targets.mean()),
                    "advantage_abs": float(adv.abs().mean()),
                    **{k: float(v) for k, v in pstats.items()},
                }
                for k, v in step_stats.items():
                    sums[k] = sums.get(k, 0.0) + v
        stats = {k: v / max(num_steps, 1) for k, v in sums.items()}
        lagf = lag[own].float() if own.any() else lag.float()  # this policy's steps
        stats.update(
            sgd_steps=num_steps,
            skipped_updates=self.skipped_updates,
            lr=self.optimizer.param_groups[0]["lr"],
            policy_lag_min=float(lagf.min()),
            policy_lag_avg=float(lagf.mean()),
            policy_lag_max=float(lagf.max()),
            dropped_samples=int(((lag > cfg.max_policy_lag) & own).sum()),
            inactive_samples=int((~b["active"]).sum()),
            samples=int(own.sum()),
        )
        return stats, version
