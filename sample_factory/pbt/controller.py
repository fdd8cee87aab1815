"""Population-based training in the running system: the runner feeds each learner's training reports to the pure
PBT logic (pbt/population.py) and sends the decisions to the learners (PBT_UPDATE: new hyperparameters, and for a
replacement the policy whose published weights the target loads). PBT state is written as
<experiment>/pbt_p<id>.json after every decision and at the end, restored on resume, and logged to TensorBoard
(pbt/*).

The runner passes the published weights (what a replacement loads): with their policy versions, a policy whose
learner has not trained yet (version 0, its initial random weights) is not ranked, so it is never a replacement's
source."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from sample_factory.config import Config
from sample_factory.experiment.progress import ProgressTracker
from sample_factory.experiment.summaries import SummaryWriters
from sample_factory.pbt.population import (
    REWARD_SHAPING_PREFIX,
    PopulationBasedTraining,
    load_pbt_state,
    objective_from_stats,
    save_pbt_state,
)
from sample_factory.runtime.messages import Channels, PbtUpdate, SetRewardShaping
from sample_factory.runtime.shared_buffers import SharedWeights


class PbtController:
    def __init__(
        self,
        cfg: Config,
        exp_dir: Path,
        channels: Channels,
        log: Callable[[str], None],
        reward_shaping: dict[str, float] | None = None,
        weights: Sequence[SharedWeights] | None = None,
    ):
        self.cfg, self.exp_dir, self.channels, self.log = cfg, exp_dir, channels, log
        self.weights = weights
        self.told_skip: dict[int, str | None] = {}  # the waiting reason logged last: once, not at every report
        states = load_pbt_state(exp_dir, cfg.num_policies, cfg)
        self.pbt = PopulationBasedTraining(cfg, cfg.num_policies, reward_shaping=reward_shaping, states=states)
        save_pbt_state(exp_dir, self.pbt.states)
        self.shaped = bool(reward_shaping)
        for p in range(cfg.num_policies):  # queued before the actors start: their envs begin with these
            self._send_reward_shaping(p, self.pbt.hyperparams(p))

    def _send_reward_shaping(self, policy_id: int, hyperparams: dict[str, float]) -> None:
        """The env-side hyperparameters go to every actor worker (any of them may run envs of this policy)."""
        if not self.shaped:
            return
        shaping = {
            k[len(REWARD_SHAPING_PREFIX) :]: v for k, v in hyperparams.items() if k.startswith(REWARD_SHAPING_PREFIX)
        }
        for actor in self.channels.actor:
            actor.put(SetRewardShaping.wire(policy_id, shaping))

    def hyperparams(self, policy_id: int) -> dict[str, float]:
        """What learner `policy_id` starts with (the saved values on resume)."""
        return self.pbt.hyperparams(policy_id)

    def on_train_report(self, policy_id: int, stats: dict, progress: ProgressTracker) -> list[dict]:
        """Feed one training report to PBT; returns the decisions sent to learners (as dicts, for user hooks)."""
        # A reward mean over a few episodes (early, or right after a resume: windows are not saved) is not
        # compared: such a policy counts as unknown, like one without episodes.
        enough = min(10, self.cfg.stats_avg)
        objectives = {
            p: objective_from_stats(
                self.cfg,
                progress.reward_mean(p) if len(progress.episodes[p]) >= enough else math.nan,
                progress.train_stats[p],
            )
            for p in range(self.cfg.num_policies)
        }
        env_steps = int(stats.get("env_steps", 0))
        versions = {p: w.version for p, w in enumerate(self.weights)} if self.weights is not None else None
        decisions = self.pbt.step(policy_id, env_steps, objectives, versions)
        if (why := self.pbt.skipped.get(policy_id)) != self.told_skip.get(policy_id):
            if why is not None:
                self.log(f"PBT: policy {policy_id} step skipped at {env_steps} env steps: {why}")
            self.told_skip[policy_id] = why
        sent = []
        for d in decisions:
            if d.source is None and not d.changes:
                continue  # a mutation that happened to change nothing
            sent.append({**dataclasses.asdict(d), "env_steps": env_steps})
            self.channels.learner[d.target].put(PbtUpdate.wire(d.hyperparams, d.source))
            if any(k.startswith(REWARD_SHAPING_PREFIX) for k in d.changes):
                self._send_reward_shaping(d.target, d.hyperparams)
            changed = ", ".join(f"{k} {v['old']:.4g}->{v['new']:.4g}" for k, v in d.changes.items()) or "no change"
            origin = f" from policy {d.source}" if d.source is not None else ""
            unranked = f" (not ranked, never trained: policy {', '.join(map(str, d.untrained))})" if d.untrained else ""
            self.log(f"PBT: policy {d.target} {d.kind}{origin}: {changed}{unranked}")
        if decisions:
            save_pbt_state(self.exp_dir, self.pbt.states)
        return sent

    def write_summaries(self, summaries: SummaryWriters, progress: ProgressTracker) -> None:
        for p in range(self.cfg.num_policies):
            for tag, value in self.pbt.summaries(p).items():
                summaries.add_scalar(p, tag, value, progress.env_frames[p])

    def close(self) -> None:
        save_pbt_state(self.exp_dir, self.pbt.states)
