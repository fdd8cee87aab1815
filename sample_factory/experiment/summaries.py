"""Where a run's progress is written: TensorBoard summaries per policy (event files written in the caller's thread),
`progress.csv`, and W&B when asked; the rows and points of the curves. The counters and their units are
experiment/progress.py's."""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path
from typing import IO, Any

from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.record_writer import masked_crc32c
from tensorboardX.summary import scalar

from sample_factory.config import Config
from sample_factory.experiment.progress import ProgressTracker, unit_name
from sample_factory.experiment.wandb_logging import WandbLogger


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
