"""What the runner knows about a run: FPS windows, episode statistics, learner statistics, timing; the progress
line, TensorBoard summaries per policy (tensorboardX) and `progress.csv`.

Units: the run's counters are env frames: an agent step counts `cfg.frames_per_env_step` of them (--env_frameskip
on Atari and VizDoom with --summaries_use_frameskip, else 1, so that frames are agent steps). In code they are
named `env_frames`, agent steps `agent_steps`, and `samples` are agent steps the learner trained on. On screen and on
disk `unit_name(cfg)` says which ("env frames", or "env steps" where a frame is an agent step), and every line, tag
and column that shows a count or a rate names it."""

from __future__ import annotations

import collections
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import IO, Any

import numpy as np
from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.record_writer import masked_crc32c
from tensorboardX.summary import scalar

from sample_factory.config import Config
from sample_factory.experiment.episode_windows import WindowHistory
from sample_factory.experiment.wandb_logging import WandbLogger

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


def _last_time(rows: list[str]) -> float:
    """time_s of the last complete row of progress.csv (0 when there is none)."""
    for row in reversed(rows):
        try:
            return float(row.split(",", 1)[0])
        except ValueError:
            continue  # a partly written line
    return 0.0


class SummaryWriteError(RuntimeError):
    """The run's summaries (TensorBoard files, progress.csv) cannot be written: the run stops (shown without a
    traceback)."""

    user_facing = True


