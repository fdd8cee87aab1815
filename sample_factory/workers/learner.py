"""Learner (one per policy): collects finished rollout slots, copies an iteration's worth out of shared memory,
returns the slots to their actor workers at once (so collection continues while it trains), trains with the
algorithm object, and publishes the new weights with their version.

Backpressure: slots it has not consumed yet stay out of the actors' pools, and the pools are bounded
(shared_buffers.slots_per_split_for), so when training falls behind the actors park splits instead of
growing any queue.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import math
import os
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch

from sample_factory.algo.base import forward_autocast
from sample_factory.algo.ranks import Ranks, SingleRank
from sample_factory.algo.registry import make_algorithm
from sample_factory.config import Config, reproducible
from sample_factory.experiment.callbacks import Callbacks, call_hook, make_callbacks
from sample_factory.experiment.checkpoints import (
    CheckpointError,
    best_metric_of,
    checkpoint_dir,
    list_best_checkpoints,
    load_policy_checkpoint,
    save_best_checkpoint,
    save_checkpoint,
    save_milestone,
)
from sample_factory.model.activations import pin_kernels
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.compile import compile_for_role, warm_up
from sample_factory.pbt.population import apply_hyperparams
from sample_factory.runtime.component import Component
from sample_factory.runtime.device import bind_device, torch_device
from sample_factory.runtime.heartbeat import Heartbeat
from sample_factory.runtime.messages import (
    PARK_AFTER,
    PBT_UPDATE,
    ROLLOUT,
    SAVE_BEST,
    SAVE_NOW,
    STOP,
    Channels,
    FreeSlots,
    Message,
)
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers
from sample_factory.workers.batch_sources import BatchSource, LeaderBatches, LocalBatches
from sample_factory.workers.pending_rollout import PendingRollout

if TYPE_CHECKING:  # torch.distributed is imported by data-parallel learners only
    from sample_factory.algo.data_parallel import DataParallel


class GroupFailedError(RuntimeError):
    """A data-parallel group's collective failed: one line in the log (SF_DEBUG=1: with the traceback)."""

    user_facing = True


