"""Ape-X DQN: epsilon-greedy actors with a fixed epsilon per agent, a replay buffer fed by the learner from every
finished rollout (prioritized by default), n-step double-Q targets from a target network, Huber loss weighted by
importance weights. No process code: the learner hands `train` the fresh rollouts, which go into the replay buffer
(algo/replay.py); `train` then takes as many replayed minibatches as --training_intensity asks for.

The Q-network is the actor-critic model (model/actor_critic.py) read differently: the policy head's outputs are
Q(s, a) per action, or with --dueling=True the advantages A(s, a), combined with the value head's V(s) into
Q = V + A - mean(A). The argmax of the policy head is the greedy action either way, so greedy evaluation through
the model's distribution (enjoy.py, policy_api, ONNX export with --eval_deterministic) is argmax Q.

What policy workers write into the slot buffers for DQN (so the learner needs no extra forward pass for initial
priorities, Ape-X's actor-side prioritization): `values` = max_a Q(s, a), `log_probs` = Q(s, a) of the action
taken, `final_values` = max_a Q(final observation) for truncated episodes.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from sample_factory.algo.base import (
    TRAJECTORY_KEYS,
    ActResult,
    Algorithm,
    StepStats,
    forward_autocast,
    learning_rate_at,
    make_adam,
)
from sample_factory.algo.replay import ReplayBuffer, annealed_beta, nstep_targets
from sample_factory.algo.transfer import DeferredReads, PinnedStaging
from sample_factory.config import Config, ConfigError, reproducible
from sample_factory.config.env_defaults import is_atari_name
from sample_factory.envs.spaces import ACTION_MASK_KEY

# The per-step statistics an iteration averages over its applied SGD steps, in sgd_step's order.
STEP_STATS = ("loss", "q_mean", "q_target", "td_error_abs", "importance_weight", "grad_norm")

# The bookkeeping a checkpoint keeps (and a data-parallel group takes from rank 0 every iteration).
COUNTERS = ("sampled", "replayed", "sampled_since_start", "owed_steps", "last_target_update", "target_updates")


def epsilon_greedy(greedy: Tensor, eps: Tensor | float, num_actions: int, action_mask: Tensor | None) -> Tensor:
    """greedy actions [N] -> each replaced with probability eps ([N] or one value) by an action drawn uniformly
    among the allowed ones (action_mask [N, A], nonzero = allowed; None: all num_actions)."""
    n = greedy.shape[0]
    if action_mask is None:
        random = torch.randint(0, num_actions, (n,), device=greedy.device)
    else:
        random = torch.multinomial((action_mask != 0).float(), 1).squeeze(-1)
    return torch.where(torch.rand(n, device=greedy.device) < eps, random, greedy)


def apex_epsilon(rank: Tensor, eps: float, alpha: float) -> Tensor:
    """Ape-X's per-actor exploration: rank i/(N-1) in [0, 1] [N] -> epsilon eps^(1 + alpha * rank) [N]."""
    return eps ** (1.0 + alpha * rank)


def q_values(params: Tensor, values: Tensor, dueling: bool) -> Tensor:
    """Model outputs -> Q [B, A]: params [B, A] are Q itself, or with dueling the advantages added to V [B]."""
    if not dueling:
        return params
    return values.unsqueeze(-1) + params - params.mean(dim=-1, keepdim=True)


def masked_q(q: Tensor, action_mask: Tensor | None) -> Tensor:
    """Q [B, A] with disallowed actions at -inf (argmax and max never pick them)."""
    return q if action_mask is None else q.masked_fill(action_mask == 0, float("-inf"))


def double_q_target(returns: Tensor, discounts: Tensor, next_q_target: Tensor, next_q_online: Tensor | None) -> Tensor:
    """n-step target [B]: returns + discount * Q_target(s', a*), with a* = argmax Q_online(s') (double Q) or,
    without next_q_online, argmax Q_target(s'). next_q_* [B, A] already masked; discount 0 means no bootstrap."""
    select = next_q_online if next_q_online is not None else next_q_target
    a = select.argmax(dim=-1, keepdim=True)  # [B, 1]
    boot = next_q_target.gather(-1, a).squeeze(-1)
    boot = torch.where(discounts > 0, boot, 0.0)  # never 0 * -inf
    return returns + discounts * boot


