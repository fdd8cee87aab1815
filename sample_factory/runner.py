"""Runner: the parent process. Resolves the config, probes the env, allocates shared memory, starts every
component (processes, or one thread in serial mode), reads reports, prints progress, writes summaries, decides
when to stop and shuts everything down. It steps no env and trains nothing."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sample_factory.algo.registry import algorithm_class
from sample_factory.config import Config, reproducible
from sample_factory.config.parse import defaults_line
from sample_factory.envs.env_utils import env_backend, episode_limit_note, probe_env, set_step_units
from sample_factory.evaluation.periodic_eval import PeriodicEvaluator
from sample_factory.experiment.best_checkpoints import BestCheckpoints
from sample_factory.experiment.callbacks import Callbacks, call_hook, make_callbacks
from sample_factory.experiment.checkpoints import (
    check_model_fits,
    checkpoint_dir,
    list_checkpoints,
    load_policy_checkpoint,
    newest_checkpoint_since,
    remove_partial_writes,
)
from sample_factory.experiment.episode_windows import checkpoint_env_steps, load_windows, save_window
from sample_factory.experiment.exit_codes import interrupted_exit_code
from sample_factory.experiment.folder import (
    experiment_dir,
    folder_entries,
    prepare_experiment_dir,
    remove_created,
    write_cfg_json,
)
from sample_factory.experiment.run_log import log
from sample_factory.experiment.summaries import (
    IterationSamples,
    ProgressPoints,
    ProgressTracker,
    SummaryWriteError,
    SummaryWriters,
)
from sample_factory.model import activations
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.precision import resolve_auto_precision
from sample_factory.pbt.controller import PbtController
from sample_factory.runtime.component import TERMINATED, Component, ComponentKey, SerialDriver
from sample_factory.runtime.device import resolve_device_name, torch_device
from sample_factory.runtime.fork_server import mp_context
from sample_factory.runtime.heartbeat import enable_stack_dumps
from sample_factory.runtime.messages import REPORT, Channels, ParkAfter, Report, SaveBest, SaveNow
from sample_factory.runtime.placement import place_components
from sample_factory.runtime.reproducible import StopBetweenIterations
from sample_factory.runtime.serial_snapshot import load_snapshot, save_snapshot
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers, make_buffer_spec
from sample_factory.runtime.supervisor import RESTARTABLE, Supervisor
from sample_factory.workers.learner import Learner
from sample_factory.workers.roles import RunComponents


class Runner:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.stop_reason: str | None = None
        self.exit_code = 0
        self.signals_received = 0
        self.interrupted_by: int | None = None  # the signal that stopped the run before its stop condition
        self.stop_between: StopBetweenIterations | None = None  # a reproducible multi-process run's Ctrl+C
        self.best = BestCheckpoints(cfg, lambda p, value: self.channels.learner[p].put(SaveBest.wire(value)))
        # Set up by `setup` and `_start`; None until then (shutdown releases only what exists).
        self.exp_dir: Path | None = None
        self.lock: Any = None  # the experiment folder's lock (None for evaluation runs)
        self.ctx: Any = None  # multiprocessing context (None in serial mode)
        self.obs_space: gym.Space | None = None
        self.action_space: gym.Space | None = None
        self.num_agents = 0
        self.buffers: TrajectoryBuffers | None = None
        self.weights: list[SharedWeights] = []  # one per policy
        self.resumed_env_steps: list[int] = []  # per policy: where a resumed run continues from
        self.channels: Channels | None = None
        self.pbt: PbtController | None = None
        self.roles: RunComponents | None = None  # makes the component of each role (at the start, for restarts)
        self.components: list[Component] = []
        self.progress: ProgressTracker | None = None
        self.points: ProgressPoints | None = None  # set when the main loop starts
        self.evaluator: PeriodicEvaluator | None = None
        self.summaries: SummaryWriters | None = None
        self.supervisor: Supervisor | None = None  # process mode
        self.driver: SerialDriver | None = None  # serial mode
        self.start_time: float | None = None  # time.monotonic() when the components were started
        # Until every learner is up, a failed run undoes what it wrote (`_undo_failed_start`): its cfg.json would
        # otherwise make the corrected command resume with the flags that failed.
        self.started_ok = False
        self.learners_up: set[ComponentKey] = set()
        self.folder_before: set[str] | None = None  # the folder's entries before a new run made it (None: fresh)
        self.previous_cfg: bytes | None = None  # a resumed run's cfg.json as it was before this command
        self.callbacks: Callbacks | None = None  # the runner process's instance of --callbacks
        self.remote: Any = None  # --sampler_nodes: distributed.remote_samplers.RemoteSamplers
        self.iteration_samples: IterationSamples | None = None  # sync mode: samples counted by whole iterations
        # report kind -> handler. Every report is a sign of life for the supervisor's monitor, which is all that
        # "started" and "heartbeat" are.
        self.report_handlers: dict[str, Callable[[Report], None]] = {
            "started": self._on_started,
            "note": self._on_note,
            "samples": self._on_samples,
            "split_samples": self._on_split_samples,
            "sync_trained": self._on_sync_trained,
            "lag_counts": lambda r: self.progress.add_lag_counts(r.index, r.payload),
            "train": self._on_train,
            "inference": self._on_inference,
            "resumed": self._on_resumed,
            "best_checkpoint": lambda r: self.best.on_saved(r.index, r.payload),
            "best_metric": lambda r: self.best.on_resumed_best(r.index, r.payload),
            "checkpoint": self._on_checkpoint,
            "timing": self._on_timing,
            "discarded_rollouts": self._on_discarded_rollouts,
            "error": self._on_error,
            "finished": self._on_finished,
        }

    # ---- set-up -------------------------------------------------------------------------------------------
    def setup(self) -> None:
        cfg = self.cfg
        enable_stack_dumps()
        cfg.device = resolve_device_name(
            cfg.device
        )  # --device is never taken from cfg.json: check it before creating anything
        # First the folder (lock, resume merge: the saved cfg may change what follows), then the env.
        if cfg.evaluation_run:
            # Evaluation reads the experiment and writes only eval_results.json: no lock, no cfg.json rewrite.
            self.exp_dir, what, self.lock = experiment_dir(cfg), "evaluating", None
            if not (self.exp_dir / "cfg.json").exists():
                raise FileNotFoundError(f"no experiment at {self.exp_dir}")
        else:
            before = folder_entries(experiment_dir(cfg))
            saved_cfg = experiment_dir(cfg) / "cfg.json"
            previous = saved_cfg.read_bytes() if saved_cfg.is_file() else None
            self.exp_dir, what, self.lock = prepare_experiment_dir(cfg, log)
            if what.startswith("resuming"):
                self.previous_cfg = previous
            else:  # a new folder (restart and overwrite made it afresh)
                self.folder_before = before if what == "new experiment" else None
            log.open(self.exp_dir / "sf_log.txt")
        log(f"{what}: {self.exp_dir}")
        if "experiment" not in cfg.cli_flags and not cfg.evaluation_run:
            name = cfg.experiment
            log(f"no --experiment: this run is {name}; the same command resumes it (or --experiment={name})")
        log(defaults_line(cfg))
        set_step_units(cfg)  # before any component copies cfg
        if cfg.env_backend == "auto":  # cfg.json keeps auto; every component gets the resolved backend
            cfg.env_backend = env_backend(cfg)
            log(f"--env_backend=auto: {cfg.env_backend}")
        if note := episode_limit_note(cfg):
            log(note)
        self.callbacks = make_callbacks(cfg)
        if reproducible(cfg):  # in serial mode the components run here
            activations.pin_kernels(torch_device(cfg.device) if cfg.serial_mode else torch.device("cpu"))
        if cfg.serial_mode:
            # Serial mode promises bit-identical weights for a seed, so no kernel may be picked by timing: tanh's
            # sigmoid identity (model/activations.py) differs from torch.tanh in the last bits, and which of the two
            # is "faster" flips from run to run on a loaded CPU (two outcomes among 6 concurrent runs). torch's own.
            activations.USE_IDENTITY = False
        if cfg.seed is not None:
            torch.manual_seed(cfg.seed)
            np.random.seed(cfg.seed)
        self.ctx = None if cfg.serial_mode else mp_context()
        # Through the same context: this also starts the fork server, which preloads torch for all children.
        env_info = probe_env(cfg, False if cfg.serial_mode else self.ctx)
        algorithm_class(cfg).check_spaces(cfg, env_info[0], env_info[1])
        self.obs_space, self.action_space, self.num_agents, reward_shaping, left_out = env_info
        if left_out:
            reads = ", ".join(self.obs_space.spaces)
            log(f"observation keys left out: {', '.join(left_out)}; the model reads {reads} (--obs_keys chooses)")
        # The initial weights are made once here, so policy workers and learners start identical.
        model = ActorCritic(cfg, self.obs_space, self.action_space)
        resolve_auto_precision(cfg, model, self.obs_space, log)  # before any component gets a copy of cfg
        spec = make_buffer_spec(cfg, self.obs_space, self.action_space, model.rnn_state_size, self.num_agents)
        if cfg.sampler_nodes > 0 and not cfg.evaluation_run:  # Ray is optional: imported only here
            from sample_factory.distributed.remote_samplers import RemoteSamplers

            self.remote = RemoteSamplers(cfg, spec, log)  # adds the import slots to spec
        self.buffers = TrajectoryBuffers(spec, share=not cfg.serial_mode)
        self.weights, self.resumed_env_steps, resumed_steps = initial_weights(
            cfg, model, self.obs_space, self.action_space
        )
        resume_point = (tuple(w.version for w in self.weights), resumed_steps) if resumed_steps else None
        kind = "local" if cfg.serial_mode else cfg.message_queue
        self.channels = Channels(spec.num_workers, cfg.num_policies, kind, cfg.learners_per_policy)
        if cfg.with_pbt:  # with the published weights: their versions say which policies have trained
            self.pbt = PbtController(cfg, self.exp_dir, self.channels, log, reward_shaping, self.weights)
        self.roles = RunComponents(
            cfg,
            place_components(cfg, log),
            self.buffers,
            self.channels,
            self.weights,
            self.obs_space,
            self.action_space,
            hyperparams=lambda p: self.pbt.hyperparams(p) if self.pbt is not None else None,
            resume_point=resume_point,
        )
        self.components = [self.roles.make(role, index) for role, index in self.roles.keys()]
        self.progress = ProgressTracker(cfg)
        if not cfg.evaluation_run:
            self.progress.load_lag(self.exp_dir)
        if not cfg.async_rl and not cfg.evaluation_run:
            self.iteration_samples = IterationSamples(
                cfg.num_workers, cfg.worker_num_splits, spec.slots_per_split, cfg.train_for_env_steps
            )
            self.progress.trained_budget = [0] * cfg.num_policies
            if reproducible(cfg) and not cfg.serial_mode and cfg.sampler_nodes == 0:
                self.stop_between = StopBetweenIterations(
                    cfg.num_policies, lambda p, n: self.channels.learner[p].put(ParkAfter.wire(n))
                )
        self.evaluator = PeriodicEvaluator(
            cfg,
            self.exp_dir,
            request_checkpoint=lambda p: self.channels.learner[p].put(SaveNow.wire()),
            log=log,
            add_scalar=lambda p, tag, value, steps: self.summaries.add_scalar(p, tag, value, steps),
        )
        self.summaries = SummaryWriters(self.exp_dir, cfg.num_policies, enabled=not cfg.evaluation_run, cfg=cfg)
        self.supervisor = (
            None
            if cfg.serial_mode
            else Supervisor(
                cfg,
                self.ctx,
                self.roles.make,
                self.buffers,
                self.channels,
                log,
                self._on_worker_restarted,
                lock=self.lock,
            )
        )
        log(
            f"experiment {self.exp_dir} | env {cfg.env} obs {self.obs_space.shape} actions {self.action_space} | "
            f"{cfg.num_workers} workers x {cfg.num_envs_per_worker} envs, {spec.num_slots} trajectory slots "
            f"({self.buffers.nbytes() / 2**20:.1f} MiB) | device {cfg.device} | "
            f"{'serial' if cfg.serial_mode else 'async' if cfg.async_rl else 'sync'} mode"
        )

    # ---- running ------------------------------------------------------------------------------------------
    def run(self) -> int:
        old_handlers = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.setup()
            self._start()
            self._main_loop()
        except Exception as e:
            self.exit_code = 1
            log(f"ERROR: {type(e).__name__}: {e}")
            if os.environ.get("SF_DEBUG"):
                raise
        finally:
            try:
                self._shutdown()
            finally:
                log.close()
                for s, h in old_handlers.items():
                    signal.signal(s, h)
        return self.exit_code

    def _on_signal(self, signum, frame) -> None:
        self.signals_received += 1
        if self.stop_reason is None:
            if self.stop_between is not None and self.stop_between.request(signum):
                return  # the main loop stops the run between two iterations
            self.stop_reason = f"{signal.Signals(signum).name} received"
            self.interrupted_by = signum

    def _hurry(self) -> bool:
        """A second Ctrl+C (a third where the first was deferred to the end of an iteration) skips the waits."""
        deferred = self.stop_between is not None and self.stop_between.signum is not None
        return self.signals_received > 1 + deferred

    def _start(self) -> None:
        if self.remote is not None:  # first: a cluster that cannot be reached fails the run before it starts
            spaces = (self.obs_space, self.action_space, self.num_agents)
            self.remote.start(self.buffers, self.channels, self.weights[0], *spaces)
        self.start_time = time.monotonic()  # after the sampler nodes' start: --train_for_seconds is sampling time
        if self.cfg.serial_mode:
            # Every component shares this process; its thread count is the learner's.
            torch.set_num_threads(self.cfg.learner_main_loop_num_cores)
            if self._restore_serial_snapshot():
                self.driver = SerialDriver(self.components)
            else:
                self.driver = SerialDriver(self.components)
                self.driver.init()
            self._resume_records()
            self.started_ok = True
            self._experiment_started()
            return
        self._resume_records()
        for c in self.components:
            self.supervisor.start(c)
        self._experiment_started()

    def _resume_records(self) -> None:
        """progress.csv and the curves continue from the env steps this run resumes at (the checkpoint's, or the
        serial snapshot's): what a killed run recorded past them is dropped, so the env steps never go back."""
        if self.previous_cfg is None:  # not a resume
            return
        dropped = self.summaries.resume_at(self.resumed_env_steps)
        if dropped:
            log(
                f"progress.csv continues from the resumed {sum(self.resumed_env_steps)} env steps ({dropped} rows "
                f"past them dropped)"
            )

    def _experiment_started(self) -> None:
        if not self.cfg.evaluation_run:
            call_hook(self.callbacks, "on_experiment_start", self.cfg, self.exp_dir)

    def _on_worker_restarted(self, role: str, index: Any, reason: str, restarts: int) -> None:
        call_hook(self.callbacks, "on_worker_restarted", role, index, reason, restarts)

    def _learners(self) -> list[Learner]:
        return [c for c in self.components if isinstance(c, Learner)]

    def _restore_serial_snapshot(self) -> bool:
        latest = list_checkpoints(checkpoint_dir(self.cfg, 0))
        key = tuple(int(x) for x in latest[-1].stem.split("_")[1:3]) if latest else None
        state, why = load_snapshot(self.exp_dir, self.cfg, key)
        if state is None:
            if key is not None:
                log(f"{why}: resuming from the checkpoint instead")
            return False
        self.components, self.channels, self.buffers = state["components"], state["channels"], state["buffers"]
        for p, steps in enumerate(state["counters"]["env_steps"]):
            self.progress.resume(p, steps)
        for p, window in enumerate(state["counters"].get("episode_windows", [])):
            self.progress.restore_window(p, window)
        self.resumed_env_steps = list(state["counters"]["env_steps"])
        log(f"{why} at {sum(state['counters']['env_steps'])} env steps")
        return True

    def _save_serial_snapshot(self) -> None:
        learner = self._learners()[0]
        counters = {
            "checkpoint": (learner.version, learner.env_steps),
            "env_steps": list(self.progress.env_steps),
            "episode_windows": [self.progress.window(p) for p in range(self.cfg.num_policies)],
        }
        save_snapshot(self.exp_dir, self.cfg, self.components, self.channels, self.buffers, counters)

    def _periodic_eval(self) -> None:
        if self.evaluator.enabled:  # logs its results and writes them to each evaluated policy's summaries
            self.evaluator.update(self.progress.env_steps)

    def _main_loop(self) -> None:
        cfg = self.cfg
        last_print = last_summary = last_best = time.monotonic()
        per_iteration = self.iteration_samples is not None
        self.points = ProgressPoints(cfg.progress_every_env_steps, self.summaries, last_print, per_iteration)
        while self.stop_reason is None:
            if self.driver is not None:
                for _ in range(20):
                    if not self.driver.step():
                        break
                reports = self.channels.report.get_many(block=False)
            else:
                reports = self.channels.report.get_many(timeout=0.1)
            for r in reports:
                self._on_report(r)
            now = time.monotonic()
            if now - last_print >= cfg.report_interval_sec:
                last_print = now
                log(self.progress.line())
                self.points.report(self.progress, now)
            if not per_iteration:
                self.points.update(self.progress, now)
            self._periodic_eval()
            if now - last_best >= cfg.save_best_every_sec:
                last_best = now
                self.best.check(self.progress)
            if now - last_summary >= cfg.experiment_summaries_interval:
                last_summary = now
                self.summaries.write(self.progress)
                if self.pbt is not None:
                    self.pbt.write_summaries(self.summaries, self.progress)
            self._check_stop(now)

    def _on_report(self, msg: tuple) -> None:
        report = Report._make(msg)
        assert report.kind == REPORT, msg
        if self.supervisor is not None:
            activity = report.payload if report.report_kind == "heartbeat" else ""
            self.supervisor.monitor.seen(ComponentKey(report.role, report.index), activity)
        handler = self.report_handlers.get(report.report_kind)
        if handler is not None:
            handler(report)

    def _on_started(self, report: Report) -> None:
        if report.role == "learner" and not self.started_ok:
            self.learners_up.add(ComponentKey(report.role, report.index))
            self.started_ok = len(self.learners_up) == sum(c.role == "learner" for c in self.components)

    def _on_note(self, report: Report) -> None:
        log(f"{report.role} {report.index}: {report.payload}")

    def _on_samples(self, report: Report) -> None:
        policy, steps, episodes, stats = report.payload
        self.progress.add_samples(policy, steps, episodes, stats)

    def _on_split_samples(self, report: Report) -> None:
        split, rollout, reports = report.payload
        self.iteration_samples.add(report.index, split, rollout, reports)
        if self.stop_reason is None:  # after the stop, the counts stay those of the iterations trained on
            for _ in range(self.iteration_samples.apply(self.progress)):
                self.points.update(self.progress, time.monotonic())

    def _on_sync_trained(self, report: Report) -> None:
        self.progress.trained_budget[report.index], iterations = report.payload
        if self.stop_between is not None:
            self.stop_between.iterations[report.index] = iterations

    def _on_train(self, report: Report) -> None:
        self.progress.add_train_stats(report.index, report.payload)
        self.summaries.add_train_stats(report.index, report.payload)
        if self.pbt is not None and self.stop_reason is None:  # no decisions for learners that are stopping
            for decision in self.pbt.on_train_report(report.index, report.payload, self.progress):
                call_hook(self.callbacks, "on_pbt_decision", decision)

    def _on_inference(self, report: Report) -> None:
        self.progress.add_inference(*report.payload)

    def _on_resumed(self, report: Report) -> None:
        p, steps = report.index, report.payload["env_steps"]
        self.progress.resume(p, steps)
        window = load_windows(checkpoint_dir(self.cfg, p)).get(str(steps))
        if window is not None:
            self.progress.restore_window(p, window)
        kept = f", its last {len(window['episodes'])} episodes in the reward window" if window else ""
        log(f"policy {p} resumed from {report.payload['path']} at {steps} env steps{kept}")

    def _on_checkpoint(self, report: Report) -> None:
        self.progress.last_checkpoint[report.index] = report.payload
        steps = checkpoint_env_steps(report.payload)
        window = None if steps is None else self.progress.window_history[report.index].at(steps)
        if window is not None:
            try:
                save_window(checkpoint_dir(self.cfg, report.index), steps, window)
            except OSError as e:  # the checkpoint itself is written; a resume would start an empty window
                log(f"WARNING: could not save the episode window beside {report.payload}: {e}")
        self.evaluator.on_checkpoint(report.index, report.payload)

    def _on_timing(self, report: Report) -> None:
        self.progress.timing[report.role].append(report.payload)

    def _on_discarded_rollouts(self, report: Report) -> None:
        self.progress.discarded_rollouts += report.payload

    def _on_error(self, report: Report) -> None:
        message, trace, *fatal = report.payload
        if message == TERMINATED and self.interrupted_by == signal.SIGTERM:
            # The signal went to every process of the run (`kill` of the process group, Slurm's time limit): an
            # orderly stop like the runner's own (a learner saves as it exits), not a crash.
            log(f"{report.role} {report.index} got SIGTERM too: it finishes and exits")
            return
        log(f"ERROR in {report.role} {report.index}: {message}" + (f"\n{trace}" if trace else ""))
        if self.supervisor is None or report.role not in RESTARTABLE or any(fatal):
            self.exit_code = 1
            self.stop_reason = self.stop_reason or f"{report.role} {report.index} failed: {message}"

    def _on_finished(self, report: Report) -> None:
        if self.supervisor is not None:
            self.supervisor.on_finished(ComponentKey(report.role, report.index), report.payload)

    def _check_stop(self, now: float) -> None:
        if self.remote is not None and (why := self.remote.update(self.progress)) and self.stop_reason is None:
            self.stop_reason, self.exit_code = why, 1
        self.stop_reason = self.progress.stop_condition(now - self.start_time) or self.stop_reason
        if self.stop_reason is None and self.stop_between is not None and (signum := self.stop_between.poll(log)):
            self.stop_reason, self.interrupted_by = f"{signal.Signals(signum).name} received", signum
        if self.supervisor is not None and self.interrupted_by is None:  # on a signal, stop_all takes over
            fatal = self.supervisor.check(stopping=self.stop_reason is not None)
            if fatal:
                if self.exit_code == 0:  # else the failure that made it stop is the reason (not its exit)
                    self.stop_reason = fatal
                self.exit_code = 1

    # ---- shutdown -----------------------------------------------------------------------------------------
    def _shutdown(self) -> None:
        if self.stop_reason:
            log(f"stopping: {self.stop_reason}")
        if self.channels is None:
            self._undo_failed_start()
            if self.lock is not None:
                self.lock.release()
            return
        # STOPs go to actors first so no new rollouts arrive, then policy workers, then learners (which save
        # checkpoints); in serial mode every component is finished in turn.
        order = ("actor", "policy", "learner")
        if self.remote is not None:  # first: its importer feeds the learner
            try:
                self.remote.stop()
            except Exception as e:
                log(f"ERROR stopping the sampler nodes: {type(e).__name__}: {e}")
        if self.driver is not None:
            if self.exit_code == 0 and not self.cfg.evaluation_run:
                try:  # an extra for an exact resume: the final checkpoint below is what must not be lost
                    self._save_serial_snapshot()
                except Exception as e:
                    log(
                        f"WARNING: the serial snapshot could not be saved ({type(e).__name__}: {e}); the final "
                        f"checkpoint is saved, and a resume starts from it with fresh envs"
                    )
            try:
                self.driver.finish()
            except Exception as e:
                log(f"ERROR during shutdown: {type(e).__name__}: {e}")
                self.exit_code = 1
            for r in self.channels.report.get_many(block=False):
                self._on_report(r)
        elif self.supervisor is not None:
            self.supervisor.stop_all(order, self._drain_reports, self.cfg.shutdown_timeout_sec, hurry=self._hurry)
            self.progress.discarded_rollouts += self.supervisor.discarded_rollouts
        try:
            interrupted = self.interrupted_by is not None and self.exit_code == 0
            if interrupted:  # saved, but not finished: told apart from a run that reached its stop condition
                self.exit_code = interrupted_exit_code(self.interrupted_by)
            # Only a run whose components started has a final state: one that failed before (set-up, the sampler
            # nodes) adds no row to a resumed run's progress.csv and calls no on_experiment_end without a start.
            if self.start_time is not None:
                try:
                    self._final_bookkeeping(interrupted)
                except SummaryWriteError as e:  # a full disk: the rest of the shutdown (the lock) must still run
                    self._summaries_failed(e)
        finally:
            if self.evaluator is not None:
                self.evaluator.stop()
            if self.summaries is not None:
                try:
                    self.summaries.close()
                except SummaryWriteError as e:
                    self._summaries_failed(e)
            if self.pbt is not None:
                self.pbt.close()
            self.channels.close()
            self._undo_failed_start()
            if self.lock is not None:
                self.lock.release()

    def _summaries_failed(self, e: SummaryWriteError) -> None:
        log(f"ERROR: {type(e).__name__}: {e}")
        self.exit_code = 1

    def _undo_failed_start(self) -> None:
        """A run that failed before its learners were up trained nothing: a new experiment leaves nothing of its
        own behind, a resumed one puts its cfg.json back as it was. Otherwise the next command would resume with
        the flags that failed (a refused resume's, a bad --callbacks) although the user no longer types them."""
        if self.started_ok or self.exit_code == 0 or self.lock is None or self.lock.fd is None:
            return
        try:
            if self.previous_cfg is not None:
                write_cfg_json(self.exp_dir, self.previous_cfg)
                log("the run failed before it started: cfg.json is as it was before this command")
            else:
                log.close()  # its own log file goes too
                remove_created(self.exp_dir, self.folder_before)
        except OSError as e:
            log(f"ERROR: could not undo the failed start in {self.exp_dir}: {e}")

    def _final_bookkeeping(self, interrupted: bool) -> None:
        """The final report, on_experiment_end, progress.csv's last row, the summaries and the due evaluations."""
        self._final_report()
        if interrupted:
            log(f"exit code {self.exit_code}: interrupted before its stop condition (the same command resumes it)")
        self._experiment_ended()
        self.summaries.progress_row(self.progress)  # the final state, also for runs shorter than one interval
        self.summaries.write(self.progress)
        if not self.cfg.evaluation_run:
            try:
                self.progress.write_lag(self.exp_dir)
            except OSError as e:  # a full disk: the run's end is reported without it
                log(f"could not write the policy-lag distribution in {self.exp_dir}: {e.strerror}")
        if not self.cfg.evaluation_run:  # after the summary, whose times and FPS are training's
            signals = self.signals_received  # a Ctrl+C during the final evaluations stops them
            skip = signals > 0 or self.exit_code != 0  # interrupted or failed: no evaluation is due
            self.evaluator.finish(self.progress.env_steps, skip, lambda: self.signals_received > signals)
        if self.pbt is not None:
            self.pbt.write_summaries(self.summaries, self.progress)

    def _experiment_ended(self) -> None:
        if self.cfg.evaluation_run or self.callbacks is None:
            return
        P = self.cfg.num_policies
        result = {
            "stop_reason": self.stop_reason,
            "exit_code": self.exit_code,
            "env_steps": list(self.progress.env_steps),
            "reward_mean": [self.progress.reward_mean(p) for p in range(P)],
            "episodes": list(self.progress.num_episodes),
            "checkpoint": [self.progress.last_checkpoint.get(p) for p in range(P)],
            "episode_stats": [self.progress.episode_stats_means(p) for p in range(P)],
        }
        try:
            call_hook(self.callbacks, "on_experiment_end", self.cfg, self.exp_dir, result)
        except Exception as e:
            log(f"ERROR: {e}")
            self.exit_code = 1

    def _drain_reports(self, timeout: float) -> None:
        for r in self.channels.report.get_many(block=timeout > 0, timeout=timeout):
            self._on_report(r)

    def _final_report(self) -> None:
        """Called only for a run whose components started (start_time set)."""
        elapsed = time.monotonic() - self.start_time
        if not self.cfg.evaluation_run:
            started = time.time() - elapsed  # the summary names the newest checkpoint on disk, not the last report
            for p in range(self.cfg.num_policies):
                if (newest := newest_checkpoint_since(self.cfg, p, started)) is not None:
                    self.progress.last_checkpoint[p] = str(newest)
        log(self.progress.line())
        log(self.progress.final_summary(elapsed))
        log(f"experiment folder: {self.exp_dir}")


def initial_weights(
    cfg: Config, model: ActorCritic, obs_space: gym.Space, action_space: gym.Space
) -> tuple[list[SharedWeights], list[int], int]:
    """Each policy's weights, published before any component starts: `model`'s for policy 0 and fresh random ones
    for the others of a population, or the latest checkpoint's where the run resumes or evaluates one (so no worker
    ever acts with random weights there). Returns them with each policy's env steps at its checkpoint (0: none) and
    the env steps of all policies the checkpoints trained on (0: none; sync mode's learners record every policy's,
    else their own are added up)."""
    weights, env_steps, run_steps = [], [], 0
    for p in range(cfg.num_policies):
        if p > 0:
            model = ActorCritic(cfg, obs_space, action_space)
        if not cfg.evaluation_run:  # the run holds the lock: a killed run's half-written saves are garbage
            for tmp in remove_partial_writes(checkpoint_dir(cfg, p)):
                log(f"removed {tmp}: a checkpoint whose write never finished")
        # mapped: the weights are read, not the replay buffer the learner loads (gigabytes with --save_replay_buffer)
        loaded, version = load_policy_checkpoint(cfg, p, log=log, mmap=True), 0
        if loaded is not None:  # one line naming the flag, not one per parameter from load_state_dict
            check_model_fits(cfg, model, *loaded, resuming=not cfg.evaluation_run)
        if loaded is not None and not cfg.evaluation_run:  # whether this run's flags can continue from it
            for note in algorithm_class(cfg).check_resume(cfg, loaded[0]["algo"]):
                log(f"policy {p}: {note}")
        if loaded is not None:
            model.load_state_dict(loaded[0]["model"])
            version = loaded[0]["policy_version"]
            run_steps = run_steps or int(sum(loaded[0].get("run_env_steps", [0])))
        env_steps.append(loaded[0]["env_steps"] if loaded is not None else 0)
        w = SharedWeights.for_model(model)
        w.publish(model, version)
        weights.append(w)
    return weights, env_steps, run_steps or sum(env_steps)


def run(cfg: Config) -> int:
    return Runner(cfg).run()
