"""Best checkpoints, the runner's side: when a policy's --save_best_metric beats its best so far, its learner is asked
to save a best checkpoint (the learner writes it and reports it back); a resumed learner reports the best it found
on disk, which is the bar to beat."""

from __future__ import annotations

import time
from collections.abc import Callable

from sample_factory.config import Config
from sample_factory.experiment.progress import ProgressTracker
from sample_factory.experiment.run_log import log

# A run's reward climbs for a long time, so nearly every check writes a new best checkpoint: the console gets the
# first of each policy and then at most one a minute (the latest); sf_log.txt gets every one.
BEST_LINE_INTERVAL_S = 60.0


class BestCheckpoints:
    def __init__(self, cfg: Config, request_save: Callable[[int, float], None]):
        self.cfg = cfg
        self.request_save = request_save  # (policy, metric value): ask the policy's learner for a best checkpoint
        self.best: list[float | None] = [None] * cfg.num_policies
        self.line_at: dict[int, float] = {}  # policy -> when its last new-best line went to the console

    def check(self, progress: ProgressTracker) -> None:
        """Ask for a best checkpoint for every policy whose metric is a new maximum (None: too few episodes)."""
        if self.cfg.evaluation_run or progress.total_env_frames() < self.cfg.save_best_after:
            return
        for p in range(self.cfg.num_policies):
            value, best = progress.metric(p, self.cfg.save_best_metric), self.best[p]
            if value is not None and (best is None or value > best):
                self.best[p] = value
                self.request_save(p, value)

    def on_resumed_best(self, policy: int, value: float) -> None:
        self.best[policy] = value

    def on_saved(self, policy: int, path: str) -> None:
        now = time.monotonic()
        last = self.line_at.get(policy)
        console = last is None or now - last >= BEST_LINE_INTERVAL_S
        if console:
            self.line_at[policy] = now
        log(f"policy {policy}: new best checkpoint {path}", console=console)
