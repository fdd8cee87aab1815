"""Evaluation during training (--eval_every_env_steps): the runner asks the learner for a fresh checkpoint, then
evaluates it with `python -m sample_factory.evaluation.enjoy` in a separate process (training never waits for it)
and logs the result to TensorBoard at the checkpoint's env steps. One evaluation at a time; a late one is skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sample_factory.config import Config


class PeriodicEvaluator:
    def __init__(self, cfg: Config, exp_dir: Path, request_checkpoint: Callable[[], None], log: Callable[[str], None]):
        self.cfg, self.exp_dir, self.request_checkpoint, self.log = cfg, exp_dir, request_checkpoint, log
        self.every = cfg.eval_every_env_steps
        self.next_at = self.every
        self.awaiting_checkpoint = False
        self.proc: subprocess.Popen | None = None
        self.result_file: Path | None = None
        self.env_steps_of_eval = 0

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def on_env_steps(self, total: int) -> None:
        if self.enabled and total >= self.next_at and not self.awaiting_checkpoint and self.proc is None:
            self.next_at = (total // self.every + 1) * self.every
            self.awaiting_checkpoint = True
            self.request_checkpoint()

    def on_checkpoint(self, path: str) -> None:
        if not self.awaiting_checkpoint:
            return
        self.awaiting_checkpoint = False
        self.env_steps_of_eval = int(Path(path).stem.split("_")[2])
        out_dir = self.exp_dir / "eval"
        out_dir.mkdir(exist_ok=True)
        self.result_file = out_dir / f"eval_{self.env_steps_of_eval}.json"
        cmd = [
            sys.executable,
            "-m",
            "sample_factory.evaluation.enjoy",
            f"--env={self.cfg.env}",
            f"--experiment={self.cfg.experiment}",
            f"--train_dir={self.cfg.train_dir}",
            "--no_render=True",
            "--device=cpu",
            f"--max_num_episodes={self.cfg.eval_episodes}",
            f"--eval_results_file={self.result_file}",
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def poll(self) -> dict | None:
        """The finished evaluation's results (with 'env_steps'), once."""
        if self.proc is None or self.proc.poll() is None:
            return None
        proc, self.proc = self.proc, None
        if proc.returncode != 0 or not self.result_file.exists():
            err = (proc.stderr.read() or "").strip().splitlines()
            self.log(f"periodic evaluation failed (exit code {proc.returncode}): {err[-1] if err else ''}")
            return None
        results = json.loads(self.result_file.read_text())
        results["env_steps"] = self.env_steps_of_eval
        return results

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