class EventFile:
    """One TensorBoard event file, written in the caller's thread. tensorboardX's SummaryWriter writes from a
    thread of its own through a bounded queue: on a full disk that thread dies and the next `add_scalar` blocks
    forever (the run hangs, deaf to SIGINT and SIGTERM, holding the experiment lock). Here a failed write raises
    OSError where it happens. The records are TensorBoard's: length, masked CRC, serialized Event, masked CRC."""

    def __init__(self, logdir: Path, flush_secs: float, filename_suffix: str = ""):
        logdir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}{filename_suffix}"
        self.path = logdir / name
        self.file: Any = open(self.path, "ab")  # noqa: SIM115 - kept open, closed in close()
        self.flush_secs = flush_secs
        self.next_flush = 0.0  # the first record reaches the file at once
        self._write(Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self._write(Event(wall_time=time.time(), step=int(step), summary=scalar(tag, value)))

    def session_start(self, step: int) -> None:
        """This session continues from `step`: TensorBoard drops the points past it written before (a killed
        run's steps after its last checkpoint, which the resume trained again)."""
        self._write(Event(wall_time=time.time(), step=int(step), session_log=SessionLog(status=SessionLog.START)))

    def _write(self, event: Event) -> None:
        data = event.SerializeToString()
        header = struct.pack("Q", len(data))
        self.file.write(header + struct.pack("I", masked_crc32c(header)) + data + struct.pack("I", masked_crc32c(data)))
        if time.monotonic() >= self.next_flush:
            self.flush()

    def flush(self) -> None:
        self.file.flush()
        self.next_flush = time.monotonic() + self.flush_secs

    def close(self) -> None:
        if self.file is not None:
            file, self.file = self.file, None
            try:
                file.flush()
            finally:
                file.close()


def _counter(row: str) -> int | None:
    """The counter column of a progress.csv row, env frames (None: a partly written line)."""
    fields = row.split(",")
    try:
        return int(fields[1]) if len(fields) > 1 else None
    except ValueError:
        return None


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


# --progress_every_env_steps rows and points: at most this many a second (progress.csv of a fast env stays small).
MAX_POINTS_PER_SEC = 4.0


class ProgressPoints:
    """progress.csv rows and the curves' TensorBoard points: one row at each report (`report`), and besides, a row
    and points each --progress_every_env_steps, at most MAX_POINTS_PER_SEC (`update`), so that a run of seconds gets
    a curve, not the two points of its reports."""

    def __init__(self, every: int, summaries: SummaryWriters, now: float, per_iteration: bool = False):
        """per_iteration (sync mode): rows only at whole iterations (`update`, called as they are counted), at each
        --progress_every_env_steps with no rate limit, and none on the report timer: the same rows in every run."""
        self.every, self.summaries, self.per_iteration = every, summaries, per_iteration
        self.next_at = 0  # total env frames of the next point
        self.last_row = now  # time.monotonic() of the last row of either kind

    def report(self, progress: ProgressTracker, now: float) -> None:
        if self.per_iteration:
            return
        self.summaries.progress_row(progress)
        self.last_row = now

    def at_stop(self, progress: ProgressTracker, now: float, target: float | None) -> None:
        """A row as the run stops at --stop_at_reward: the target may be reached between two rows, and episodes that
        arrive while the run shuts down can move the mean of its final row back below it (frames_to_score reads the
        first row at the target). Sync mode's rows at whole iterations already hold it."""
        if target is not None and progress.solved(target):
            self.report(progress, now)

    def update(self, progress: ProgressTracker, now: float) -> None:
        total = progress.total_env_frames()
        too_soon = now - self.last_row < 1.0 / MAX_POINTS_PER_SEC and not self.per_iteration
        if self.every <= 0 or total < self.next_at or too_soon:
            return
        self.next_at = (total // self.every + 1) * self.every
        self.last_row = now
        self.summaries.progress_row(progress)
        self.summaries.points(progress)


# Learner stats under CleanRL's tags too (its PPO scripts' names), x axis in agent steps as its global_step
CLEANRL_TRAIN_TAGS = {
    "value_loss": "losses/value_loss",
    "policy_loss": "losses/policy_loss",
    "entropy": "losses/entropy",
    "approx_kl": "losses/approx_kl",
    "clip_fraction": "losses/clipfrac",
    "lr": "charts/learning_rate",
}


class SummaryWriters:
    """One TensorBoard writer per policy under <experiment>/.summary/<policy>/, x axis = env frames (named
    env_steps where a frame is an agent step), and progress.csv: time_s, the counter (env_frames or env_steps),
    fps_10s (the counter's unit per second, over the last 10 s), reward_p<p>, then a column <key>_p<p> per episode
    statistic, added when the statistic first appears.

    time_s is training time across sessions: a resumed run continues from its last row, so the column never goes
    back. Beside our tags, CleanRL's charts/episodic_return, charts/episodic_length, charts/SPS and the learner's
    losses/* and charts/learning_rate (CLEANRL_TRAIN_TAGS; x axis and rate in agent steps, as CleanRL's global_step)
    let its dashboards show our runs."""

    def __init__(self, exp_dir: Path, num_policies: int, enabled: bool = True, cfg: Config | None = None):
        self.enabled = enabled
        self.unit = unit = unit_name(cfg) if cfg is not None else "env steps"
        self.pending_train: list[list[dict]] = [[] for _ in range(num_policies)]
        self.csv_path = exp_dir / "progress.csv"
        self.columns: list[str] = []
        self.wandb: WandbLogger | None = None  # --with_wandb: the writers also log every scalar to W&B
        self.failed: str | None = None  # why writing failed: nothing more is written
        self.exp_dir = exp_dir
        self.event_files: list[EventFile] = []
        self.writers: list[Any] = []  # per policy: the event file, or a tee into it and W&B
        self.csv: IO[str] | None = None  # progress.csv, open while writing is enabled
        if not enabled:  # evaluation runs leave the training summaries alone
            return
        # Event file names carry only seconds: a unique suffix keeps a quick resume from overwriting the last file.
        suffix = f".{os.getpid()}.{time.time_ns()}"
        self.event_files = [
            EventFile(exp_dir / ".summary" / str(p), flush_secs=10, filename_suffix=suffix) for p in range(num_policies)
        ]
        self.writers = list(self.event_files)
        if cfg is not None and cfg.with_wandb:
            self.wandb = WandbLogger(cfg, exp_dir, num_policies)
            self.writers = [self.wandb.tee(w, p) for p, w in enumerate(self.writers)]
        self.csv = open(self.csv_path, "a+")
        self.csv.seek(0)
        header = self.csv.readline().strip()
        self.time_offset = 0.0  # the training time of the sessions before this one
        if header:  # a resumed run goes on with the columns it had, and its time
            self.columns = header.split(",")
            self.time_offset = _last_time(self.csv.read().splitlines())
        else:
            counter = unit.replace(" ", "_")
            self.columns = ["time_s", counter, "fps_10s", *(f"reward_p{p}" for p in range(num_policies))]
            self.csv.write(",".join(self.columns) + "\n")
        self.csv.seek(0, os.SEEK_END)

    def add_train_stats(self, policy: int, stats: dict) -> None:
        self.pending_train[policy].append(stats)

    def _failure(self, e: OSError) -> SummaryWriteError:
        """Stop writing (every later call is a no-op, so the run's shutdown goes on) and say why, once."""
        self.failed = e.strerror or str(e)
        for f in [*self.event_files, self.csv]:
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass  # the same full disk: what was written stays
        self.writers, self.event_files, self.csv, self.enabled = [], [], None, False
        return SummaryWriteError(
            f"could not write the summaries in {self.exp_dir} (TensorBoard files, progress.csv): {self.failed}; the "
            f"run stops, its last checkpoint is kept: free space, then resume"
        )

    def points(self, progress: ProgressTracker) -> None:
        """The curves' points (reward, episode length, FPS; ours and CleanRL's) at the current env frames."""
        try:
            self._points(progress)
        except OSError as e:
            raise self._failure(e) from None

    def _points(self, progress: ProgressTracker) -> None:
        fps = progress.frames_per_sec(10)
        frames_per_agent_step = progress.cfg.frames_per_env_step
        for p, w in enumerate(self.writers):
            frames = progress.env_frames[p]
            agent_steps = frames // frames_per_agent_step
            w.add_scalar("perf/fps_" + self.unit.replace(" ", "_"), fps, frames)
            w.add_scalar("charts/SPS", fps / frames_per_agent_step, agent_steps)
            if progress.episodes[p]:
                w.add_scalar("reward/mean", progress.reward_mean(p), frames)
                w.add_scalar("reward/episode_length", progress.length_mean(p), frames)
                w.add_scalar("charts/episodic_return", progress.reward_mean(p), agent_steps)
                w.add_scalar("charts/episodic_length", progress.length_mean(p), agent_steps)

    def write(self, progress: ProgressTracker) -> None:
        try:
            self._write_all(progress)
        except OSError as e:
            raise self._failure(e) from None

    def _write_all(self, progress: ProgressTracker) -> None:
        self._points(progress)
        for p, w in enumerate(self.writers):
            frames = progress.env_frames[p]
            for k, v in progress.episode_stats_means(p).items():
                w.add_scalar(f"policy_stats/{k}", v, frames)
            for st in self.pending_train[p]:
                x = st.get("env_steps", frames)  # the learner's stats name its env frames env_steps
                for k, v in st.items():
                    if isinstance(v, (int, float)) and k not in ("env_steps",):
                        tag = f"policy_lag/{k[11:]}" if k.startswith("policy_lag_") else f"train/{k}"
                        w.add_scalar(tag, v, x)
                        if k in CLEANRL_TRAIN_TAGS:
                            w.add_scalar(CLEANRL_TRAIN_TAGS[k], v, x // progress.cfg.frames_per_env_step)
            self.pending_train[p] = []
        if self.wandb is not None:
            self.wandb.flush()

    def _table(self) -> IO[str]:
        assert self.csv is not None, "progress.csv is open while writing is enabled"
        return self.csv

    def progress_row(self, progress: ProgressTracker) -> None:
        if not self.enabled:
            return
        try:
            self._progress_row(progress)
        except OSError as e:
            raise self._failure(e) from None

    def _progress_row(self, progress: ProgressTracker) -> None:
        P = len(self.writers)
        row = {
            "time_s": f"{self.time_offset + time.monotonic() - progress.start:.2f}",
            self.columns[1]: str(progress.total_env_frames()),
            "fps_10s": f"{progress.frames_per_sec(10):.1f}",
            **{f"reward_p{p}": f"{progress.reward_mean(p):.3f}" for p in range(P)},
        }
        for p in range(P):
            row.update({f"{k}_p{p}": f"{v:.6g}" for k, v in progress.episode_stats_means(p).items()})
        new = [c for c in row if c not in self.columns]
        if new:
            self._add_columns(new)
        csv = self._table()
        csv.write(",".join(row.get(c, "") for c in self.columns) + "\n")
        csv.flush()

    def _add_columns(self, new: list[str]) -> None:
        """Rewrite progress.csv with more columns (empty in the rows written before): a statistic appears when
        the first episode reports it."""
        rows = self._read_table()[1:]
        pad = "," * len(new)
        self.columns += sorted(new)
        self._rewrite_table([",".join(self.columns), *(r + pad for r in rows)])

    def _read_table(self) -> list[str]:
        csv = self._table()
        csv.seek(0)
        return csv.read().splitlines()

    def _rewrite_table(self, lines: list[str]) -> None:
        """progress.csv becomes `lines` (the header first), through a temporary file; then it is open to append."""
        tmp = self.csv_path.with_suffix(".csv.tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        self._table().close()
        os.replace(tmp, self.csv_path)
        self.csv = open(self.csv_path, "a+")  # noqa: SIM115 - closed in close()

    def resume_at(self, env_frames: list[int]) -> int:
        """The run resumes from these env frames per policy: progress.csv's rows past their total, and the curves'
        points past each policy's, are from training that was lost (a kill after the last checkpoint), so the
        counter column would go back. Drops those rows, marks the session's start in each event file; returns
        how many rows were dropped."""
        if not self.enabled:
            return 0
        try:
            for f, frames in zip(self.event_files, env_frames, strict=True):
                f.session_start(frames)
            header, *rows = self._read_table()
            kept = [r for r in rows if (c := _counter(r)) is not None and c <= sum(env_frames)]
            if len(kept) < len(rows):
                self._rewrite_table([header, *kept])
            self._table().seek(0, os.SEEK_END)
        except OSError as e:
            raise self._failure(e) from None
        return len(rows) - len(kept)

    def add_scalar(self, policy: int, tag: str, value: float, step: int) -> None:
        if self.enabled:
            try:
                self.writers[policy].add_scalar(tag, value, step)
            except OSError as e:
                raise self._failure(e) from None

    def close(self) -> None:
        try:
            for f in [*self.event_files, self.csv]:
                if f is not None:
                    f.close()
        except OSError as e:
            raise self._failure(e) from None
        finally:
            if self.wandb is not None:
                self.wandb.finish()
