"""APPO: PPO's clipped surrogate on trajectories collected asynchronously, with V-trace (default) or GAE targets.
No process code: the learner process hands it trajectories copied out of the shared slots and publishes the
weights it produces. One iteration = `prepare` the batch once, then for every epoch and minibatch
`minibatch_loss` and `guarded_step` (algo/base.py)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from sample_factory.algo.base import (
    TRAJECTORY_KEYS,
    Algorithm,
    StepStats,
    exploration_coeff_at,
    forward_autocast,
    kl_adaptive_lr,
    learning_rate_at,
    make_adam,
)
from sample_factory.algo.distributions import has_uniform_distribution
from sample_factory.algo.losses import (
    clipped_value_loss,
    entropy_loss,
    kl_penalty,
    masked_mean,
    ppo_policy_loss,
    symmetric_kl_loss,
)
from sample_factory.algo.replay import TrajectoryReplay, concat_batches, replayed_count
from sample_factory.algo.returns import calculate_gae, calculate_vtrace
from sample_factory.config import Config, ConfigError
from sample_factory.envs.spaces import ACTION_MASK_KEY

# Per-iteration counts summed over a data-parallel group's ranks (each rank counts its own rows).
RANK_SUMMED = ("dropped_samples", "inactive_samples", "samples")


def shaped_rewards(rewards: Tensor, truncated: Tensor, final_values: Tensor, cfg: Config) -> Tensor:
    """[B, T] rewards scaled and clipped; with value bootstrap a truncated step also gets gamma * V(final obs),
    so truncation can be treated as an episode end everywhere else."""
    r = (rewards * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)
    if cfg.value_bootstrap:
        r = r + cfg.gamma * final_values * truncated.float()
    return r


class MinibatchLoss(NamedTuple):
    """One minibatch's loss (this rank's share of it, in a data-parallel group) and its detached statistics."""

    loss: Tensor  # scalar
    stats: dict[str, Tensor]  # scalars
    has_data: Tensor | None  # bool scalar: the minibatch has a sample to learn from (None: every sample counts)


class PreparedBatch(NamedTuple):
    """One iteration's trajectories on the training device (M trajectories, T = --rollout), computed once."""

    obs: dict[str, Tensor]  # {key: [M, T+1, *shape]}
    rnn_states: Tensor  # [M, T+1, H] stored core states
    is_first: Tensor  # [M, T+1] bool
    action_mask: Tensor | None  # [M, T, A]
    actions: Tensor  # [M, T, *act_shape]
    old_log_probs: Tensor  # [M, T] behaviour log-probs
    prox_log_probs: Tensor | None  # [M, T] log-probs under the weights the iteration starts from (--decoupled_ppo)
    old_values: Tensor  # [M, T+1] behaviour values, real scale
    rewards: Tensor  # [M, T] shaped (shaped_rewards)
    dones: Tensor  # [M, T] float 0/1
    lag: np.ndarray  # [M, T] policy versions between acting and this iteration (host: per-iteration counts)
    active: np.ndarray  # [M, T] bool: the agent took part in the step (host)
    own: np.ndarray  # [M, T] bool: active steps of the policy being trained (host)
    valid: Tensor  # [M, T] bool: own steps not older than --max_policy_lag (the loss mask; on the device)
    all_valid: bool  # every step is valid: the losses take plain means (1 op each instead of a masked mean's 6)
    gae_advantages: Tensor | None  # [M, T] with --with_vtrace=False (from behaviour values, once per iteration)
    gae_returns: Tensor | None  # [M, T]


