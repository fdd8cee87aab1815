"""Ranks 1.. of a policy's data-parallel learner group (--learners_per_policy > 1). Such a rank takes no rollouts and
publishes nothing: it waits for rank 0's `RankWork` (which trajectories of the shared slots are its share), copies
them out of shared memory itself, and trains in step with the other ranks (algo/data_parallel.py). It stops when
rank 0 says so (`RankDone`), so that rank 0 is never left alone in a collective: the runner's STOP only makes it
wait for that, or for rank 0's death, at most --shutdown_timeout_sec."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sample_factory.runtime.heartbeat import process_alive
from sample_factory.runtime.messages import RANK_DONE, RANK_WORK, STOP, RankWork
from sample_factory.workers.batch_sources import RankBatches
from sample_factory.workers.learner import Learner

if TYPE_CHECKING:
    from sample_factory.algo.data_parallel import DataParallel


class LearnerRank(Learner):
    role = "learner"

    def _joined(self, dp: DataParallel, pin_memory: bool) -> None:
        self.shares = RankBatches(dp, self.buffers, self.batch_keys, pin_memory)

    def init(self) -> None:
        super().init()
        self.activity = "waiting for rank 0"
        self.stop_asked: float | None = None  # when the runner's STOP arrived

    def _stop_requested(self) -> bool:
        """Between SGD steps: signs of life only; whether to stop is rank 0's decision (Algorithm.should_stop)."""
        self._mark_busy()
        self.step_heartbeat.beat(self.activity)
        return False

    def on_messages(self, msgs: list[tuple]) -> None:
        for msg in msgs:
            if msg[0] == RANK_WORK:
                with self._group_failure():
                    self._work(RankWork._make(msg))
            elif msg[0] == RANK_DONE:
                self.stopped = True
            elif msg[0] == STOP and self.stop_asked is None:
                self.stop_asked = time.monotonic()

    def on_idle(self) -> None:
        if self.stop_asked is None or self.stopped:
            return
        if not process_alive(self.leader_pid) or time.monotonic() - self.stop_asked > self.cfg.shutdown_timeout_sec:
            self.stopped = True

    def _work(self, work: RankWork) -> None:
        self._mark_busy()
        self.activity = "copying a batch"
        self.version, self.env_frames = work.version, work.env_frames
        with self.timing.add("copy_batch"):
            batch = self.shares.take(work)
        self.activity = "training"
        with self.timing.add("train"):
            self.algo.update_learning_rate(self.env_frames)
            _, self.version = self.algo.train(batch, self.version, self.policy_id)
        self._check_nonfinite()
        self.activity = "waiting for rank 0"

    def finish(self) -> None:
        self.dp.leave()  # rank 0 writes the checkpoints
