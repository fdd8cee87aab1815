"""The algorithm interface: what the learner and the policy workers need from a training algorithm, and nothing
about processes (see docs/architecture.md, "The algorithm interface").

The learner builds one `Algorithm` per policy (`algo/registry.py::make_algorithm`) around its model and, every
iteration, asks it for the learning rate at the current env step count and hands it a batch copied out of shared
memory (only the tensors in `required_buffers`). Policy workers never build one: they call the class's
`act` / `values`, which need only the model.
"""

from __future__ import annotations

import contextlib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
from torch import Tensor

from sample_factory.algo.optim import FusedAdam, Optimizer, fused_adam_available
from sample_factory.algo.ranks import Ranks, SingleRank
from sample_factory.algo.transfer import host_read
from sample_factory.config import Config, ConfigError

# The slot tensors of a trajectory (runtime/shared_buffers.py allocates them; the observation dict "obs" aside): the
# names a batch and `required_buffers` use.
TRAJECTORY_KEYS = (
    "rnn_states",
    "is_first",
    "active",
    "actions",
    "log_probs",
    "values",
    "policy_version",
    "policy_id",
    "rewards",
    "dones",
    "truncated",
    "final_values",
)


class ActResult(NamedTuple):
    """One inference step for N agents."""

    actions: Tensor  # [N, *act_shape] what the env gets (and training reads back)
    log_probs: Tensor  # [N] behaviour log-probability of the action (DQN: Q of the action taken)
    values: Tensor  # [N] value estimate, real (denormalized) scale (DQN: max_a Q)
    new_rnn_states: Tensor | None  # [N, H] core state after this step; None without a recurrent core


def scheduled(value: float, schedule: str, env_frames: int, budget: int) -> float:
    """`value` as `schedule` gives it after env_frames: constant, or linear_decay to 0 at `budget` frames."""
    if schedule == "linear_decay":
        return value * max(0.0, 1.0 - env_frames / budget)
    return value


def kl_adaptive_lr(lr: Tensor, kl: Tensor, target: float, lr_min: float, lr_max: float, factor: float = 1.5) -> Tensor:
    """rl_games' adaptive schedule (--lr_schedule=kl_adaptive) on the device: lr / factor where the KL of the last step
    is above 2 x target, lr * factor where below target / 2, else lr; clamped to [lr_min, lr_max]. lr, kl: scalars."""
    scale = torch.where(kl > 2.0 * target, 1.0 / factor, torch.where(kl < 0.5 * target, factor, 1.0))
    return (lr * scale).clamp(lr_min, lr_max)


def learning_rate_at(cfg: Config, env_frames: int) -> float:
    """--learning_rate, constant or decayed linearly to 0 over --train_for_env_steps (--lr_schedule)."""
    return scheduled(cfg.learning_rate, cfg.lr_schedule, env_frames, cfg.train_for_env_steps)


def exploration_coeff_at(cfg: Config, env_frames: int) -> float:
    """--exploration_loss_coeff, constant or decayed linearly to 0 over --train_for_env_steps
    (--exploration_loss_schedule)."""
    return scheduled(cfg.exploration_loss_coeff, cfg.exploration_loss_schedule, env_frames, cfg.train_for_env_steps)


def check_sde(cfg: Config, action_space: object, algorithm: type | None = None) -> None:
    """ConfigError where --use_sde cannot apply: it shapes the noise of Gaussian actions only, and the policy workers
    hand the matrices to `algorithm.act` as `sde_eps` (a custom algorithm's act may not take them)."""
    if not cfg.use_sde:
        return
    if algorithm is not None:
        params = inspect.signature(algorithm.act).parameters.values()
        if not any(p.name == "sde_eps" or p.kind is p.VAR_KEYWORD for p in params):
            raise ConfigError(
                f"--use_sde: {algorithm.__name__}.act() takes no sde_eps argument (each row's exploration matrix, "
                "as Algorithm.act in sample_factory/algo/base.py)"
            )
    import gymnasium as gym

    if not isinstance(action_space, gym.spaces.Box):
        raise ConfigError(f"--use_sde needs Gaussian actions (a Box action space); the env's are {action_space}")
    if cfg.adaptive_stddev:
        raise ConfigError("--use_sde and --adaptive_stddev both set the std per state: choose one")
    if cfg.sde_sample_freq == 0 or cfg.sde_sample_freq < -1:
        freq = cfg.sde_sample_freq
        raise ConfigError(f"--sde_sample_freq must be -1 (every --rollout steps) or at least 1, not {freq}")


