"""What the runner knows about a run: its counters (total, this session, against the budget), FPS windows, episode
and learner statistics, policy lag and timing; the progress line, the stop conditions and the final summary.

Units: the run's counters are env frames: an agent step counts `cfg.frames_per_env_step` of them (--env_frameskip
on Atari and VizDoom with --summaries_use_frameskip, else 1, so that frames are agent steps). In code they are
named `env_frames`, agent steps `agent_steps`, and `samples` are agent steps the learner trained on. On screen and on
disk `unit_name(cfg)` says which ("env frames", or "env steps" where a frame is an agent step), and every line, tag
and column that shows a count or a rate names it."""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from sample_factory.config import Config
from sample_factory.experiment.episode_windows import WindowHistory

FPS_WINDOWS = (10, 60, 300)
LAG_FILE = "policy_lag.json"  # in the experiment folder: each policy's lag distribution over the whole run


def unit_name(cfg: Config) -> str:
    """What the counters and their rates count, as lines, tags and columns name it: "env frames" (frame skip
    included) or "env steps" (one frame per agent step)."""
    return "env frames" if cfg.frames_per_env_step > 1 else "env steps"


def fps_tag(cfg: Config) -> str:
    """The TensorBoard tag of the throughput, naming its unit."""
    return "perf/fps_" + unit_name(cfg).replace(" ", "_")


