"""Population-based training (PBT): the pure decision logic, no process code.

The runner owns one `PopulationBasedTraining` and calls `step(policy_id, env_steps, objectives)` whenever it has
fresh per-policy statistics. Once a policy has advanced `--pbt_period_env_steps` since its last PBT step (and is
past `--pbt_start_mutation`), it gets one decision:

- REPLACEMENT: the policy ranks among the worst `--pbt_replace_fraction` of the population and a randomly chosen
  policy among the best fraction beats it by more than both reward gaps. The target takes over the source's
  weights (the caller copies them) and the source's hyperparameters, which are then mutated.
- MUTATION otherwise: each hyperparameter is perturbed with probability `--pbt_mutation_rate`.

A caller that passes the policy versions of the weights (SGD steps taken, plus one per replacement) gets two more
rules. A policy at version 0 still has its initial random weights: its objective (if any) is that of a random policy,
so it takes no part in the ranking and is never a source. And a due PBT step waits, without restarting the period,
until the policy has trained since its last one (`skipped` says why it waited): otherwise its objective would judge
weights its current hyperparameters never trained.

Hyperparameters live in one flat `dict[str, float]`: the cfg names of the learner options
(`MUTABLE_HYPERPARAMS`, or `DQN_MUTABLE_HYPERPARAMS` with --algo=DQN, plus `gamma` with `--pbt_optimize_gamma`)
and, for envs that expose reward-shaping coefficients, `reward_shaping/<name>`. `apply_hyperparams` writes such
a dict onto a learner's cfg copy.
A perturbation multiplies or divides by a factor drawn from [--pbt_perturb_min, --pbt_perturb_max] (gamma: its
horizon term 1 - gamma is perturbed), then the value is clipped into its bounds, so values never leave them.
A value that starts at 0 (or <= 0 for options where that means "disabled", like --ppo_clip_value) never changes:
PBT does not switch features on or off.

Per-policy state (hyperparameters, env steps of the last PBT step, event history) is saved as
`<exp_dir>/pbt_p<id>.json` by `save_pbt_state` and read back by `load_pbt_state`.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sample_factory.config import Config, ConfigError

TRUE_OBJECTIVE = "true_objective"  # --pbt_target_objective default: the mean episode reward
REWARD_SHAPING_PREFIX = "reward_shaping/"
SUMMARY_PREFIX = "pbt/"
GAMMA_BOUNDS = (0.9, 0.9999)
# A reward-shaping coefficient stays within this factor of its starting value (same sign, finite).
REWARD_SHAPING_RANGE = 100.0

# Learner options PBT may perturb, with their bounds. The bounds are widened to contain the starting (cfg)
# value, so policy 0 can always keep the user's values.
MUTABLE_HYPERPARAMS: dict[str, tuple[float, float]] = {
    "learning_rate": (1e-6, 1e-2),
    "exploration_loss_coeff": (1e-6, 0.1),
    "ppo_clip_ratio": (0.02, 0.5),
    "ppo_clip_value": (0.01, 10.0),
    "value_loss_coeff": (0.05, 5.0),
    "max_grad_norm": (0.05, 50.0),
    "kl_loss_coeff": (1e-4, 10.0),
}
# --algo=DQN perturbs its own set (the PPO coefficients mean nothing to it).
DQN_MUTABLE_HYPERPARAMS: dict[str, tuple[float, float]] = {
    "learning_rate": (1e-6, 1e-2),
    "max_grad_norm": (0.05, 50.0),
    "training_intensity": (0.5, 64.0),
    "target_network_update_freq": (50.0, 1e6),
    "huber_delta": (0.1, 10.0),
    "prioritized_replay_alpha": (0.1, 1.0),
}
_ALL_BOUNDS = {**MUTABLE_HYPERPARAMS, **DQN_MUTABLE_HYPERPARAMS}


def mutable_hyperparams(cfg: Config) -> dict[str, tuple[float, float]]:
    """The learner options PBT perturbs for this run's --algo, with their bounds."""
    return DQN_MUTABLE_HYPERPARAMS if cfg.algo == "DQN" else MUTABLE_HYPERPARAMS