class Learner(Component):
    role = "learner"
    # the policy's learners: this one alone, or with --learners_per_policy > 1 this rank's collectives
    # (algo/data_parallel.py, set in init)
    dp: Ranks = SingleRank()
    source: BatchSource | None = None  # where batches come from (set in init)
    group_failed = False  # a collective failed: the weights may be mid-step, no final checkpoint
    sync = False  # sync mode's whole iterations (set in __init__)
    generation: np.ndarray  # view of the actors' generations [num_workers] (bind_views)
    held: tuple[PendingRollout, ...] = ()  # sync: the slots kept once the budget is spent

    def __init__(
        self,
        cfg: Config,
        policy_id: int,
        buffers: TrajectoryBuffers,
        channels: Channels,
        weights: SharedWeights,
        obs_space: gym.Space,
        action_space: gym.Space,
        all_weights: list[SharedWeights] | None = None,
        hyperparams: dict[str, float] | None = None,
        rank: int = 0,
        group: tuple[str, str] | None = None,
    ):
        """rank, group: this learner's rank in its policy's data-parallel group (--learners_per_policy) and the
        group's (rendezvous file, torch.distributed backend); ranks >= 1 are `LearnerRank`s
        (workers/learner_rank.py), keyed (policy_id, rank)."""
        index, inbox = (policy_id, channels.learner[policy_id]) if rank == 0 else ((policy_id, rank), None)
        super().__init__(index, inbox or channels.learner_ranks[policy_id, rank], channels.report)
        self.rank, self.group = rank, group
        if hyperparams is not None:  # PBT: this learner's own hyperparameters (serial mode shares one cfg object)
            cfg = copy.copy(cfg)
            apply_hyperparams(cfg, hyperparams)
        self.all_weights = all_weights or [weights]  # PBT replacements load another policy's published weights
        self.cfg, self.policy_id, self.buffers, self.channels = cfg, policy_id, buffers, channels
        self.weights, self.obs_space, self.action_space = weights, obs_space, action_space
        self.num_threads = cfg.learner_main_loop_num_cores
        self.niceness = cfg.default_niceness or None  # 0: the runner's
        slot_samples = buffers.spec.samples_per_slot
        # trajectories (slot columns) one iteration trains on: whole slots' worth
        slots_per_iteration = math.ceil(cfg.batch_size * cfg.num_batches_per_epoch / slot_samples)
        self.columns_per_iteration = slots_per_iteration * buffers.spec.agents_per_split
        self.all_columns = torch.arange(buffers.spec.agents_per_split)
        # Never hold more than a 1/P share of the slots that are not being filled: if every slot is held by some
        # learner, one of them then trains on what it has, so the actors always get slots back.
        assert cfg.num_workers is not None, "parse_cfg resolves --num_workers"
        filling = cfg.num_workers * cfg.worker_num_splits
        self.max_held_slots = max(1, (buffers.spec.num_slots - filling) // cfg.num_policies)
        self.callbacks: Callbacks | None = None  # the user's hooks (--callbacks), built in init
        self.pending: list[PendingRollout] = []  # oldest first
        # Sync mode: an iteration is every slot (each learner gets each slot, with several policies too), trained in
        # slot order, i.e. (worker, split, rollout), and none past the env-step budget: the same batches in every run.
        self.sync = not cfg.async_rl and not cfg.sampler_only and not cfg.evaluation_run
        self.run_env_frames = np.zeros(cfg.num_policies, dtype=np.int64)  # sync: every policy's trained env frames
        self.sync_iterations = 0  # sync: iterations trained (or passed, with none of this policy's steps) this session
        self.park_after: int | None = None  # sync: keep the slots after this iteration (ParkAfter: a Ctrl+C stop)
        self.discarded_rollouts = 0
        self.early: list[tuple] = []  # messages taken from the inbox during an iteration, handled after it
        self.stop_arrived = False  # a STOP is among them
        # (version, env frames) of a checkpoint that could not be written (a full disk): not tried again at the stop
        self.failed_save: tuple[int, int] | None = None

    def init(self) -> None:
        cfg = self.cfg
        self.device = torch_device(cfg.device)
        if reproducible(cfg):
            pin_kernels(self.device)
        bind_device(self.device)
        self.callbacks = make_callbacks(cfg)
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed * 7919 + self.policy_id)
        self.model = ActorCritic(cfg, self.obs_space, self.action_space)
        self.weights.load_into(self.model)  # the runner's initial weights: identical in every process
        self.model.to(self.device).train()
        self.algo = make_algorithm(cfg, self.model, self.device)
        self.algo.stop_check = self._stop_requested
        # only what the algorithm reads is copied out of shared memory (plus policy ids to count a policy's samples)
        self.batch_keys = {*self.algo.required_buffers, *(("policy_id",) if cfg.num_policies > 1 else ())}
        pin = self.device.type == "cuda"
        if cfg.learners_per_policy > 1:  # torch.distributed is imported by data-parallel learners only
            from sample_factory.algo.data_parallel import init_group

            assert self.group is not None, "a data-parallel learner is given its group (runtime/placement.py)"
            store, backend = self.group
            with self._alive_while("joining the learner group"):
                n, timeout = cfg.learners_per_policy, cfg.collective_timeout_sec
                dp = init_group(self.rank, n, store, backend, timeout, self.device)
            self.algo.dp = self.dp = dp
            self._joined(dp, pin)
        else:
            self.source = LocalBatches(self.buffers, self.batch_keys, pin, whole_slots=cfg.num_policies == 1)
        # after make_algorithm: copies it makes (DQN's target network) stay eager
        if compile_for_role(self.model, cfg, "learner", lambda line: self.report("note", line)):
            rows = self.columns_per_iteration // max(cfg.num_batches_per_epoch, 1) * (cfg.rollout + 1)
            warm_up(self.model, self.obs_space, self.device, rows, train=True, autocast=forward_autocast(self.algo))
        # heartbeats between SGD steps: one iteration may outlast --heartbeat_timeout_sec (DQN on a loaded CPU)
        self.step_heartbeat = Heartbeat(self.report, cfg.heartbeat_interval)
        self.version = 0
        self.env_frames = 0
        self.ckpt_dir = checkpoint_dir(cfg, self.policy_id)
        # The runner already loaded (and reported on) the same files.
        # Loaded to CPU: weights and optimizer moments are copied onto the device by their load_state_dict, and a saved
        # replay buffer (GBs with --save_replay_buffer) goes where the buffer lives (--replay_buffer_device).
        loaded = load_policy_checkpoint(self.cfg, self.policy_id, map_location="cpu", quiet=True)
        if loaded is not None:
            state, path = loaded
            self.model.load_state_dict(state["model"])
            self.algo.load_state_dict(state["algo"])
            self.version, self.env_frames = state["policy_version"], state["env_steps"]  # the keys hold env frames
            self.run_env_frames[:] = state.get("run_env_steps", self.env_frames)
            if "rng" in state:
                torch.set_rng_state(state["rng"].cpu())
            if "cuda_rng" in state and self.device.type == "cuda":
                torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)
            if self.rank == 0:
                self.report("resumed", {"path": str(path), "env_steps": self.env_frames, "version": self.version})
        self.dp.sync_start(self.model)  # every rank starts from rank 0's weights, statistics and random state
        self.leader_pid = self.dp.broadcast_object(os.getpid())
        best = list_best_checkpoints(self.ckpt_dir)
        if best and self.rank == 0:
            self.report("best_metric", best_metric_of(best[-1]))
        if self.rank == 0:
            self.weights.publish(self.model, self.version)
        self.bind_views()
        if self.sync and self.rank == 0:
            self._report_sync()
        self.last_save = self.last_milestone = time.monotonic()
        self.activity = "waiting for rollouts"

    _view_attrs = ("generation",)

    def bind_views(self) -> None:
        self.generation = self.buffers.generation.numpy()

    def on_message(self, msg: Message) -> None:
        if msg.kind == ROLLOUT:
            if self.cfg.num_policies == 1:
                cols = self.all_columns
            else:  # a slot of several policies: only the trajectories this policy acted in
                own = (self.buffers.policy_id[msg.slot, :-1] == self.policy_id).any(0)  # [n]
                cols = torch.nonzero(own).squeeze(1)
            self.pending.append(PendingRollout(msg.slot, msg.actor_idx, msg.gen, cols))
        elif msg.kind == SAVE_NOW:
            self.save()
        elif msg.kind == SAVE_BEST:
            with self._alive_while("saving a checkpoint"):
                state = self._state()
                path = save_best_checkpoint(self.ckpt_dir, state, self.version, self.env_frames, msg.metric_value)
            self.report("best_checkpoint", str(path))
            call_hook(self.callbacks, "on_checkpoint", self.policy_id, str(path), "best")
        elif msg.kind == PBT_UPDATE:
            self._pbt_update(msg.hyperparams, msg.source_policy)
        elif msg.kind == PARK_AFTER:
            # The runner picks an iteration no learner has begun; one that has (its report still on the way) parks
            # after its next one instead, and the actors then say their envs do not match the checkpoints.
            self.park_after = max(msg.iteration, self.sync_iterations + 1)
        else:
            raise RuntimeError(f"learner {self.policy_id}: unexpected message {msg!r}")

    def _drop_stale(self) -> None:
        """Rollouts of an actor worker that crashed and was replaced: its slots now belong to the new worker."""
        fresh = [p for p in self.pending if p.gen == self.generation[p.actor_idx]]
        if len(fresh) != len(self.pending):
            self.discarded_rollouts += len(self.pending) - len(fresh)
            self.report("discarded_rollouts", len(self.pending) - len(fresh))
            self.pending = fresh

    def on_idle(self) -> None:
        if self.held and not self._budget_spent() and not self._parked():  # a serial-mode resume, larger budget
            self._return_slots(list(self.held))
            self.held = ()
        self._drop_stale()
        # Train on the rollouts pending now, not on those that arrive meanwhile (a learner that is always behind
        # must still come back for periodic saves and heartbeats), and look at the inbox between iterations so that
        # a STOP does not wait behind the backlog (seen: "learner 0 did not stop in time", no final checkpoint).
        # Within an iteration the algorithm asks between SGD steps (`_stop_requested`), so that one long
        # iteration does not outlast --shutdown_timeout_sec either.
        budget = len(self.pending)
        while not self.stopped and budget > 0 and (taken := self._take_iteration()):
            budget -= len(taken)
            with self._group_failure():
                self._iteration(taken)
            msgs, self.early = self.early + self.inbox.get_many(block=False), []
            if msgs:
                self.on_messages(msgs)
        if self.cfg.evaluation_run or self.stopped:
            return  # an evaluation never writes into the experiment; a stopping learner saves in `finish`
        now = time.monotonic()
        if now - self.last_save > self.cfg.save_every_sec:
            self.save()
        if 0 < self.cfg.save_milestones_sec < now - self.last_milestone:
            self.last_milestone = now
            with self._alive_while("saving a checkpoint"):
                path = save_milestone(self.ckpt_dir, self._state(), self.version, self.env_frames)
            call_hook(self.callbacks, "on_checkpoint", self.policy_id, str(path), "milestone")

    def _mark_busy(self) -> None:
        """Tell the actors (shared memory) that this learner is working, so they wait for their slots."""
        self.buffers.learner_busy[self.policy_id] = time.monotonic()

    def _stop_requested(self) -> bool:
        """Asked by the algorithm between SGD steps: whether a STOP has arrived. What it takes from the inbox is
        kept, in order, and handled after the iteration."""
        self._mark_busy()
        self.step_heartbeat.beat(self.activity)
        if msgs := self.inbox.get_many(block=False):
            self.early += msgs
            self.stop_arrived = self.stop_arrived or any(m[0] == STOP for m in msgs)
        return self.stop_arrived

    def _take_iteration(self) -> list[PendingRollout] | None:
        """The oldest pending slots that hold an iteration's worth of this policy's trajectories, if there are.
        Sync mode: every slot, in slot order."""
        if self.sync:
            if len(self.pending) < self.buffers.spec.num_slots:
                return None
            taken, self.pending = sorted(self.pending, key=lambda p: p.slot), []
            return taken
        count = 0
        for i, p in enumerate(self.pending):
            count += len(p.cols)
            if count >= self.columns_per_iteration:
                taken, self.pending = self.pending[: i + 1], self.pending[i + 1 :]
                return taken
        if self.cfg.num_policies > 1 and len(self.pending) >= self.max_held_slots:  # smaller batch, no starving
            taken, self.pending = self.pending, []
            return taken
        return None

    def _iteration(self, taken: list[PendingRollout]) -> None:
        source = self.source
        assert source is not None  # set by init
        if source.too_few_rows(taken):  # several policies' small batch: a rank of a group would get none
            self._return_slots(taken)
            self.report("discarded_rollouts", len(taken))
            return
        self._mark_busy()
        self.activity = "copying a batch"
        slots = [p.slot for p in taken]
        columns = None if self.cfg.num_policies == 1 else [p.cols for p in taken]
        fpes = self.cfg.frames_per_env_step
        if self.cfg.num_policies == 1:
            samples = len(taken) * self.buffers.spec.samples_per_slot
            counts = np.array([samples])
        else:  # the columns may hold steps of other policies too (an env passes to another policy)
            ids = self.buffers.gather(slots, None if self.sync else columns, ("policy_id",))["policy_id"]
            counts = np.bincount(ids[:, :-1].reshape(-1).numpy(), minlength=self.cfg.num_policies)
            samples = int(counts[self.policy_id])
        if self._budget_spent():  # a run resumed past its budget: the runner stops at once (the slots are kept)
            self.held = (*self.held, *taken)
            return
        env_frames = self.env_frames + samples * fpes  # agent steps x --frames_per_env_step (frames on Atari)
        if self.sync and samples == 0:  # none of this policy's steps in the iteration: nothing to train on
            self.run_env_frames += counts * fpes
            self.sync_iterations += 1
            if self._budget_spent() or self._parked():
                self.held = (*self.held, *taken)
            else:
                self._return_slots(taken)
            self._report_sync()
            return
        with self.timing.add("copy_batch"):
            # (in a data-parallel group the other ranks copy their shares meanwhile; all have copied when it returns)
            batch = source.take(taken, self.version, env_frames)
            if self.cfg.async_rl or self.cfg.sampler_only:
                self._return_slots(taken)  # collection continues while we train
        if self.cfg.sampler_only:
            self.env_frames = env_frames
            self.report("train", {"samples": samples, "env_steps": self.env_frames, "version": self.version})
            return
        self.activity = "training"
        trained_before = self.timing.get("train", 0.0)
        with self.timing.add("train"):
            self.algo.update_learning_rate(env_frames)
            stats, self.version = self.algo.train(batch, self.version, self.policy_id)
        for line in self.algo.notes:
            self.report("note", line)
        self.algo.notes.clear()
        if self.algo.iteration_unused:  # a stop came first: its samples are not trained on, nothing to publish
            if not self.cfg.async_rl:
                self._return_slots(taken)
            self.activity = "waiting for rollouts"
            return
        self.env_frames = env_frames  # only now: a failed iteration's samples are not counted as trained on
        self.run_env_frames += counts * fpes
        self.sync_iterations += 1
        train_time = self.timing["train"] - trained_before
        self._check_nonfinite()
        with self.timing.add("publish_weights"):
            self.weights.publish(self.model, self.version)
        # the actors stop at the end of the last iteration (a reproducible run saves them)
        if self._budget_spent() or self._parked():
            self.held = (*self.held, *taken)
        elif not self.cfg.async_rl:
            self._return_slots(taken)  # only now: the next batch is collected with the weights just published
        # "env_steps" (here and in the reports, checkpoints): env frames, under the name runs and callbacks read
        stats.update(env_steps=self.env_frames, version=self.version, train_time=train_time)
        call_hook(self.callbacks, "on_training_result", self.policy_id, stats)
        self.report("train", stats)
        lag_counts = getattr(self.algo, "lag_counts", None)  # (an algorithm that measures lag)
        if lag_counts is not None:
            self.report("lag_counts", lag_counts.tolist())
            self.algo.lag_counts = None
        if self.sync:
            self._report_sync()
        self.activity = "waiting for rollouts"

    def _parked(self) -> bool:
        """Sync mode, stopping on Ctrl+C: the iteration after which the runner stops has been trained."""
        return self.park_after is not None and self.sync_iterations >= self.park_after

    def _report_sync(self) -> None:
        """Sync mode: every policy's trained env frames (the budget stop) and the iterations of this session."""
        self.report("sync_trained", (int(self.run_env_frames.min()), self.sync_iterations))

    def _budget_spent(self) -> bool:
        """Sync mode: every policy has trained --train_for_env_steps (the runner stops after this iteration)."""
        return self.sync and self.run_env_frames.min() >= self.cfg.train_for_env_steps

    def _check_nonfinite(self) -> None:
        if self.algo.consecutive_skipped > self.cfg.max_nonfinite_updates:
            raise RuntimeError(
                f"{self.algo.consecutive_skipped} consecutive updates had a NaN/inf loss or gradient "
                f"(--max_nonfinite_updates={self.cfg.max_nonfinite_updates}); stopping instead of training garbage"
            )

    @contextlib.contextmanager
    def _group_failure(self) -> Iterator[None]:
        """An iteration of a data-parallel rank: an error in it (a rank died: the collectives fail, or time out
        after --collective_timeout_sec) fails this rank with a line that says so, and no final checkpoint is
        written from weights that may be mid-step; the run resumes from the last checkpoint. One learner's errors
        are its own."""
        try:
            yield
        except Exception as e:
            if self.dp.world == 1:
                raise
            self.group_failed = True
            error = GroupFailedError(
                f"learner rank {self.rank} of policy {self.policy_id}: the data-parallel group failed "
                f"(a rank died or stalled past --collective_timeout_sec={self.cfg.collective_timeout_sec:g}); "
                f"resume from the last checkpoint: {type(e).__name__}: {e}"
            )
            raise error from e

    def _pbt_update(self, hyperparams: dict[str, float], source: int | None) -> None:
        """New hyperparameters; for a replacement also the source policy's latest published weights (normalizer
        statistics included), after which the algorithm drops its state tied to the old weights (optimizer moments)."""
        self.cfg = copy.copy(self.cfg)  # never the object other components share (serial mode)
        apply_hyperparams(self.cfg, hyperparams)
        self.algo.update_cfg(self.cfg)
        if source is not None:
            self.all_weights[source].load_into(self.model)
            self.algo.on_weights_replaced()
            self.version += 1
            self.weights.publish(self.model, self.version)

    def _return_slots(self, taken: list[PendingRollout]) -> None:
        by_worker: dict[tuple[int, int], list[int]] = collections.defaultdict(list)  # (actor_idx, gen) -> slots
        for p in taken:
            by_worker[p.actor_idx, p.gen].append(p.slot)
        for (actor_idx, gen), slots in by_worker.items():
            self.channels.actor[actor_idx].put(FreeSlots.wire(slots, gen))

    def _state(self) -> dict:
        """Everything needed to continue training exactly: weights, algorithm state (optimizer), counters, RNG."""
        state = {
            "model": self.model.state_dict(),
            "algo": self.algo.state_dict(),
            "policy_version": self.version,
            "env_steps": self.env_frames,
            "run_env_steps": self.run_env_frames.tolist(),  # every policy's (sync mode's budget)
            "rng": torch.get_rng_state(),
            "cfg": vars(self.cfg),
        }
        if self.device.type == "cuda":  # minibatch permutations are drawn on the training device
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return state

    def save(self, weights_first: bool = False) -> None:
        """`weights_first` (the final save): with a replay buffer in the checkpoint, the same checkpoint without it
        is written first (seconds), then replaced by the whole one (minutes for gigabytes): a kill that comes before
        the buffer is written (a launcher's or Slurm's wait running out) keeps the training, and only the buffer
        refills on resume."""
        self.activity = "saving a checkpoint"
        with self.timing.add("save_checkpoint"), self._alive_while(self.activity):
            try:
                state, keep = self._state(), self.cfg.keep_checkpoints
                if weights_first and "replay" in state["algo"]:
                    light = {**state, "algo": {k: v for k, v in state["algo"].items() if k != "replay"}}
                    save_checkpoint(self.ckpt_dir, light, self.version, self.env_frames, keep)
                path = save_checkpoint(self.ckpt_dir, state, self.version, self.env_frames, keep)
            except CheckpointError:
                self.failed_save = (self.version, self.env_frames)
                raise
        self.last_save = time.monotonic()
        self.report("checkpoint", str(path))
        call_hook(self.callbacks, "on_checkpoint", self.policy_id, str(path), "latest")

    @contextlib.contextmanager
    def _alive_while(self, activity: str) -> Iterator[None]:
        """Heartbeats (and the busy mark the actors read) from a thread while the main thread writes a checkpoint:
        with the replay buffer in it (--save_replay_buffer) a write takes minutes (7.5 s per GiB measured on the
        2-core machine; 4 GB for the atari_dqn preset's buffer), and a learner silent for --heartbeat_timeout_sec
        stops the run, or at shutdown is terminated before its final checkpoint is written; actors waiting for its
        slots would give up. Only this thread reports meanwhile: the main thread is inside torch.save."""
        done = threading.Event()
        interval = max(self.cfg.heartbeat_interval, 0.1)

        def beat() -> None:
            self._mark_busy()
            while not done.wait(interval):
                self.report("heartbeat", activity)
                self._mark_busy()

        thread = threading.Thread(target=beat, name="checkpoint-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _joined(self, dp: DataParallel, pin_memory: bool) -> None:
        """Rank 0 has joined its data-parallel group: it hands out every iteration's shares."""
        ranks = [self.channels.learner_ranks[self.policy_id, r] for r in range(1, dp.world)]
        whole = getattr(self.algo, "whole_batch_on_rank0", False)
        self.source = LeaderBatches(dp, self.buffers, self.batch_keys, pin_memory, ranks, whole)

    def finish(self) -> None:
        if self.source is not None:
            self.source.close()
        # only a learner that started properly may write checkpoints
        # (a save that just failed, e.g. on a full disk, is not tried again for the same state: one error line)
        if (
            self.initialized
            and not self.cfg.evaluation_run
            and not self.group_failed
            and self.failed_save != (self.version, self.env_frames)
        ):
            self.save(weights_first=True)
        self.dp.leave()