def sde_period(cfg: Config) -> int:
    """How many steps an agent keeps its exploration matrix (--sde_sample_freq, -1: --rollout)."""
    return cfg.rollout if cfg.sde_sample_freq < 0 else cfg.sde_sample_freq


def make_adam(cfg: Config, params: Any, fused: bool = True) -> Optimizer:
    """Adam with --learning_rate, --adam_beta1/2, --adam_eps; by default the fused kernel (one kernel per parameter
    tensor instead of a dozen ops: 1.07x on a CartPole training iteration on CPU, where Adam's per-op dispatch is a
    visible share of a small model's step) in `FusedAdam`, which also spares the learner torch.optim's import of
    torch._dynamo (algo/optim.py). `fused=False`, or parameters the kernel does not cover: torch.optim.Adam's
    for-loop implementation."""
    params = list(params)
    hyper = {"lr": cfg.learning_rate, "betas": (cfg.adam_beta1, cfg.adam_beta2), "eps": cfg.adam_eps}
    if fused and fused_adam_available(params):
        return FusedAdam(params, **hyper)
    return torch.optim.Adam(params, **hyper, fused=False)


def reduced_precision_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The reduced-precision dtype for --learner_precision (autocast) or --inference_precision on `device`, or None
    for plain fp32."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if device.type == "cuda":
        native = torch.cuda.is_bf16_supported()
    else:
        native = device.type == "cpu" and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return torch.bfloat16 if native else None


def forward_autocast(algo: Algorithm) -> contextlib.AbstractContextManager:
    """Context for the learner's forward pass: autocast to algo.autocast_dtype, or nothing."""
    if algo.autocast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(algo.device.type, dtype=algo.autocast_dtype)


class StepStats:
    """An iteration's statistics of its applied SGD steps, summed on the training device: nothing goes to the host
    until `Algorithm.read_back` reads them at the end of the iteration, together with the skip counters."""

    def __init__(self, device: torch.device) -> None:
        self.names: list[str] = []  # of the statistics, in order
        self.sums: Tensor | None = None  # [K] float64 (None: no step yet)
        self.applied = torch.zeros((), dtype=torch.int64, device=device)  # steps applied

    def add(self, names: list[str], values: Tensor, applied: Tensor) -> None:
        """One SGD step's statistics values [K], named `names`, and whether it was applied (a bool scalar): a skipped
        step adds zeros, so its NaN never reaches the sums."""
        step = torch.where(applied, values.double(), 0.0)
        self.names, self.sums = names, step if self.sums is None else self.sums + step
        self.applied = self.applied + applied

    def average(self, ranks: Ranks) -> None:
        """The sums as the ranks' mean (a data-parallel group: each rank summed its own share's statistics)."""
        if self.sums is not None:
            self.sums = ranks.mean(self.sums)