def validate_pbt_cfg(cfg: Config) -> None:
    """Raises ConfigError for PBT flag values the algorithm cannot work with."""
    if cfg.pbt_period_env_steps < 1:
        raise ConfigError(f"--pbt_period_env_steps must be >= 1, got {cfg.pbt_period_env_steps}")
    if not 0.0 <= cfg.pbt_replace_fraction <= 1.0:
        raise ConfigError(f"--pbt_replace_fraction must be in [0, 1], got {cfg.pbt_replace_fraction}")
    if not 0.0 <= cfg.pbt_mutation_rate <= 1.0:
        raise ConfigError(f"--pbt_mutation_rate must be in [0, 1], got {cfg.pbt_mutation_rate}")
    if cfg.pbt_replace_reward_gap < 0 or cfg.pbt_replace_reward_gap_absolute < 0:
        raise ConfigError("--pbt_replace_reward_gap and --pbt_replace_reward_gap_absolute must be >= 0")
    if not 1.0 <= cfg.pbt_perturb_min <= cfg.pbt_perturb_max or not math.isfinite(cfg.pbt_perturb_max):
        raise ConfigError(
            f"need 1 <= --pbt_perturb_min <= --pbt_perturb_max (finite), got {cfg.pbt_perturb_min} and "
            f"{cfg.pbt_perturb_max}"
        )


def objective_from_stats(cfg: Config, mean_episode_reward: float, policy_stats: Mapping[str, float]) -> float:
    """The value PBT ranks a policy by; NaN when it is not known yet (no finished episodes, stat not reported)."""
    if cfg.pbt_target_objective == TRUE_OBJECTIVE:
        value = mean_episode_reward
    else:
        value = policy_stats.get(cfg.pbt_target_objective, math.nan)
    return float(value) if value is not None else math.nan


def cfg_hyperparams(cfg: Config, reward_shaping: Mapping[str, float] | None = None) -> dict[str, float]:
    """The hyperparameters PBT manages, with their cfg values (what policy 0 starts from)."""
    hp = {name: float(getattr(cfg, name)) for name in mutable_hyperparams(cfg)}
    if cfg.pbt_optimize_gamma:
        hp["gamma"] = float(cfg.gamma)
    for name, value in (reward_shaping or {}).items():
        hp[REWARD_SHAPING_PREFIX + name] = float(value)
    return hp


def apply_hyperparams(cfg: Config, hyperparams: Mapping[str, float]) -> None:
    """Set hyperparameters on a learner's own cfg copy; the algorithm reads them from there every iteration.

    Reward-shaping coefficients go into the dict attribute `cfg.reward_shaping` (name -> coefficient), which is
    replaced, not mutated in place, so a cfg shared by mistake with another learner is not changed behind its back.
    """
    shaping = dict(cfg.reward_shaping or {})
    for key, value in hyperparams.items():
        if key.startswith(REWARD_SHAPING_PREFIX):
            shaping[key[len(REWARD_SHAPING_PREFIX) :]] = float(value)
        elif key in _ALL_BOUNDS or key == "gamma":
            setattr(cfg, key, float(value))
        else:
            raise KeyError(f"not a PBT hyperparameter: {key!r}")
    if shaping:
        cfg.reward_shaping = shaping


@dataclass
class PbtDecision:
    """What the runner must do for `target`: with kind "replacement", copy the weights of `source` into it;
    in both cases apply `hyperparams` (the target's complete new set). `changes` maps name -> {"old", "new"}."""

    kind: str  # "mutation" or "replacement"
    target: int
    source: int | None
    hyperparams: dict[str, float]
    changes: dict[str, dict[str, float]]
    untrained: list[int] = field(default_factory=list)  # known objectives left out of the ranking: version 0


