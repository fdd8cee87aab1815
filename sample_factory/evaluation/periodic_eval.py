"""Evaluation during training (--eval_every_env_steps): when a policy's env frames pass its next multiple, the policy
is queued; in turn, the runner asks that policy's learner for a fresh checkpoint and, once it is written, evaluates
it with `python -m sample_factory.evaluation.enjoy` in a separate process (training never waits for it). The result
goes to eval/eval_<env frames>_p<policy>.json, a log line and the policy's TensorBoard writer at the evaluated
checkpoint's env frames (the run's counter: experiment/progress.py, "Units"; enjoy loads the newest checkpoint, which in
a run that trains faster than enjoy starts is newer than the one asked for).

Which policies (--eval_policies), sampled or most likely actions (--eval_deterministic) and env options changed for
evaluation only (--eval_env_overrides) are passed on to enjoy. One evaluation runs at a time and a policy is queued
at most once, so evaluations never pile up: multiples passed while a policy is queued or being evaluated are
skipped, and the queue is served in order, so every policy gets its turn. A resumed run goes on with its schedule
(eval/schedule.json): the first evaluation after a resume is at the next multiple, unless one was due and not over
when the run stopped.

When training ends (`finish`), an evaluation still running is waited for, and one that is due (queued, waiting for
its checkpoint, or a multiple passed while the policy was busy) runs on the final checkpoint, all within
FINAL_EVAL_TIMEOUT_SEC; an interrupted run skips them. Either way a log line says what became of each.

--capture_video adds one mp4 per evaluation, videos/eval_<env frames>_p<policy>.mp4 in the experiment folder."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sample_factory.config import Config, parse_eval_policies
from sample_factory.config.cfg import option_defaults
from sample_factory.experiment.checkpoints import checkpoint_dir, checkpoint_env_frames, list_checkpoints
from sample_factory.experiment.progress import unit_name

# A checkpoint asked for but not reported within this time (a learner that never answers): give up on it, so one
# lost request does not end periodic evaluation for the rest of the run.
CHECKPOINT_TIMEOUT_SEC = 300.0
# The evaluations due when training ends get this long in all (a long Atari evaluation is cut off, with a log line).
FINAL_EVAL_TIMEOUT_SEC = 300.0
# In eval/: each policy's next due multiple once its last evaluation was over, so a resumed run goes on with its
# schedule instead of evaluating again at once.
SCHEDULE_NAME = "schedule.json"
_RESULT_NAME = re.compile(r"eval_(\d+)_p(\d+)\.json")


def eval_result_name(env_frames: int, policy: int) -> str:
    """The file, in the experiment's eval/ folder, of `policy`'s evaluation at `env_frames`."""
    return f"eval_{env_frames}_p{policy}.json"


def parse_eval_result_name(name: str) -> tuple[int, int] | None:
    """(env frames, policy) of an eval_result_name(), None for any other file name."""
    m = _RESULT_NAME.fullmatch(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def video_interval(cfg: Config) -> int:
    """--capture_video without --eval_every_env_steps: ten recordings over the run's budget (--train_for_env_steps,
    or --total_timesteps once the runner has converted it), else one every 100,000 agent steps."""
    if cfg.train_for_env_steps < option_defaults()["train_for_env_steps"]:
        return max(1, int(cfg.train_for_env_steps) // 10)
    return 100_000 * cfg.frames_per_env_step


@dataclass
class _Evaluation:
    policy: int
    env_frames: int  # the checkpoint's (what its learner had trained on)
    result_file: Path
    proc: subprocess.Popen
    stderr: Any  # a file, not a pipe: a chatty child can never block on a full pipe
    next_at: int  # the policy's next due multiple once this evaluation is over


class PeriodicEvaluator:
    def __init__(
        self,
        cfg: Config,
        exp_dir: Path,
        request_checkpoint: Callable[[int], None],
        log: Callable[[str], None],
        add_scalar: Callable[[int, str, float, int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """`request_checkpoint(policy)` asks that policy's learner to save now (its `checkpoint` report must reach
        `on_checkpoint`); `add_scalar(policy, tag, value, env_frames)` writes to that policy's TensorBoard writer."""
        self.cfg, self.exp_dir, self.request_checkpoint, self.log = cfg, exp_dir, request_checkpoint, log
        self.add_scalar = add_scalar
        self.clock = clock
        self.unit = unit_name(cfg)
        self.every = int(cfg.eval_every_env_steps)  # 1e6 typed as a float counts whole env steps
        typed = "eval_every_env_steps" in cfg.cli_flags  # or saved: a resumed run keeps its interval
        if cfg.capture_video and self.every <= 0 and not typed and not cfg.evaluation_run:
            self.every = video_interval(cfg)
            log(f"--capture_video: an evaluation is recorded every {self.every} {self.unit} (--eval_every_env_steps)")
        self.policies = parse_eval_policies(cfg.eval_policies, cfg.num_policies)
        self.next_at = {p: self.every for p in self.policies}
        self.saved_schedule: dict[int, tuple[int, int]] = {}  # policy -> (next_at, env frames evaluated), saved
        if self.enabled:
            self.next_at.update(self._load_schedule())
        self.queue: collections.deque[int] = collections.deque()  # due policies, each at most once
        self.awaiting: int | None = None  # the policy whose checkpoint was asked for
        self.awaiting_since = 0.0
        self.running: _Evaluation | None = None
        self.evaluated: dict[int, int] = {}  # policy -> env frames of its last evaluated checkpoint

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def _multiple_after(self, env_frames: int) -> int:
        return (env_frames // self.every + 1) * self.every

    def _load_schedule(self) -> dict[int, int]:
        """A resumed run's schedule: the multiple after the last one evaluated, in today's interval (a changed
        --eval_every_env_steps goes on from the last multiple evaluated in the old one), or after the checkpoint
        the policy resumes from where that is older than the one last evaluated; without a checkpoint, afresh."""
        try:
            saved = json.loads((self.exp_dir / "eval" / SCHEDULE_NAME).read_text())
            old_every = int(saved["every"])
            due = {int(p): int(v) for p, v in saved["next_at"].items()}
            evaluated = {int(p): int(v) for p, v in saved["evaluated"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}  # a new run, or a schedule cut off while being written: evaluate at every multiple
        schedule = {}
        for p in self.policies:
            checkpoints = list_checkpoints(checkpoint_dir(self.cfg, p))
            if p not in due or p not in evaluated or not checkpoints:
                continue
            frames = checkpoint_env_frames(checkpoints[-1])
            last = due[p] - old_every if frames >= evaluated[p] else frames
            schedule[p] = self._multiple_after(max(last, 0))
            self.saved_schedule[p] = (schedule[p], min(evaluated[p], frames))
        return schedule

    def _save_schedule(self, policy: int, next_at: int, evaluated: int) -> None:
        self.saved_schedule[policy] = (next_at, evaluated)
        path = self.exp_dir / "eval" / SCHEDULE_NAME
        tmp = path.with_suffix(".tmp")
        saved = self.saved_schedule.items()
        content = {"every": self.every, "next_at": {str(p): v[0] for p, v in saved}}
        content["evaluated"] = {str(p): v[1] for p, v in saved}  # checkpoints' env frames
        tmp.write_text(json.dumps(content))
        tmp.replace(path)

    def busy_with(self, policy: int) -> bool:
        running = self.running is not None and self.running.policy == policy
        return running or self.awaiting == policy or policy in self.queue

    def update(self, env_frames: Sequence[int]) -> dict | None:
        """Called from the runner's loop with every policy's env frames: queues the policies that are due, reports a
        finished evaluation (returned too) and starts the next one."""
        result = self.poll()
        self.on_env_frames(env_frames)
        self._start_next()
        return result

    def on_env_frames(self, env_frames: Sequence[int]) -> None:
        for p in self.policies:
            # A policy already queued or in evaluation is not queued again: the multiples passed meanwhile are
            # skipped, and it is due again (at once) when its evaluation is over.
            if env_frames[p] >= self.next_at[p] and not self.busy_with(p):
                self.next_at[p] = self._multiple_after(env_frames[p])
                self.queue.append(p)

    def _start_next(self) -> None:
        if self.awaiting is not None and self.clock() - self.awaiting_since > CHECKPOINT_TIMEOUT_SEC:
            self.log(
                f"periodic evaluation of policy {self.awaiting} skipped: no checkpoint within "
                f"{CHECKPOINT_TIMEOUT_SEC:.0f} s of the request"
            )
            self.awaiting = None
        if self.awaiting is None and self.running is None and self.queue:
            self.awaiting, self.awaiting_since = self.queue.popleft(), self.clock()
            self.request_checkpoint(self.awaiting)

    def on_checkpoint(self, policy: int, path: str) -> None:
        """A learner wrote a checkpoint: the first one of the policy asked for is evaluated."""
        if policy != self.awaiting:
            return
        self.awaiting = None
        self._launch(policy, path)

    def _launch(self, policy: int, path: str | Path) -> None:
        env_frames = checkpoint_env_frames(path)
        self.evaluated[policy] = env_frames
        out_dir = self.exp_dir / "eval"
        out_dir.mkdir(exist_ok=True)
        result_file = out_dir / eval_result_name(env_frames, policy)
        cmd = self.command(policy, result_file)
        stderr = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        self.running = _Evaluation(policy, env_frames, result_file, proc, stderr, self.next_at[policy])

    def command(self, policy: int, result_file: Path) -> list[str]:
        """The enjoy command line evaluating `policy`'s latest checkpoint."""
        cfg = self.cfg
        cmd = [
            sys.executable,
            "-m",
            "sample_factory.evaluation.enjoy",
            f"--env={cfg.env}",
            f"--experiment={cfg.experiment}",
            f"--train_dir={cfg.train_dir}",
            "--no_render=True",
            "--device=cpu",
            f"--policy_index={policy}",
            f"--max_num_episodes={cfg.eval_episodes}",
            f"--max_num_frames={cfg.max_num_frames}",
            f"--eval_deterministic={cfg.eval_deterministic}",
            f"--eval_results_file={result_file}",
        ]
        if cfg.eval_env_overrides:
            cmd.append(f"--eval_env_overrides={cfg.eval_env_overrides}")
        if cfg.capture_video:  # one file per evaluation, named like its results
            cmd += ["--save_video=True", "--video_per_episode=False", f"--video_name=videos/{result_file.stem}"]
        return cmd

    def poll(self) -> dict | None:
        """The finished evaluation's results (with the checkpoint's env frames as 'env_steps'), once; logged and
        written to TensorBoard."""
        ev = self.running
        if ev is None or ev.proc.poll() is None:
            return None
        self.running = None
        ev.stderr.seek(0)
        err = ev.stderr.read().strip().splitlines()
        ev.stderr.close()
        if ev.proc.returncode != 0 or not ev.result_file.exists():
            self.log(
                f"periodic evaluation of policy {ev.policy} failed (exit code {ev.proc.returncode}): "
                f"{err[-1] if err else ''}"
            )
            return None
        results = json.loads(ev.result_file.read_text())
        # enjoy loads the newest checkpoint: in a run that trains faster than enjoy starts, a newer one than asked for
        frames = int(results.get("checkpoint_env_steps") or ev.env_frames)
        if frames != ev.env_frames:
            ev.result_file.replace(ev.result_file.with_name(eval_result_name(frames, ev.policy)))
            self.evaluated[ev.policy] = frames
        results["env_steps"] = frames
        self._save_schedule(ev.policy, ev.next_at, frames)
        self._report(ev.policy, results)
        return results

    def _report(self, policy: int, results: dict) -> None:
        actions = "deterministic" if results.get("deterministic") else "sampled"
        overrides = results.get("env_overrides") or {}
        with_overrides = f", env overrides {','.join(f'{k}={v}' for k, v in overrides.items())}" if overrides else ""
        self.log(
            f"evaluation of policy {policy} at {results['env_steps']} {self.unit}: reward {results['reward_mean']:.2f} "
            f"+- {results['reward_std']:.2f} over {results['episodes']} episodes ({actions} actions{with_overrides})"
        )
        if self.add_scalar is not None:
            frames = results["env_steps"]
            self.add_scalar(policy, "eval/reward_mean", results["reward_mean"], frames)
            self.add_scalar(policy, "eval/reward_std", results["reward_std"], frames)
            self.add_scalar(policy, "eval/episode_length", results["length_mean"], frames)

    def finish(self, env_frames: Sequence[int], interrupted: bool, cancel: Callable[[], bool] = lambda: False) -> None:
        """At the end of training (the learners have written their final checkpoints): wait for the running
        evaluation, then evaluate the final checkpoint of every policy that is due, within FINAL_EVAL_TIMEOUT_SEC
        in all (`cancel()` true: stop at once). `interrupted`: skip them all. Each outcome is logged."""
        if not self.enabled:
            return
        due = list(self.queue) + ([self.awaiting] if self.awaiting is not None else [])
        due += [p for p in self.policies if env_frames[p] >= self.next_at[p] and p not in due]
        self.queue.clear()
        self.awaiting = None
        if interrupted:
            for p in ([self.running.policy] if self.running is not None else []) + due:
                self.log(f"periodic evaluation of policy {p} skipped: training was interrupted or stopped by an error")
            return
        deadline = self.clock() + FINAL_EVAL_TIMEOUT_SEC
        if self.running is not None:
            self._wait(deadline, cancel)
        for p in due:
            checkpoints = list_checkpoints(checkpoint_dir(self.cfg, p))
            if not checkpoints:
                self.log(f"periodic evaluation of policy {p} skipped: no checkpoint")
                continue
            frames = checkpoint_env_frames(checkpoints[-1])
            self.next_at[p] = max(self.next_at[p], self._multiple_after(env_frames[p]))
            if self.evaluated.get(p) == frames:
                self._save_schedule(p, self.next_at[p], frames)
                continue  # its final checkpoint is the one just evaluated
            if self.clock() >= deadline or cancel():
                self.log(f"periodic evaluation of policy {p} at {frames} {self.unit} skipped: no time left at the end")
                continue
            self.log(
                f"evaluating policy {p}'s final checkpoint ({frames} {self.unit}): an evaluation was due at the end"
            )
            self._launch(p, checkpoints[-1])
            self._wait(deadline, cancel)

    def _wait(self, deadline: float, cancel: Callable[[], bool]) -> None:
        """Until the running evaluation ends (then it is reported) or the deadline or `cancel` (then it is stopped)."""
        ev = self.running
        assert ev is not None, "_wait follows _launch"
        while ev.proc.poll() is None and self.clock() < deadline and not cancel():
            time.sleep(0.05)
        if self.poll() is None and self.running is not None:
            self.log(
                f"periodic evaluation of policy {ev.policy} at {ev.env_frames} {self.unit} stopped: over "
                f"{FINAL_EVAL_TIMEOUT_SEC:.0f} s at the end of training" + (" (interrupted)" if cancel() else "")
            )
            self.stop()

    def stop(self) -> None:
        ev, self.running = self.running, None
        if ev is not None and ev.proc.poll() is None:
            ev.proc.terminate()
            try:
                ev.proc.wait(5)
            except subprocess.TimeoutExpired:
                ev.proc.kill()
                ev.proc.wait(5)
        if ev is not None:
            ev.stderr.close()