class ProgressTracker:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        P = cfg.num_policies
        self.start = time.monotonic()
        self.env_frames = [0] * P  # collected by actors, plus what a resumed checkpoint had
        self.resumed_frames = [0] * P
        # sync mode: the env frames every learner has trained on (the least of the policies'), per learner; the
        # budget stop waits for them, so that no STOP cuts the last iteration's training short
        self.trained_frames: list[int] | None = None
        self.episodes: list[collections.deque] = [collections.deque(maxlen=cfg.stats_avg) for _ in range(P)]
        self.num_episodes = [0] * P
        self.all_episodes: list[list[tuple[float, int]]] = [[] for _ in range(P)]  # kept for evaluation runs
        self.train_stats: list[dict] = [{} for _ in range(P)]
        self.samples_trained = [0] * P  # agent steps
        # per policy: [max lag + 1] trained steps per policy lag, over the run (resumed sessions included)
        self.lag_counts = [np.zeros(0, dtype=np.int64) for _ in range(P)]
        self.dropped_samples = [0] * P
        # per policy: {--episode_info_keys / episode_extra_stats key: the last --stats_avg values}
        self.episode_stats: list[dict[str, collections.deque]] = [{} for _ in range(P)]
        self.window_history = [WindowHistory() for _ in range(P)]  # saved beside each checkpoint
        # (time.monotonic(), env frames this session): the rates' windows
        self.history: collections.deque = collections.deque([(self.start, 0)], maxlen=2000)
        self.inference: collections.Counter = collections.Counter()
        self.discarded_rollouts = 0  # half-finished or orphaned by a worker crash
        self.last_checkpoint: dict[int, str] = {}
        self.timing: dict[str, list[dict]] = collections.defaultdict(list)

    def total_env_frames(self) -> int:
        return sum(self.env_frames)

    def budget_env_frames(self) -> int:
        """Env frames counted against --train_for_env_steps (in that unit): the least-trained policy's. Each policy
        gets the whole budget (as in Sample Factory), the same count its learning-rate schedule decays over."""
        return min(self.env_frames)

    def session_env_frames(self) -> int:
        """Env frames collected by this session (a resumed checkpoint's left out)."""
        return self.total_env_frames() - sum(self.resumed_frames)

    def resume(self, policy: int, env_frames: int) -> None:
        self.env_frames[policy] += env_frames
        self.resumed_frames[policy] = env_frames

    def add_samples(
        self,
        policy: int,
        env_frames: int,
        episodes: list[tuple[float, int]],
        stats: dict[str, list[float]] | None = None,
    ) -> None:
        self.env_frames[policy] += env_frames
        self.episodes[policy].extend(episodes)
        for k, values in (stats or {}).items():
            window = self.episode_stats[policy].get(k)
            if window is None:
                window = self.episode_stats[policy][k] = collections.deque(maxlen=self.cfg.stats_avg)
            window.extend(values)
        if self.cfg.evaluation_run:
            self.all_episodes[policy].extend(episodes)
        self.num_episodes[policy] += len(episodes)
        if episodes or stats:
            self.window_history[policy].record(self.env_frames[policy], self.window(policy))
        now = time.monotonic()
        if now - self.history[-1][0] > 0.2:
            self.history.append((now, self.session_env_frames()))

    def window(self, policy: int) -> dict[str, Any]:
        """The policy's episode windows as plain lists (JSON): [[reward, length], ...], {stat: [values]}."""
        return {
            "episodes": [list(e) for e in self.episodes[policy]],
            "stats": {k: list(v) for k, v in self.episode_stats[policy].items()},
        }

    def restore_window(self, policy: int, window: dict[str, Any]) -> None:
        """A resumed run's windows go on from those saved with its checkpoint (the session's episode count starts at
        0 as before)."""
        self.episodes[policy].clear()
        self.episodes[policy].extend((float(r), int(n)) for r, n in window["episodes"])
        self.episode_stats[policy] = {
            k: collections.deque(v, maxlen=self.cfg.stats_avg) for k, v in window["stats"].items()
        }
        self.window_history[policy].record(self.env_frames[policy], self.window(policy))

    def add_train_stats(self, policy: int, stats: dict) -> None:
        self.train_stats[policy] = stats
        self.samples_trained[policy] += stats.get("samples", 0)
        self.dropped_samples[policy] += stats.get("dropped_samples", 0)

    def add_lag_counts(self, policy: int, counts: list[int] | np.ndarray) -> None:
        counts, total = np.asarray(counts, dtype=np.int64), self.lag_counts[policy]
        if len(counts) > len(total):
            total = self.lag_counts[policy] = np.pad(total, (0, len(counts) - len(total)))
        total[: len(counts)] += counts

    def load_lag(self, exp_dir: Path) -> None:
        """A resumed run's distribution goes on from the one its earlier sessions wrote."""
        path = exp_dir / LAG_FILE
        if path.exists():
            for p, entry in json.loads(path.read_text()).items():
                if int(p) < len(self.lag_counts):
                    self.add_lag_counts(int(p), entry["counts"])

    def lag_summary(self, policy: int) -> dict | None:
        """The policy's lag distribution: trained steps, mean, min, percentiles, max and the counts per lag; None
        before any (an algorithm that does not measure lag, DQN: nothing)."""
        counts = self.lag_counts[policy]
        n = int(counts.sum())
        if n == 0:
            return None
        cdf, lags = np.cumsum(counts), np.arange(len(counts))
        pct = {f"p{q}": int(np.searchsorted(cdf, q / 100 * n)) for q in (50, 90, 99)}
        nonzero = np.flatnonzero(counts)
        mean = float((lags * counts).sum() / n)
        return {
            "samples": n,
            "mean": mean,
            "min": int(nonzero[0]),
            **pct,
            "max": int(nonzero[-1]),
            "counts": counts.tolist(),
        }

    def write_lag(self, exp_dir: Path) -> None:
        summaries = {str(p): s for p in range(len(self.lag_counts)) if (s := self.lag_summary(p)) is not None}
        if summaries:
            tmp = exp_dir / f".{LAG_FILE}.tmp"
            try:
                tmp.write_text(json.dumps(summaries) + "\n")
                os.replace(tmp, exp_dir / LAG_FILE)
            except OSError:
                tmp.unlink(missing_ok=True)  # a part-written file on a full disk
                raise

    def add_inference(self, policy: int, requests: int, batches: int) -> None:
        self.inference["requests", policy] += requests
        self.inference["batches", policy] += batches

    def frames_per_sec(self, window: float) -> float:
        """Env frames a second over the last `window` seconds (the progress line's FPS)."""
        now = time.monotonic()
        f_last = self.history[-1][1]
        for t, f in self.history:
            if now - t <= window:  # up to now, not to the last sample: a stalled run shows its FPS falling
                return (f_last - f) / max(now - t, 1e-6)
        return 0.0

    def reward_mean(self, policy: int) -> float:
        eps = self.episodes[policy]
        return float(np.mean([r for r, _ in eps])) if eps else float("nan")

    def metric(self, policy: int, name: str) -> float | None:
        """The value of --save_best_metric: mean episode reward (once some episodes finished) or a learner stat."""
        if name == "reward":
            return self.reward_mean(policy) if len(self.episodes[policy]) >= min(10, self.cfg.stats_avg) else None
        value = self.train_stats[policy].get(name)
        return float(value) if isinstance(value, (int, float)) and np.isfinite(value) else None

    def solved(self, target: float) -> bool:
        """Every policy has a full --stats_avg window of episodes with a mean reward >= target."""
        return all(len(e) == e.maxlen and self.reward_mean(p) >= target for p, e in enumerate(self.episodes))

    def stop_condition(self, elapsed: float) -> str | None:
        """Why the run stops now, `elapsed` seconds after its components started; None: it goes on. The env-frame
        budget first, then the time limit, then --stop_at_reward; an evaluation also stops at its episode or step
        count."""
        cfg = self.cfg
        trained = self.trained_frames is None or min(self.trained_frames) >= cfg.train_for_env_steps
        if self.budget_env_frames() >= cfg.train_for_env_steps and trained:
            per_policy = " per policy" if cfg.num_policies > 1 else ""
            return f"reached {cfg.train_for_env_steps} {unit_name(cfg)}{per_policy}"
        if elapsed >= cfg.train_for_seconds:
            return f"reached {cfg.train_for_seconds} s"
        if cfg.stop_at_reward is not None and self.solved(cfg.stop_at_reward):
            return f"mean reward reached {cfg.stop_at_reward}"
        if cfg.evaluation_run:
            if self.num_episodes[cfg.policy_index] >= cfg.max_num_episodes:
                return f"evaluated {cfg.max_num_episodes} episodes"
            if self.session_env_frames() >= cfg.max_num_frames:
                return f"evaluated {int(cfg.max_num_frames)} {unit_name(cfg)}"
        return None

    def episode_stats_means(self, policy: int) -> dict[str, float]:
        """{key: mean over the last --stats_avg episodes that reported it}, keys sorted."""
        return {k: float(np.mean(v)) for k, v in sorted(self.episode_stats[policy].items()) if v}

    def length_mean(self, policy: int) -> float:
        eps = self.episodes[policy]
        return float(np.mean([n for _, n in eps])) if eps else float("nan")

    def line(self) -> str:
        total, session = self.total_env_frames(), self.session_env_frames()
        target = self.cfg.train_for_env_steps
        unit = unit_name(self.cfg)
        agent_steps = session // self.cfg.frames_per_env_step  # the samples collected
        counts = f"{total} total, {session} this session" if session != total else str(total)
        if agent_steps == 0:  # workers starting, envs decorrelating: FPS 0/0/0 and an infinite ETA would say nothing
            return f"warming up: no samples collected yet | {unit}: {counts}"
        fps = "/".join(f"{self.frames_per_sec(w):.0f}" for w in FPS_WINDOWS)
        parts = [f"FPS 10s/60s/300s: {fps} ({unit}/s)", f"{unit}: {counts}"]
        if target < 1e10:
            done, P = self.budget_env_frames(), len(self.env_frames)
            f10 = self.frames_per_sec(10) / P  # per policy, assuming an even share
            eta = f", ETA {max((target - done) / f10, 0.0):.0f} s" if f10 > 0 else ""  # none while stalled
            parts[-1] += f" ({100 * done / target:.1f}%{eta})"
        parts.append(f"samples collected/trained: {agent_steps}/{sum(self.samples_trained)}")
        for p, st in enumerate(self.train_stats):
            if "policy_lag_min" in st:
                parts.append(
                    f"p{p} lag min/avg/max {st['policy_lag_min']:.0f}/{st['policy_lag_avg']:.1f}/"
                    f"{st['policy_lag_max']:.0f}"
                )
        for p, st in enumerate(self.train_stats):
            if st.get("skipped_updates"):
                parts.append(f"p{p} skipped NaN/inf updates: {st['skipped_updates']}")
        for p in range(len(self.episodes)):
            share = f", {self.env_frames[p] - self.resumed_frames[p]} {unit}" if len(self.episodes) > 1 else ""
            parts.append(f"p{p} reward {self.reward_mean(p):.1f} ({self.num_episodes[p]} episodes{share})")
            custom = self.episode_stats_means(p)
            if custom:
                parts[-1] += " " + " ".join(f"{k} {v:.3g}" for k, v in list(custom.items())[:4])
        return " | ".join(parts)

    def final_summary(self, elapsed: float) -> str:
        collected = self.session_env_frames()
        unit = unit_name(self.cfg)
        lines = [f"done: {collected} {unit} in {elapsed:.1f} s, {collected / max(elapsed, 1e-6):.0f} FPS overall"]
        if self.resumed_frames != [0] * len(self.resumed_frames):  # the progress line counts the total
            lines[0] += (
                f" (this session; {self.total_env_frames()} {unit} in total, {sum(self.resumed_frames)} before the "
                f"resume)"
            )
        for role, reports in sorted(self.timing.items()):
            total: collections.Counter = collections.Counter()
            for r in reports:
                total.update(r)
            per = ", ".join(f"{k} {v / len(reports):.1f} s" for k, v in sorted(total.items()))
            lines.append(f"  {role} (avg of {len(reports)}): {per}")
        for p in range(len(self.episodes)):
            frames = self.env_frames[p] - self.resumed_frames[p]
            this_session = " this session" if self.resumed_frames[p] else ""
            lines.append(
                f"  policy {p}: reward {self.reward_mean(p):.2f}, {self.num_episodes[p]} episodes{this_session}, "
                f"{frames} {unit}{this_session} ({frames / max(elapsed, 1e-6):.0f} FPS), "
                f"{self.dropped_samples[p]} samples dropped for lag, checkpoint {self.last_checkpoint.get(p)}"
            )
            if (lag := self.lag_summary(p)) is not None:
                lines.append(
                    f"  policy {p} lag over the run (policy versions): mean {lag['mean']:.2f}, median {lag['p50']}, "
                    f"p90 {lag['p90']}, p99 {lag['p99']}, max {lag['max']} (policy_lag.json)"
                )
            custom = self.episode_stats_means(p)
            if custom:
                lines.append(f"  policy {p} episode stats: " + ", ".join(f"{k} {v:.4g}" for k, v in custom.items()))
        if self.discarded_rollouts:
            lines.append(f"  {self.discarded_rollouts} rollouts discarded because of worker restarts")
        return "\n".join(lines)