class Algorithm(ABC):
    """Trains one policy's model in place from batches of trajectories.

    Batches are dicts as produced by `TrajectoryBuffers.gather`: CPU tensors `[M, T(+1), ...]` named like the slot
    tensors, "obs" a dict of them, restricted to `required_buffers`. They are private copies, so an algorithm may
    keep them (e.g. in a replay buffer).
    """

    # Slot tensors train() reads ("obs" for the observation dict); the learner copies only these out.
    required_buffers: ClassVar[tuple[str, ...]]
    # Agents whose exploration rank (i / (num agents - 1)) is below this report their episodes' returns only as the
    # episode statistic exploring_return, not as the training return; None: every agent reports it.
    reported_rank: ClassVar[float | None] = None
    # Whether `act` reads agent_rank: policy workers compute the ranks only for algorithms that do.
    uses_agent_rank: ClassVar[bool] = False
    # [max lag + 1] the last iteration's trained steps per policy lag, for the run's distribution (policy_lag.json):
    # an algorithm that measures lag sets it in `train`; the learner reports and clears it
    lag_counts: np.ndarray | None = None

    def __init__(self, cfg: Config, model: torch.nn.Module, device: torch.device):
        self.cfg, self.model, self.device = cfg, model, device
        self.autocast_dtype = reduced_precision_dtype(cfg.learner_precision, device)  # None: plain fp32
        self.skipped_updates = 0  # SGD steps skipped for a NaN/inf loss or gradient, in total (a reported stat)
        self.consecutive_skipped = 0  # ... in a row: the learner stops the run above --max_nonfinite_updates
        # The same two counts where they are kept, on the training device: read back once per iteration.
        self._skip_counts = torch.zeros(2, dtype=torch.int64, device=device)
        self.stop_check: Callable[[], bool] | None = None  # set by the learner: has it been asked to stop?
        # Set by `train`: the last iteration was cut by a stop before it used its batch at all (no SGD step, nothing
        # kept), so the learner does not count its samples as trained env frames.
        self.iteration_unused = False
        # lines for the run's log (the learner reports and clears them after each `train`)
        self.notes: list[str] = []
        # the learners that train this policy: one (identities), or set by the learner of a --learners_per_policy > 1
        # group to this rank's collectives (algo/data_parallel.py)
        self.dp: Ranks = SingleRank()
        # Listed once: model.parameters() recurses through the modules, and clip_grad_norm_ did so three times a
        # step (0.3 of a CartPole minibatch's 2.5 ms on CPU). .to(device) and weight loads keep these objects.
        self._params: list[torch.nn.Parameter] = list(model.parameters())

    def should_stop(self) -> bool:
        """Whether the learner has been asked to stop. `train` asks between SGD steps and, if so, returns early:
        the steps taken so far are kept (and counted in the version), the rest of the iteration is dropped, and
        the learner saves its final checkpoint in time however long a whole iteration would take. Cheap. In a
        data-parallel group rank 0 decides for every rank (a broadcast), so that all leave at the same step."""
        return self.dp.agree(self.stop_check is not None and self.stop_check())

    @classmethod
    def check_spaces(cls, cfg: Config, obs_space: object, action_space: object) -> None:
        """Called by the runner once the env's spaces are known, before anything starts: raise ConfigError for
        options this algorithm cannot apply to them (default: the model's, --use_sde; overrides call this too)."""
        check_sde(cfg, action_space, cls)

    @classmethod
    def check_resume(cls, cfg: Config, state: dict) -> list[str]:
        """Called by the runner with a checkpoint's "algo" state before anything starts: raise ConfigError (one line)
        when this run's flags cannot continue from it; returns notes to log (default: none)."""
        return []

    @abstractmethod
    def train(
        self, batch: dict[str, Any] | None, policy_version: int, policy_id: int | None = None
    ) -> tuple[dict[str, float], int]:
        """One iteration on `batch`; steps another policy acted on (policy_id differs) are not trained on. None: a
        rank of a data-parallel group with no share of the iteration (workers/batch_sources.py).
        Returns (stats, new policy version): the version is what the learner publishes with the weights and what
        samples acted with them carry, so the algorithm decides how versions advance. Should return early once
        `should_stop()` is true (checked between SGD steps)."""

    @abstractmethod
    def update_learning_rate(self, env_frames: int) -> None:
        """Called before every `train` with the policy's env frames so far (agent steps x --frames_per_env_step;
        learning-rate schedules)."""

    @abstractmethod
    def state_dict(self) -> dict:
        """What the checkpoint stores under "algo" (optimizer state); the model is saved by the learner."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned (on resume)."""

    def update_cfg(self, cfg: Config) -> None:
        """PBT changed hyperparameters: `cfg` is the learner's own copy with them applied; read it from now on."""
        self.cfg = cfg

    @abstractmethod
    def on_weights_replaced(self) -> None:
        """PBT replaced the model's weights with another policy's: drop state that belongs to the old weights."""

    def device_step(
        self, loss: Tensor, optimizer: Optimizer, has_data: Tensor | None = None, extra: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Backward and optimizer step, with gradient clipping at --max_grad_norm, decided on the device: nothing is
        read back to the host, so a GPU's queue keeps running (training loops call this between their one read-back
        per iteration). A NaN/inf loss or gradient norm is never applied; neither is a step whose minibatch has no
        sample to learn from (has_data, a bool scalar, False), which would still move the weights by Adam's momentum.
        Returns (gradient norm before clipping, applied: bool scalar), both device tensors. Skips for NaN/inf are
        counted on the device; `read_skip_counts` brings the counts to the host.
        In a data-parallel group each rank's loss is its share of the global minibatch's loss: gradients, the loss
        and `extra` (in place) are summed over the ranks (`dp.reduce_grads`) before clipping and the guard, so every
        rank applies the same step; has_data must then be the same on every rank too."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # torch.nn.utils.clip_grad_norm_'s arithmetic on CPU and CUDA tensors of one device, without its grouping
        # by device and dtype (another 0.2 ms a step there).
        grads = [p.grad for p in self._params if p.grad is not None]
        loss = self.dp.reduce_grads(grads, loss, extra)
        norms = torch._foreach_norm(grads) if grads else [loss.new_zeros(())]
        grad_norm = torch.linalg.vector_norm(torch.stack(norms))  # all gradients as one vector
        if self.cfg.max_grad_norm > 0 and grads:
            torch._foreach_mul_(grads, torch.clamp(self.cfg.max_grad_norm / (grad_norm + 1e-6), max=1.0))
        finite = torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)
        nonfinite = ~finite if has_data is None else has_data & ~finite
        applied = finite if has_data is None else finite & has_data
        counts = self._skip_counts  # [total, consecutive]; a minibatch without data leaves the run of skips as is
        consecutive = (counts[1] + 1) * nonfinite
        if has_data is not None:
            consecutive = torch.where(has_data, consecutive, counts[1])
        torch.stack([counts[0] + nonfinite, consecutive], out=counts)
        if isinstance(optimizer, FusedAdam):
            optimizer.step(found_inf=(~applied).float())
        elif bool(applied):  # torch.optim's unfused Adam has no on-device skip: one read-back (not the default path)
            optimizer.step()
        return grad_norm, applied

    def read_skip_counts(self, counts: list[int] | None = None) -> None:
        """Set `skipped_updates` / `consecutive_skipped` from the device counters (a read-back), or from `counts`
        ([total, consecutive]) that the caller read back together with its other statistics."""
        self.skipped_updates, self.consecutive_skipped = counts if counts is not None else host_read(self._skip_counts)

    def read_back(self, stats: StepStats, *extra: Tensor) -> tuple[dict[str, float], int, list[float]]:
        """The iteration's one read-back: each statistic's mean over the applied steps, the number of applied steps,
        and the scalars `extra` (on any device); sets the skip counts too."""
        tail = torch.cat([*(x.to(self.device).view(1) for x in extra), stats.applied.view(1), self._skip_counts])
        tail = tail.double()  # [E extra, applied, skipped total, skipped in a row]
        host = host_read(tail if stats.sums is None else torch.cat([stats.sums, tail]))
        k = len(host) - len(tail)
        applied = int(host[-3])
        self.read_skip_counts([int(host[-2]), int(host[-1])])
        means = {name: v / max(applied, 1) for name, v in zip(stats.names, host[:k], strict=True)}
        return means, applied, host[k:-3]

    def guarded_step(self, loss: Tensor, optimizer: Optimizer) -> Tensor | None:
        """`device_step` for algorithms that want a plain answer after every step (one read-back per step):
        the gradient norm (before clipping), or None when the step was skipped (NaN/inf, counted)."""
        grad_norm, applied = self.device_step(loss, optimizer)
        counts = host_read(torch.cat([applied.long().view(1), self._skip_counts]))
        self.read_skip_counts(counts[1:])
        return grad_norm if counts[0] else None

    # Acting: called by policy workers with the class (no optimizer, no instance). The default samples the
    # actor-critic model's action distribution; an algorithm with another acting rule (epsilon-greedy) overrides.

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
        """obs {key: [N, *shape]}, rnn_states [N, H] (already reset where an episode starts), action_mask [N, A]
        (nonzero = allowed) -> the actions to take, with what training needs about them. agent_rank [N]: each
        row's agent (env column) as a fraction i / (num agents - 1) in [0, 1], for per-agent exploration (Ape-X's
        epsilons), passed only where the class sets `uses_agent_rank`; the actor-critic sampling here ignores it.
        sde_eps [N, L, D]: each row's exploration matrix with --use_sde (algo/sde.py); without it such a model
        samples its per-state Gaussian step by step."""
        if sde_eps is not None and not deterministic and getattr(model, "use_sde", False):
            feats, new_rnn_states = model.features(obs, rnn_states)
            params, values = model.heads(feats)
            dist = model.distribution(params, action_mask)
            actions = dist.mode() + model.sde_noise(feats[0], sde_eps).to(dist.mean.dtype)
            return ActResult(actions, dist.log_prob(actions), model.denormalize_values(values), new_rnn_states)
        params, values, new_rnn_states = model.forward_step(obs, rnn_states)
        dist = model.distribution(params, action_mask)
        actions = dist.mode() if deterministic else dist.sample()
        return ActResult(actions, dist.log_prob(actions), model.denormalize_values(values), new_rnn_states)

    @classmethod
    def values(cls, cfg: Config, model: torch.nn.Module, obs: dict[str, Tensor], rnn_states: Tensor | None) -> Tensor:
        """[N] real-scale value estimates of obs {key: [N, *shape]} (bootstrap values of truncated episodes)."""
        _, values, _ = model.forward_step(obs, rnn_states)
        return model.denormalize_values(values)