def initial_priorities(targets_returns: Tensor, discounts: Tensor, offsets: Tensor, q_taken: Tensor, q_max: Tensor):
    """Actor-side priorities of a rollout [M, T]: |n-step target - Q(s, a)| from the behaviour Q-values the policy
    worker stored: q_taken [M, T] = Q(s_t, a_t), q_max [M, T+1] = max_a Q(s_t, a) (bootstrapped at t + m)."""
    T = q_taken.shape[1]
    boot = q_max.gather(1, torch.arange(T).unsqueeze(0) + offsets)  # [M, T]
    return (targets_returns + discounts * boot - q_taken).abs()


def frame_stacked_keys(cfg: Config, obs_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> dict[str, int]:
    """Observation keys the replay stores as single frames: Atari's uint8 [--env_framestack, H, W] stacks."""
    if not is_atari_name(cfg.env) or cfg.env_framestack < 2:
        return {}
    return {
        k: shape[0]
        for k, (shape, dtype) in obs_shapes.items()
        if dtype == torch.uint8 and len(shape) == 3 and shape[0] == cfg.env_framestack
    }


def replay_capacity(cfg: Config) -> int:
    """Transitions the replay buffer holds (before rounding up to whole blocks of --rollout)."""
    if cfg.exp_replayer == "one_time":  # no retention: room for one iteration's rollouts (whole slots' worth)
        return 2 * cfg.batch_size * cfg.num_batches_per_epoch * cfg.num_policies
    return cfg.replay_buffer_capacity


def replay_device(choice: str, learner: torch.device, obs_bytes: int, data_parallel: bool = False) -> torch.device:
    """Where a replay buffer's observations live (--replay_buffer_device): on the learner's GPU ("learner"; "auto"
    when they take at most half of its free memory), else in host memory. A data-parallel group's buffer is rank 0's
    and its minibatches are broadcast from the host, so it stays there."""
    host = torch.device("cpu")
    if choice == "cpu" or data_parallel:
        return host
    if choice == "learner":
        return learner
    return learner if learner.type == "cuda" and obs_bytes <= torch.cuda.mem_get_info(learner)[0] // 2 else host


class DQNAlgorithm(Algorithm):
    """Stats of an iteration (means over its SGD steps): loss, q_mean, q_target, td_error_abs, grad_norm,
    importance_weight. Per iteration: sgd_steps, replay_size, replay_ratio (replayed / sampled transitions since
    learning started), beta, epsilon_min/max, target_updates, lr, skipped_updates, samples."""

    # Ape-X, as RLlib: the least-exploring third of the agents (rank >= 2/3) report the training return.
    reported_rank = 2.0 / 3.0
    uses_agent_rank = True  # Ape-X: each agent explores with its own epsilon
    whole_batch_on_rank0 = True  # data-parallel: the replay buffer is rank 0's (workers/batch_sources.py)
    # no recurrent state (feed-forward models only) and no policy versions (replay makes no lag correction)
    required_buffers = ("obs", *(k for k in TRAJECTORY_KEYS if k not in ("rnn_states", "policy_version")))

    def __init__(self, cfg: Config, model: torch.nn.Module, device: torch.device):
        super().__init__(cfg, model, device)
        if model.recurrent:
            raise ValueError("--algo=DQN needs a feed-forward model (--use_rnn=False)")
        self.optimizer = make_adam(cfg, model.parameters())
        self.target = copy.deepcopy(model).to(device)
        self.target.requires_grad_(False)
        self.replay: ReplayBuffer | None = None  # built from the first batch (its shapes), or from a checkpoint's
        self.sampled = 0  # valid transitions received
        self.replayed = 0  # transitions trained on (sampled from the buffer), since learning started
        self.sampled_since_start = 0  # ... received since learning started (the replay ratio's denominator)
        self.owed_steps = 0.0  # fractional SGD steps --training_intensity owes
        self.last_target_update = 0  # self.sampled at the last target-network update
        self.target_updates = 0
        self.frame_progress = 0.0  # fraction of --train_for_env_steps (beta annealing)
        # Sampled minibatches reach the device through pinned memory, and new priorities come back when the device
        # gets there (applied before a later sample where they have landed): no SGD step makes the host wait.
        self.staging = PinnedStaging(device)
        self.priority_reads = DeferredReads(device)

    @classmethod
    def check_spaces(cls, cfg: Config, obs_space: object, action_space: object) -> None:
        # before any process starts: a Box action space used to kill the policy workers until the run gave up
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(
                f"--algo=DQN needs a Discrete action space (one Q-value per action); the env's is {action_space}: "
                "train it with --algo=APPO"
            )
        super().check_spaces(cfg, obs_space, action_space)

    # ---- acting (policy workers) -------------------------------------------------------------------------------

    @classmethod
    def act(
        cls,
        cfg: Config,
        model: torch.nn.Module,
        obs: dict[str, Tensor],
        rnn_states: Tensor | None,
        action_mask: Tensor | None,
        deterministic: bool,
        agent_rank: Tensor | None = None,
        sde_eps: Tensor | None = None,
    ) -> ActResult:
        """Greedy (deterministic) or epsilon-greedy: in training with Ape-X's epsilon per agent (agent_rank [N] in
        [0, 1]; without it every agent explores with --apex_epsilon), in an evaluation run with --eval_epsilon."""
        params, values, _ = model.forward_step(obs, None)
        q = masked_q(q_values(params.float(), values.float(), cfg.dueling), action_mask)  # [N, A]
        greedy = q.argmax(dim=-1)  # [N]
        actions = greedy
        if not deterministic:
            N, A = q.shape
            if cfg.evaluation_run:
                eps = torch.full((N,), cfg.eval_epsilon, device=q.device)
            else:
                rank = torch.zeros(N) if agent_rank is None else agent_rank
                eps = apex_epsilon(rank.to(q.device), cfg.apex_epsilon, cfg.apex_epsilon_alpha)  # [N]
            actions = epsilon_greedy(greedy, eps, A, action_mask)
        q_taken = q.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return ActResult(actions, q_taken, q.max(dim=-1).values, None)

    @classmethod
    def values(cls, cfg: Config, model: torch.nn.Module, obs: dict[str, Tensor], rnn_states: Tensor | None) -> Tensor:
        """max_a Q(s, a) [N]: the bootstrap value of a truncated episode's final observation."""
        params, values, _ = model.forward_step(obs, None)
        return masked_q(q_values(params.float(), values.float(), cfg.dueling), obs.get(ACTION_MASK_KEY)).max(-1).values

    # ---- state -------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        state = {
            "optimizer": self.optimizer.state_dict(),
            "target": self.target.state_dict(),
            "counters": {k: getattr(self, k) for k in COUNTERS},
        }
        if self.cfg.save_replay_buffer and self.replay is not None:
            state["replay"] = self.replay.state_dict()
        return state

    @classmethod
    def check_resume(cls, cfg: Config, state: dict) -> list[str]:
        if "target" not in state:
            raise ConfigError("the checkpoint holds no target network: it was not written by --algo=DQN")
        replay = state.get("replay")
        if replay is None:
            return ["the checkpoint holds no replay buffer: it refills to --learning_starts before training"]
        if not cfg.save_replay_buffer:
            return ["--save_replay_buffer=False: the checkpoint's replay buffer is not loaded (it refills)"]
        blocks, T, _ = ReplayBuffer.layout_of(replay)
        if (blocks, T) != (math.ceil(replay_capacity(cfg) / cfg.rollout), cfg.rollout):
            if cfg.exp_replayer == "one_time":  # its size follows the batch: no flag sets it
                now, fix = "the one_time buffer", "the saved --batch_size and --num_batches_per_epoch"
            else:
                now, fix = "--replay_buffer_capacity", f"--replay_buffer_capacity={blocks * T} --rollout={T}"
            raise ConfigError(
                f"the checkpoint's replay buffer holds {blocks * T} transitions in blocks of --rollout={T}; "
                f"{now}={replay_capacity(cfg)} with --rollout={cfg.rollout} does not fit it: resume with {fix}, "
                f"or with --save_replay_buffer=False to drop it"
            )
        return []

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.target.load_state_dict(state["target"])
        for k, v in state.get("counters", {}).items():
            setattr(self, k, v)
        saved = state.get("replay") if self.cfg.save_replay_buffer else None
        if saved is None:  # the replay refills from scratch and waits for --learning_starts again
            self.sampled_since_start = self.replayed = 0
            self.owed_steps = 0.0
            return
        if self.dp.rank != 0:  # a data-parallel group's buffer lives on rank 0
            return
        # Built now, not at the first batch: every checkpoint written from here on holds the buffer again (a save
        # before the first batch, e.g. a Ctrl+C right after the resume, would otherwise replace it with none).
        _, _, obs_shapes = ReplayBuffer.layout_of(saved)
        self.replay = self._make_replay(obs_shapes, tuple(saved["actions"].shape[2:]), saved["actions"].dtype)
        self.replay.load_state_dict(saved)

    def update_learning_rate(self, env_frames: int) -> None:
        for g in self.optimizer.param_groups:
            g["lr"] = learning_rate_at(self.cfg, env_frames)
        self.frame_progress = env_frames / max(self.cfg.train_for_env_steps, 1)

    def update_cfg(self, cfg: Config) -> None:
        super().update_cfg(cfg)
        if self.replay is not None:  # PBT may perturb alpha: new priorities use it from now on
            self.replay.alpha = cfg.prioritized_replay_alpha

    def on_weights_replaced(self) -> None:
        self.optimizer.state.clear()
        self.target.load_state_dict(self.model.state_dict())

    # ---- training ----------------------------------------------------------------------------------------------

    def _make_replay(
        self, obs_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]], action_shape: tuple, action_dtype
    ) -> ReplayBuffer:
        cfg = self.cfg
        stacked = frame_stacked_keys(cfg, obs_shapes)
        obs_bytes = ReplayBuffer.obs_nbytes(replay_capacity(cfg), cfg.rollout, obs_shapes, stacked)
        device = replay_device(cfg.replay_buffer_device, self.device, obs_bytes, data_parallel=self.dp.world > 1)
        self.notes.append(
            f"replay buffer: {replay_capacity(cfg):,} transitions, observations {obs_bytes / 2**30:.2f} GiB in "
            f"{'host memory' if device.type == 'cpu' else device} (--replay_buffer_device={cfg.replay_buffer_device})"
        )
        return ReplayBuffer(
            replay_capacity(cfg),
            cfg.rollout,
            obs_shapes,
            action_shape,
            action_dtype,
            prioritized=cfg.exp_replayer == "prioritized",
            alpha=cfg.prioritized_replay_alpha,
            eps=cfg.prioritized_replay_eps,
            seed=None if cfg.seed is None else cfg.seed * 7919 + 13,
            stacked=stacked,
            device=device,
        )

    def add_rollouts(self, batch: dict[str, Any], policy_id: int | None) -> tuple[Tensor, int]:
        """Compute n-step targets and actor-side priorities of the fresh rollouts and store them. Returns the flat
        replay indices of the stored transitions [M*T] and how many are valid (this policy's active steps)."""
        cfg, T = self.cfg, self.cfg.rollout
        if self.replay is None:
            obs_shapes = {k: (tuple(v.shape[2:]), v.dtype) for k, v in batch["obs"].items()}
            self.replay = self._make_replay(obs_shapes, tuple(batch["actions"].shape[2:]), batch["actions"].dtype)
        valid = batch["active"][:, :T]  # [M, T]
        if policy_id is not None and "policy_id" in batch:
            valid = valid & (batch["policy_id"][:, :T] == policy_id)
        rewards = (batch["rewards"] * cfg.reward_scale).clamp(-cfg.reward_clip, cfg.reward_clip)  # [M, T]
        truncated = batch["truncated"] & cfg.value_bootstrap  # without value bootstrap a truncation is an end
        terminated = batch["dones"] & ~truncated
        targets = nstep_targets(rewards, terminated, truncated, batch["final_values"], cfg.gamma, cfg.n_step)
        prio = initial_priorities(
            targets.returns, targets.discounts, targets.offsets, batch["log_probs"][:, :T], batch["values"]
        )
        if getattr(self.model, "obs_normalizers", None) is not None:  # the target network's follow in `train`
            obs_dev = {k: v[:, :T][valid].to(self.device) for k, v in batch["obs"].items()}
            self.model.update_normalizers(obs_dev)
        idx = self.replay.add(batch["obs"], batch["actions"][:, :T], targets, valid, prio, batch["is_first"])
        keep = valid.reshape(-1).numpy()  # host bookkeeping in numpy: no boolean index for sync counts to mistake
        return torch.from_numpy(idx.numpy()[keep]), int(keep.sum())

    def train(
        self, batch: dict[str, Any] | None, policy_version: int, policy_id: int | None = None
    ) -> tuple[dict[str, float], int]:
        """In a data-parallel group the replay buffer lives on rank 0, which alone gets `batch` (the others get
        None): it samples every minibatch and broadcasts it, each rank trains on its rows of it, and rank 0 updates
        the priorities of the whole minibatch once (from |TD errors| summed into place over the ranks)."""
        cfg = self.cfg
        holds_replay = self.dp.rank == 0
        fresh, new, replay_size = None, 0, 0
        if holds_replay:
            fresh, new = self.add_rollouts(batch, policy_id)
            replay_size = len(self.replay)
        # rank 0's counters and observation statistics: the step counts and target updates below agree on every rank
        counters = {k: getattr(self, k) for k in COUNTERS}
        new, replay_size, counters = self.dp.broadcast_object((new, replay_size, counters))
        for k, v in counters.items():
            setattr(self, k, v)
        self._sync_normalizers()
        sampled_before = self.sampled
        self.sampled += new
        if cfg.exp_replayer == "one_time":  # each fresh transition once, in shuffled minibatches
            self.sampled_since_start += new
            minibatches = None
            if holds_replay:
                perm = fresh[torch.randperm(len(fresh))]
                minibatches = [(perm[i : i + cfg.batch_size], None) for i in range(0, len(perm), cfg.batch_size)]
            num_steps = -(-new // cfg.batch_size)
        else:
            learning = replay_size >= cfg.learning_starts
            if learning:
                self.sampled_since_start += new
                self.owed_steps += cfg.training_intensity * new / cfg.batch_size
            num_steps = int(self.owed_steps)
            self.owed_steps -= num_steps
            minibatches = None
        step_stats = StepStats(self.device)
        beta = annealed_beta(cfg.prioritized_replay_beta, self.frame_progress)
        for i in range(num_steps):
            if self.should_stop():  # the learner must save and exit: keep the steps taken, drop the rest
                break
            sample = None
            if holds_replay:
                # reproducible runs: every read applied before the next sample, not those that happen to be done
                reads = self.priority_reads.drain() if reproducible(cfg) else self.priority_reads.ready()
                self._apply_priorities(reads)
                if minibatches is not None:
                    sample = self.replay.take(*minibatches[i])
                else:
                    sample = self.replay.sample(cfg.batch_size, beta)
            sample = self.dp.broadcast_object(sample)
            self.replayed += len(sample.indices)
            step_stats.add(list(STEP_STATS), *self.sgd_step(sample))
            # target updates every --target_network_update_freq sampled transitions, spread over the iteration
            seen = sampled_before + new * (i + 1) // num_steps
            if seen - self.last_target_update >= cfg.target_network_update_freq:
                self.target.load_state_dict(self.model.state_dict())
                self.last_target_update, self.target_updates = seen, self.target_updates + 1
        if holds_replay:
            self._apply_priorities(self.priority_reads.drain())
        out, applied, _ = self.read_back(step_stats)
        eps = apex_epsilon(np.array([0.0, 1.0]), cfg.apex_epsilon, cfg.apex_epsilon_alpha)
        out.update(
            sgd_steps=applied,
            skipped_updates=self.skipped_updates,
            lr=self.optimizer.param_groups[0]["lr"],
            replay_size=replay_size,
            replay_ratio=self.replayed / max(self.sampled_since_start, 1),
            beta=beta,
            epsilon_max=float(eps[0]),
            epsilon_min=float(eps[1]),
            target_updates=self.target_updates,
            samples=new,
        )
        return out, policy_version + applied

    def sgd_step(self, s) -> tuple[Tensor, Tensor]:
        """One minibatch (a ReplaySample): weighted Huber loss on the n-step double-Q TD error; the priorities
        of the sampled transitions are set to their new |TD error| once they reach the host (`priority_reads`).
        Returns (the step's statistics [K] in STEP_STATS order; applied: bool scalar), device tensors: nothing here
        waits for the device. In a data-parallel group the rank trains on its rows of the minibatch."""
        cfg = self.cfg
        B = len(s.indices)
        lo, hi = self.dp.my_rows(B)
        minibatch = {
            "obs": s.obs,  # {key: [B, *shape]}
            "next_obs": s.next_obs,
            "actions": s.actions,
            "returns": s.returns,
            "discounts": s.discounts,
            "weights": s.weights,
        }
        d = self.staging.to_device(self.dp.rows_of(minibatch, B))  # (this rank's rows [lo, hi) of each)
        obs, next_obs, returns, discounts, weights = (
            d["obs"], d["next_obs"], d["returns"], d["discounts"], d["weights"]
        )  # fmt: skip
        actions = d["actions"].view(hi - lo, -1)[:, :1]  # [b, 1] (Discrete)
        next_mask = next_obs.get(ACTION_MASK_KEY)
        with forward_autocast(self):
            params, values, _ = self.model.forward_step(obs, None)
        q = q_values(params.float(), values.float(), cfg.dueling).gather(-1, actions).squeeze(-1)  # [B]
        # s' goes through the networks without a graph: half the backward work of one pass over [s, s']
        with torch.no_grad(), forward_autocast(self):
            tp, tv, _ = self.target.forward_step(next_obs, None)
            next_online = None
            if cfg.double_q:
                op, ov, _ = self.model.forward_step(next_obs, None)
                next_online = masked_q(q_values(op.float(), ov.float(), cfg.dueling), next_mask)
            next_target = masked_q(q_values(tp.float(), tv.float(), cfg.dueling), next_mask)
            target = double_q_target(returns, discounts, next_target, next_online)  # [B]
        td = q - target
        weighted = weights * F.huber_loss(q, target, reduction="none", delta=cfg.huber_delta)
        td_abs = td.detach().abs()
        prioritized = cfg.exp_replayer == "prioritized"
        loss = self.dp.share_of_mean(weighted, B)  # (this rank's share of the minibatch mean)
        if prioritized:  # the whole minibatch's |TD errors|: each rank's put in place and summed over the ranks
            td_abs = self.dp.place_rows(td_abs.float(), B)
        grad_norm, ok = self.device_step(loss, self.optimizer, extra=td_abs if prioritized else None)
        if prioritized and self.replay is not None:  # [B + 1]: the new |TD errors| and whether it was applied
            self.priority_reads.put(s.indices, torch.cat([td_abs.float(), ok.float().view(1)]))
        step_stats = torch.stack(
            [loss.detach(), q.detach().mean(), target.mean(), td_abs.mean(), weights.mean(), grad_norm]
        )  # [K] in STEP_STATS order
        return step_stats, ok

    def _target_normalizers(self) -> None:
        self.target.load_state_dict(
            {k: v for k, v in self.model.state_dict().items() if "obs_normalizers" in k}, strict=False
        )

    def _sync_normalizers(self) -> None:
        """Rank 0's observation statistics (it saw the batch) on every rank, the target network's too."""
        if getattr(self.model, "obs_normalizers", None) is not None:
            for t in self.model.obs_normalizers.buffers():
                self.dp.broadcast_(t)
            self._target_normalizers()

    def _apply_priorities(self, reads: list) -> None:
        """New |TD errors| of earlier steps, in step order; those of skipped (NaN/inf) steps are dropped."""
        for indices, td_abs_ok in reads:  # host tensors [B + 1]
            if td_abs_ok.numpy()[-1] > 0:
                self.replay.update_priorities(indices, td_abs_ok[:-1])