@dataclass
class PolicyPbtState:
    policy_id: int
    hyperparams: dict[str, float]
    last_pbt_env_steps: int = 0
    # Events: {"env_steps", "kind", "source", "changes", "objectives"}; objectives keyed by str(policy id),
    # unknown ones as None, so the JSON round trip is exact.
    history: list[dict[str, Any]] = field(default_factory=list)
    # The policy version of its weights right after its last PBT step (a replacement adds one), for callers that
    # pass versions: its next step waits until the version has moved past it.
    last_pbt_policy_version: int = 0

    def to_json(self) -> str:
        d = {
            "policy_id": self.policy_id,
            "hyperparams": self.hyperparams,
            "last_pbt_env_steps": self.last_pbt_env_steps,
            "last_pbt_policy_version": self.last_pbt_policy_version,
            "history": self.history,
        }
        return json.dumps(d, indent=1, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> PolicyPbtState:
        d = json.loads(text)
        return cls(
            policy_id=int(d["policy_id"]),
            hyperparams={k: float(v) for k, v in d["hyperparams"].items()},
            last_pbt_env_steps=int(d["last_pbt_env_steps"]),
            history=list(d["history"]),
            last_pbt_policy_version=int(d.get("last_pbt_policy_version", 0)),  # absent in older files
        )


def pbt_state_path(exp_dir: str | Path, policy_id: int) -> Path:
    return Path(exp_dir) / f"pbt_p{policy_id}.json"


def save_pbt_state(exp_dir: str | Path, states: Sequence[PolicyPbtState]) -> None:
    """Write one file per policy; each is replaced atomically, so a crash leaves the old or the new file."""
    exp_dir = Path(exp_dir)
    exp_dir.mkdir(parents=True, exist_ok=True)
    for state in states:
        path = pbt_state_path(exp_dir, state.policy_id)
        fd, tmp = tempfile.mkstemp(dir=exp_dir, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(state.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def load_pbt_state(exp_dir: str | Path, num_policies: int, cfg: Config) -> list[PolicyPbtState | None]:
    """The saved state of each policy, None where there is no file (a fresh run gives all None).

    The learner options are reconciled with the current cfg: ones missing from the file take the cfg value, and
    gamma is dropped without --pbt_optimize_gamma (the learner then keeps cfg.gamma). Reward-shaping entries are
    kept as saved; `PopulationBasedTraining(states=...)` reconciles them with the env's coefficients.
    """
    managed = cfg_hyperparams(cfg)
    result: list[PolicyPbtState | None] = []
    for p in range(num_policies):
        path = pbt_state_path(exp_dir, p)
        if not path.exists():
            result.append(None)
            continue
        state = PolicyPbtState.from_json(path.read_text())
        hp = {k: v for k, v in state.hyperparams.items() if k in managed or k.startswith(REWARD_SHAPING_PREFIX)}
        for k, v in managed.items():
            hp.setdefault(k, v)
        state.hyperparams = hp
        result.append(state)
    return result


def _objectives_record(objectives: Mapping[int, float], num_policies: int) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for p in range(num_policies):
        v = objectives.get(p, math.nan)
        out[str(p)] = float(v) if v is not None and math.isfinite(v) else None
    return out


class PopulationBasedTraining:
    """Decisions for a population of `num_policies` policies; see the module docstring.

    `rng` makes the decisions reproducible (default: seeded from cfg.seed, random when that is None).
    `reward_shaping` holds the env's initial reward-shaping coefficients (name -> value), if it has any.
    `states` (from `load_pbt_state`) resumes policies; None entries start fresh.
    """

    def __init__(
        self,
        cfg: Config,
        num_policies: int,
        rng: np.random.Generator | None = None,
        reward_shaping: Mapping[str, float] | None = None,
        states: Sequence[PolicyPbtState | None] | None = None,
    ):
        validate_pbt_cfg(cfg)
        bad = [k for k, v in (reward_shaping or {}).items() if not math.isfinite(v)]
        if bad:
            raise ValueError(f"reward-shaping coefficients must be finite: {bad}")
        self.cfg = cfg
        self.num_policies = num_policies
        self.rng = rng if rng is not None else np.random.default_rng(cfg.seed)
        self.period = int(cfg.pbt_period_env_steps)
        self.start_mutation = int(cfg.pbt_start_mutation)
        base = cfg_hyperparams(cfg, reward_shaping)
        self.bounds = {k: self._bounds_for(k, v) for k, v in base.items()}

        # Drawn for every policy (even resumed ones) so the random stream does not depend on what was resumed.
        self._initial = [dict(base)] + [self._perturb_all(base) for _ in range(1, num_policies)]
        self.states = [PolicyPbtState(p, dict(self._initial[p])) for p in range(num_policies)]
        # policy id -> why its PBT step, due at the last `step` call for it, waits (see `step`)
        self.skipped: dict[int, str] = {}
        for p, saved in enumerate(states or []):
            if saved is not None and p < num_policies:
                self.states[p] = self._adopt(saved, base)

    @staticmethod
    def _bounds_for(name: str, value: float) -> tuple[float, float]:
        if name.startswith(REWARD_SHAPING_PREFIX):
            if value == 0.0:
                return value, value
            a, b = value / REWARD_SHAPING_RANGE, value * REWARD_SHAPING_RANGE
            return min(a, b), max(a, b)
        lo, hi = GAMMA_BOUNDS if name == "gamma" else _ALL_BOUNDS[name]
        if name != "gamma" and value <= 0.0:
            return value, value  # 0 / negative means "off" for these options: keep it off
        return min(lo, value), max(hi, value)

    def _adopt(self, saved: PolicyPbtState, base: Mapping[str, float]) -> PolicyPbtState:
        """A resumed state restricted to the hyperparameters managed now, each clipped into its bounds."""
        hp = {k: self._clip(k, saved.hyperparams.get(k, v)) for k, v in base.items()}
        return PolicyPbtState(
            saved.policy_id, hp, saved.last_pbt_env_steps, list(saved.history), saved.last_pbt_policy_version
        )

    def _clip(self, name: str, value: float) -> float:
        lo, hi = self.bounds[name]
        return float(min(max(value, lo), hi))

    def _perturb(self, name: str, value: float) -> float:
        factor = float(self.rng.uniform(self.cfg.pbt_perturb_min, self.cfg.pbt_perturb_max))
        if self.rng.random() < 0.5:
            factor = 1.0 / factor
        if name == "gamma":
            # Perturbing 1 - gamma (the inverse horizon) moves gamma in steps that matter near 1.
            return self._clip(name, 1.0 - (1.0 - value) * factor)
        return self._clip(name, value * factor)

    def _perturb_all(self, hp: Mapping[str, float]) -> dict[str, float]:
        return {k: self._perturb(k, v) for k, v in hp.items()}

    def _mutate(self, hp: Mapping[str, float]) -> dict[str, float]:
        out = dict(hp)
        for k, v in hp.items():
            if self.rng.random() < self.cfg.pbt_mutation_rate:
                out[k] = self._perturb(k, v)
        return out

    def initial_hyperparams(self, policy_id: int) -> dict[str, float]:
        """Starting values: policy 0 keeps the cfg values; every other policy starts with each hyperparameter
        perturbed once (random direction and magnitude) so the population is diverse from the first step."""
        return dict(self._initial[policy_id])

    def hyperparams(self, policy_id: int) -> dict[str, float]:
        """Current values (after resume and decisions): what the learner of `policy_id` should train with."""
        return dict(self.states[policy_id].hyperparams)

    def summaries(self, policy_id: int) -> dict[str, float]:
        return {SUMMARY_PREFIX + k: v for k, v in self.states[policy_id].hyperparams.items()}

    def _replacement_source(self, policy_id: int, objectives: Mapping[int, float], untrained: set[int]) -> int | None:
        """A better policy to copy from, or None. Unknown (non-finite) objectives and `untrained` policies take no
        part in the ranking."""
        known = {p: float(v) for p, v in objectives.items() if v is not None and math.isfinite(v)}
        known = {p: v for p, v in known.items() if 0 <= p < self.num_policies and p not in untrained}
        if policy_id not in known:
            return None
        ranked = sorted(known, key=lambda p: (known[p], p))
        # Rounded up, but worst and best never overlap, so a policy cannot be its own source.
        k = min(math.ceil(self.cfg.pbt_replace_fraction * len(ranked) - 1e-9), len(ranked) // 2)
        if k < 1 or policy_id not in ranked[:k]:
            return None
        source = int(ranked[-k:][int(self.rng.integers(k))])
        gap = known[source] - known[policy_id]
        # Multiplied, never divided, so a source objective of 0 is safe (the absolute gap then decides).
        needed_relative = self.cfg.pbt_replace_reward_gap * abs(known[source])
        if gap > needed_relative and gap > self.cfg.pbt_replace_reward_gap_absolute:
            return source
        return None

    def step(
        self,
        policy_id: int,
        env_steps: int,
        objectives: Mapping[int, float],
        versions: Mapping[int, int] | None = None,
    ) -> list[PbtDecision]:
        """Call with the env steps of `policy_id` and the latest objective of every policy (NaN: unknown), and where
        the caller knows them, the policy version of every policy's current weights (missing: 0).
        Returns the decisions taken (at most one, for `policy_id`); the internal state already reflects them.
        An empty list with `policy_id` in `skipped`: the step was due but waits for the policy to train."""
        state = self.states[policy_id]
        self.skipped.pop(policy_id, None)
        if env_steps - state.last_pbt_env_steps < self.period:
            return []
        if versions is not None:
            version = int(versions.get(policy_id, 0))
            if version <= state.last_pbt_policy_version:
                self.skipped[policy_id] = (
                    "its learner has not trained yet (policy version 0)"
                    if version == 0
                    else f"its learner has not trained since its last PBT step (policy version {version})"
                )
                return []
            state.last_pbt_policy_version = version
        state.last_pbt_env_steps = int(env_steps)
        if env_steps < self.start_mutation:
            return []  # the period restarts, so the first PBT step comes one period after start_mutation at most

        untrained = set() if versions is None else {p for p in range(self.num_policies) if versions.get(p, 0) <= 0}
        source = self._replacement_source(policy_id, objectives, untrained)
        old = state.hyperparams
        if source is None:
            kind, new = "mutation", self._mutate(old)
        else:
            kind, new = "replacement", self._mutate(self.states[source].hyperparams)
            state.last_pbt_policy_version += 1  # both runners count the loaded weights as one more version
        changes = {k: {"old": old[k], "new": v} for k, v in new.items() if v != old[k]}
        state.hyperparams = new
        record = _objectives_record(objectives, self.num_policies)
        left_out = sorted(p for p in untrained if record[str(p)] is not None)
        event: dict[str, Any] = {
            "env_steps": int(env_steps),
            "kind": kind,
            "source": source,
            "changes": changes,
            "objectives": record,
        }
        if left_out:
            event["untrained"] = left_out
        state.history.append(event)
        return [PbtDecision(kind, policy_id, source, dict(new), {k: dict(c) for k, c in changes.items()}, left_out)]