class IterationSamples:
    """Sync mode: the actors' sample reports (one per finished rollout of a split, tagged (split, rollout number))
    are added to the tracker one whole iteration at a time, in (worker, split, rollout) order, and none past the
    env-frame budget. The counts, the episode windows and so the stop point and progress.csv's rows are then the same
    in every run of a seed, whichever process reported first."""

    def __init__(self, num_workers: int, splits_per_worker: int, rollouts_per_split: int, budget_frames: int):
        self.order = [
            (w, s, k) for w in range(num_workers) for s in range(splits_per_worker) for k in range(rollouts_per_split)
        ]
        self.rollouts_per_split, self.budget_frames = rollouts_per_split, budget_frames
        # the next one to add: the first report's (0 in a new session; a serial-mode snapshot's actors go on counting,
        # and no split starts an iteration before every split finished the one before)
        self.iteration: int | None = None
        self.pending: dict[tuple[int, int, int], list] = {}  # (worker, split, rollout number) -> its reports

    def add(self, worker: int, split: int, rollout: int, reports: list) -> None:
        if self.iteration is None:
            self.iteration = rollout // self.rollouts_per_split
        self.pending[worker, split, rollout] = reports

    def apply(self, progress: ProgressTracker) -> int:
        """Add every complete iteration (within the budget) to `progress`; returns how many were added."""
        added = 0
        while self.iteration is not None and progress.budget_env_frames() < self.budget_frames:
            base = self.iteration * self.rollouts_per_split
            keys = [(w, s, base + k) for w, s, k in self.order]
            if any(key not in self.pending for key in keys):
                break
            for key in keys:
                for policy, env_frames, episodes, stats in self.pending.pop(key):
                    progress.add_samples(policy, env_frames, episodes, stats)
            self.iteration += 1
            added += 1
        return added