class APPOAlgorithm(Algorithm):
    """PPO clipped surrogate with V-trace (default) or GAE targets, over whole trajectories so BPTT and V-trace
    see consecutive steps. One policy version is one SGD step.

    Stats of an iteration, averaged over its applied SGD steps: loss, policy_loss, value_loss, entropy,
    grad_norm (before clipping), value (predicted, real scale), value_target, advantage_abs (after
    normalization), clip_fraction, ratio_mean, approx_kl (ppo_policy_loss); symmetric_kl with
    --exploration_loss=symmetric_kl, kl_loss (the weighted term) with --kl_loss_coeff > 0. Per iteration: sgd_steps,
    skipped_updates (cumulative), lr, policy_lag_min/avg/max, dropped_samples (too stale), inactive_samples,
    samples (this policy's active steps).
    """

    required_buffers = ("obs", *TRAJECTORY_KEYS)  # every slot tensor

    def __init__(self, cfg: Config, model: torch.nn.Module, device: torch.device):
        super().__init__(cfg, model, device)
        self.optimizer = make_adam(cfg, model.parameters())
        # --lr_schedule=kl_adaptive: the rate lives on the device, steered after every SGD step without a read-back
        self.lr_t: Tensor | None = None
        if cfg.lr_schedule == "kl_adaptive":
            self.lr_t = torch.tensor(cfg.learning_rate, dtype=torch.float32, device=device)
            self.optimizer.param_groups[0]["lr"] = self.lr_t
            if cfg.async_rl and not cfg.serial_mode and not cfg.decoupled_ppo:
                self.notes.append(
                    "--lr_schedule=kl_adaptive in an asynchronous run: the KL it steers by includes the policy lag, "
                    "which can drive the rate to --lr_min; --async_rl=False measures it as rl_games does, "
                    "--decoupled_ppo=True from the policy the iteration starts from (docs/algorithms.md)"
                )
        self.exploration_coeff = exploration_coeff_at(cfg, 0)  # --exploration_loss_schedule, set every iteration
        # IMPALA-style replay (--replay_proportion with --exp_replayer=uniform): whole trajectories, V-trace corrected
        self.replay = None
        if cfg.exp_replayer == "uniform":
            self.replay = TrajectoryReplay(cfg.replay_buffer_num_slots, None if cfg.seed is None else cfg.seed + 17)

    @classmethod
    def check_spaces(cls, cfg: Config, obs_space: object, action_space: object) -> None:
        super().check_spaces(cfg, obs_space, action_space)
        if cfg.exploration_loss == "symmetric_kl" and not has_uniform_distribution(action_space):
            raise ConfigError(
                f"--exploration_loss=symmetric_kl needs discrete actions (Discrete, MultiDiscrete or a Tuple of them), "
                f"the env's are {action_space}: a Gaussian has no uniform distribution; use --exploration_loss=entropy"
            )

    def state_dict(self) -> dict:
        state = {"optimizer": self.optimizer.state_dict()}
        if self.cfg.save_replay_buffer and self.replay is not None and self.replay.store is not None:
            state["replay"] = self.replay.state_dict()
        return state

    @classmethod
    def check_resume(cls, cfg: Config, state: dict) -> list[str]:
        if "target" in state:
            raise ConfigError("the checkpoint holds a target network: it was written by --algo=DQN")
        replay = state.get("replay")
        if replay is None or cfg.exp_replayer != "uniform":
            return ["the checkpoint's replay trajectories are not used (no --replay_proportion)"] if replay else []
        if not cfg.save_replay_buffer:
            return ["--save_replay_buffer=False: the checkpoint's replay trajectories are not loaded (it refills)"]
        slots = TrajectoryReplay.slots_of(replay)
        if slots != cfg.replay_buffer_num_slots:
            raise ConfigError(
                f"the checkpoint's trajectory replay holds {slots} trajectories; --replay_buffer_num_slots="
                f"{cfg.replay_buffer_num_slots} does not fit it: resume with --replay_buffer_num_slots={slots}, or "
                f"with --save_replay_buffer=False to drop it"
            )
        return []

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_t is not None:  # the steered rate goes on; a checkpoint of another schedule starts it anew
            saved = self.optimizer.param_groups[0]["lr"]
            if isinstance(saved, Tensor):
                self.lr_t.copy_(saved)
            else:
                self.lr_t.fill_(self.cfg.learning_rate)
            self.optimizer.param_groups[0]["lr"] = self.lr_t
        if self.replay is not None and self.cfg.save_replay_buffer and state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"])

    def update_learning_rate(self, env_frames: int) -> None:
        if self.lr_t is None:
            for g in self.optimizer.param_groups:
                g["lr"] = learning_rate_at(self.cfg, env_frames)
        self.exploration_coeff = exploration_coeff_at(self.cfg, env_frames)

    def update_cfg(self, cfg: Config) -> None:
        if self.lr_t is not None and cfg.learning_rate != self.cfg.learning_rate:  # PBT set a new rate: start there
            self.lr_t.fill_(cfg.learning_rate)
        super().update_cfg(cfg)

    def on_weights_replaced(self) -> None:
        self.optimizer.state.clear()  # Adam's moment estimates belong to the old weights

    def train(
        self, batch: dict[str, Any] | None, policy_version: int, policy_id: int | None = None
    ) -> tuple[dict[str, float], int]:
        """batch: trajectories [M, T(+1), ...] as produced by TrajectoryBuffers.gather. With `policy_id`, steps
        another policy acted on (multi-agent envs shared by several policies) are masked out. With replay, the
        batch is extended with replayed trajectories (rows past `fresh`) before training.

        The host waits for the device once per iteration: statistics are summed on the device and read back
        together after the last SGD step, and the NaN/inf guard skips a step on the device (`device_step`)."""
        self.iteration_unused = self.should_stop()
        if self.iteration_unused:  # a stop before the batch changed anything (replay, normalizer, weights)
            return {}, policy_version
        assert batch is not None, "every rank of a group gets rows (LeaderBatches.too_few_rows drops the iteration)"
        fresh = None
        if self.replay is not None:
            batch, fresh = self.mix_replay(batch)
        p = self.prepare(batch, policy_version, policy_id, fresh)
        step_stats = StepStats(self.device)
        # the rate the steps use, on the device: kl_adaptive moves it after every step (reported as lr_mean)
        rate = (
            self.lr_t
            if self.lr_t is not None
            else torch.tensor(self.optimizer.param_groups[0]["lr"], device=self.device)
        )
        rows = self.dp.global_rows(p.is_first.shape[0])  # a data-parallel rank permutes the global rows
        for epoch in range(self.cfg.num_epochs):
            if epoch > 0 and self.should_stop():  # (epoch 0: asked above)
                break
            perm = self.dp.permutation(rows, self.device)
            for mb in torch.tensor_split(perm, min(self.cfg.num_batches_per_epoch, rows)):
                if self.should_stop():  # the learner must save and exit: keep the steps taken, drop the rest
                    break
                # A minibatch with nothing to learn from (all past --max_policy_lag, inactive or another policy's)
                # is skipped on the device: a step would still move the weights by Adam's momentum.
                loss, mb_stats, has_data = self.minibatch_loss(p, mb)
                grad_norm, ok = self.device_step(loss, self.optimizer, has_data)
                values = torch.stack([*mb_stats.values(), grad_norm, rate.to(grad_norm.dtype)])  # [K]
                step_stats.add([*mb_stats, "grad_norm", "lr_mean"], values, ok)
                if self.lr_t is not None:
                    self.steer_lr(mb_stats["approx_kl"], ok)
        step_stats.average(self.dp)
        stats, num_steps, (lr_read,) = self.read_back(step_stats, rate)
        stats.update(self.batch_stats(p, num_steps, fresh, lr=float(lr_read)))
        # sample counts of the whole batch (in a group the other statistics are this rank's)
        stats.update(self.dp.sum_counts({k: stats[k] for k in RANK_SUMMED}))
        return stats, policy_version + num_steps

    def steer_lr(self, kl: Tensor, applied: Tensor) -> None:
        """--lr_schedule=kl_adaptive after an SGD step: the rate follows the minibatch's approx_kl (in a data-parallel
        group the ranks' mean, so that every rank keeps the same rate); a skipped step leaves it as it was."""
        cfg = self.cfg
        new = kl_adaptive_lr(self.lr_t, self.dp.mean(kl.detach()), cfg.kl_threshold, cfg.lr_min, cfg.lr_max)
        self.lr_t.copy_(torch.where(applied, new, self.lr_t))

    def mix_replay(self, batch: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The fresh trajectories [M] plus replay_proportion * M replayed ones drawn uniformly from the buffer (which
        then takes the fresh ones). Returns (the mixed batch, M)."""
        M = batch["is_first"].shape[0]
        k = replayed_count(self.cfg.replay_proportion, M, self.replay.gen) if len(self.replay) else 0
        replayed = self.replay.sample(k) if k else None
        self.replay.add({key: batch[key] for key in batch})
        return (batch if replayed is None else concat_batches(batch, replayed)), M

    def prepare(
        self, batch: dict[str, Any], policy_version: int, policy_id: int | None, fresh: int | None = None
    ) -> PreparedBatch:
        """Move the batch to the device and compute what does not change within the iteration: shaped rewards,
        lag and masks, the observation-normalizer update (fresh rows only: rows from `fresh` on are replayed),
        GAE (with --with_vtrace=False). Lag and masks come from the batch's CPU tensors (small [M, T]): whether
        every step is valid and the per-iteration counts need no read-back from the device."""
        cfg, dev, T = self.cfg, self.device, self.cfg.rollout
        # numpy, not torch: host bookkeeping that a host-sync count must not mistake for reads from the device
        lag = policy_version - batch["policy_version"][:, :T].numpy()  # [M, T]
        # inactive steps: agents of a multi-agent env that finished before the episode ended
        own = batch["active"][:, :T].numpy()  # [M, T]
        if policy_id is not None and "policy_id" in batch:
            own = own & (batch["policy_id"][:, :T].numpy() == policy_id)
        valid = (lag <= cfg.max_policy_lag) & own  # [M, T]
        all_valid = bool(valid.all())
        b = {k: v.to(dev, non_blocking=True) for k, v in batch.items() if k != "obs"}
        obs = {k: v.to(dev, non_blocking=True) for k, v in batch["obs"].items()}  # {key: [M, T+1, *shape]}
        rewards = shaped_rewards(b["rewards"], b["truncated"], b["final_values"], cfg)  # [M, T]
        dones = b["dones"].float()  # [M, T]
        old_values = b["values"]  # [M, T+1]
        if getattr(self.model, "obs_normalizers", None) is not None:  # before any value is recomputed
            seen = own if fresh is None else own[:fresh]  # replayed observations were counted when they were fresh
            seen = torch.from_numpy(seen).to(dev, non_blocking=True).reshape(-1)
            flat = {k: v[: len(seen) // T, :T].flatten(0, 1) for k, v in obs.items()}
            self.dp.update_normalizers(self.model, flat, seen)  # (of every rank's observations)
        rnn_states = b["rnn_states"][:, : T + 1]
        action_mask = obs[ACTION_MASK_KEY][:, :T] if ACTION_MASK_KEY in obs else None
        actions = b["actions"][:, :T]
        prox = (
            self.proximal_log_probs(obs, rnn_states, b["is_first"], actions, action_mask) if cfg.decoupled_ppo else None
        )
        gae_adv = gae_ret = None
        if not cfg.with_vtrace:
            adv, ret = calculate_gae(rewards.T, dones.T, old_values.T, cfg.gamma, cfg.gae_lambda)
            gae_adv, gae_ret = adv.T, ret.T
        return PreparedBatch(
            obs=obs,
            rnn_states=rnn_states,
            is_first=b["is_first"],
            action_mask=action_mask,
            actions=actions,
            old_log_probs=b["log_probs"][:, :T],
            prox_log_probs=prox,
            old_values=old_values,
            rewards=rewards,
            dones=dones,
            lag=lag,
            active=batch["active"].numpy(),
            own=own,
            valid=torch.from_numpy(valid).to(dev, non_blocking=True),
            all_valid=all_valid,
            gae_advantages=gae_adv,
            gae_returns=gae_ret,
        )

    @torch.no_grad()
    def proximal_log_probs(
        self,
        obs: dict[str, Tensor],
        rnn_states: Tensor,
        is_first: Tensor,
        actions: Tensor,
        action_mask: Tensor | None,
    ) -> Tensor:
        """[M, T] log-probs of the batch's actions under the current weights, before the iteration's first step:
        --decoupled_ppo's proximal policy. Computed in minibatch-sized chunks of trajectories, as the loss computes
        its own, so that at the first step pi == pi_prox up to the order of reductions."""
        cfg, T, model = self.cfg, self.cfg.rollout, self.model
        M = is_first.shape[0]
        out = torch.empty((M, T), device=self.device)  # [M, T]
        chunk = max(cfg.batch_size // T, 1)
        for lo in range(0, M, chunk):
            rows = slice(lo, min(lo + chunk, M))  # views, not gathered copies of the frames
            B = rows.stop - rows.start
            with forward_autocast(self):
                params, _ = model.forward_sequence(
                    {k: v[rows] for k, v in obs.items()}, rnn_states[rows], is_first[rows], cfg.recurrence
                )
            mask = None if action_mask is None else action_mask[rows].reshape(B * T, -1)  # [B*T, A]
            dist = model.distribution(params.float()[:, :T].reshape(B * T, -1), mask)
            out[rows] = dist.log_prob(actions[rows].reshape(B * T, *actions.shape[2:])).view(B, T)
        return out

    def minibatch_loss(self, p: PreparedBatch, mb: Tensor) -> MinibatchLoss:
        """The loss of the trajectories `mb` [B] (indices into the batch), its detached stats and whether it has a
        sample to learn from. Also updates the returns normalizer with the minibatch's value targets (between the
        policy and the value loss). In a data-parallel group `mb` holds global row indices: the rank computes the
        loss of its own rows as their share of the whole minibatch's (`dp.minibatch`), and advantage
        normalization and the returns normalizer use the whole minibatch's statistics, merged over the ranks."""
        cfg, T, model = self.cfg, self.cfg.rollout, self.model
        share = self.dp.minibatch(mb, p.valid, p.all_valid, self.device)
        mb, mask = share.rows, share.mask  # [B] this rank's rows; [B*T] the samples that count (None: every one)
        B = mb.numel()
        # values: what the value head predicts (normalized with --normalize_returns); values_real: returns
        obs_mb = {k: v[mb] for k, v in p.obs.items()}  # {key: [B, T+1, *shape]}
        with forward_autocast(self):  # --learner_precision; distributions and losses below run in fp32
            params, values = model.forward_sequence(obs_mb, p.rnn_states[mb], p.is_first[mb], cfg.recurrence)
        params, values = params.float(), values.float()
        values_real = model.denormalize_values(values.detach())  # [B, T+1]
        mask_mb = None if p.action_mask is None else p.action_mask[mb].reshape(B * T, -1)  # [B*T, A]
        dist = model.distribution(params[:, :T].reshape(B * T, -1), mask_mb)
        log_probs = dist.log_prob(p.actions[mb].reshape(B * T, *p.actions.shape[2:]))  # [B*T]
        entropy = dist.entropy()  # [B*T]
        sym_kl = dist.symmetric_kl_to_uniform() if cfg.exploration_loss == "symmetric_kl" else None  # [B*T]
        old_log_probs = p.old_log_probs[mb]  # [B, T]
        if cfg.with_vtrace:
            log_rhos = log_probs.detach().view(B, T) - old_log_probs
            vs, pg_adv = calculate_vtrace(
                p.rewards[mb].T, p.dones[mb].T, values_real.T, log_rhos.T, cfg.gamma, cfg.vtrace_rho, cfg.vtrace_c
            )
            targets, adv = vs.T, pg_adv.T  # [B, T]
        else:
            targets, adv = p.gae_returns[mb], p.gae_advantages[mb]
        adv = adv.reshape(-1)  # [B*T]
        share.merge(adv, targets)
        if cfg.normalize_advantage:
            adv = share.normalized_advantages(adv)
        policy_loss, pstats = ppo_policy_loss(
            log_probs,
            old_log_probs.reshape(-1),
            adv,
            cfg.ppo_clip_ratio,
            mask,
            clip_mode=cfg.ppo_clip_mode,
            ratio_clamp=cfg.ppo_ratio_clamp,
            log_prob_prox=None if p.prox_log_probs is None else p.prox_log_probs[mb].reshape(-1),
        )
        if model.returns_normalizer is not None:
            share.update_returns_normalizer(model.returns_normalizer, targets)
        value_loss = clipped_value_loss(
            values[:, :T].reshape(-1),
            model.normalize_values(p.old_values[mb, :T]).reshape(-1),
            model.normalize_values(targets).reshape(-1),
            cfg.ppo_clip_value,
            mask,
        )
        if sym_kl is None:
            exploration = entropy_loss(entropy, self.exploration_coeff, mask)
        else:
            exploration = symmetric_kl_loss(sym_kl, self.exploration_coeff, mask)
        loss = policy_loss + cfg.value_loss_coeff * value_loss + exploration
        extra: dict[str, Tensor] = {}
        if sym_kl is not None:
            extra["symmetric_kl"] = masked_mean(sym_kl.detach(), mask)
        if cfg.kl_loss_coeff > 0:
            kl_loss = cfg.kl_loss_coeff * kl_penalty(log_probs, old_log_probs.reshape(-1), mask)
            loss = loss + kl_loss
            extra["kl_loss"] = kl_loss.detach()
        stats = {
            "loss": loss.detach(),
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": masked_mean(entropy.detach(), mask),
            "value": values_real[:, :T].mean(),
            "value_target": targets.mean(),
            "advantage_abs": adv.abs().mean(),
            **pstats,
            **extra,
        }
        return MinibatchLoss(share.share(loss), stats, share.has_data())

    def batch_stats(
        self, p: PreparedBatch, sgd_steps: int, fresh: int | None = None, lr: float | None = None
    ) -> dict[str, float]:
        """Per-iteration counts: SGD steps, skipped updates, learning rate, policy lag of this policy's steps (fresh
        ones; replayed rows from `fresh` on get their own lag and count). From the CPU tensors: no read-back."""
        if fresh is not None:
            replay_own, replay_lag = p.own[fresh:], p.lag[fresh:]
            p = p._replace(own=p.own[:fresh], lag=p.lag[:fresh], active=p.active[:fresh])
        lag = p.lag[p.own] if p.own.any() else p.lag.reshape(-1)
        self.lag_counts = np.bincount(lag.reshape(-1).clip(min=0))  # [max lag + 1] steps per lag (the learner reports)
        extra = {}
        if fresh is not None:
            rl = replay_lag[replay_own] if replay_own.any() else np.zeros(1)
            extra = {
                "replayed_samples": int(replay_own.sum()),
                "replay_policy_lag_min": float(rl.min()),
                "replay_policy_lag_avg": float(rl.mean()),
                "replay_policy_lag_max": float(rl.max()),
            }
        return {
            **extra,
            "sgd_steps": sgd_steps,
            "skipped_updates": self.skipped_updates,
            "lr": self.optimizer.param_groups[0]["lr"] if lr is None else lr,
            "exploration_coeff": self.exploration_coeff,
            "policy_lag_min": float(lag.min()),
            "policy_lag_avg": float(lag.mean()),
            "policy_lag_max": float(lag.max()),
            "dropped_samples": int(((p.lag > self.cfg.max_policy_lag) & p.own).sum()),
            "inactive_samples": int((~p.active).sum()),
            "samples": int(p.own.sum()),
        }
