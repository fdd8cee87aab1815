"""Runner: the parent process. Has the run built (run_setup.py: the folder, the env probe, shared memory, the
components), starts every component (processes, or one thread in serial mode), reads reports, prints progress,
writes summaries, decides when to stop and shuts everything down. It steps no env and trains nothing."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import torch

from sample_factory.config import Config
from sample_factory.experiment.best_checkpoints import BestCheckpoints
from sample_factory.experiment.callbacks import call_hook
from sample_factory.experiment.checkpoints import checkpoint_dir, list_checkpoints, newest_checkpoint_since
from sample_factory.experiment.episode_windows import checkpoint_env_frames, load_windows, save_window
from sample_factory.experiment.exit_codes import interrupted_exit_code
from sample_factory.experiment.progress import unit_name
from sample_factory.experiment.run_log import log
from sample_factory.experiment.summaries import ProgressPoints, SummaryWriteError
from sample_factory.run_setup import ExperimentFolder, RunParts, build_run, open_experiment
from sample_factory.runtime.component import TERMINATED, ComponentKey, SerialDriver
from sample_factory.runtime.device import resolve_device_name
from sample_factory.runtime.heartbeat import enable_stack_dumps
from sample_factory.runtime.messages import REPORT, Report, SaveBest
from sample_factory.runtime.serial_snapshot import load_snapshot, save_snapshot
from sample_factory.runtime.supervisor import RESTARTABLE
from sample_factory.workers.learner import Learner


class Runner:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.stop_reason: str | None = None
        self.exit_code = 0
        self.signals_received = 0
        self.interrupted_by: int | None = None  # the signal that stopped the run before its stop condition
        self.best = BestCheckpoints(cfg, lambda p, value: self.parts.channels.learner[p].put(SaveBest.wire(value)))
        # Made by `setup` (run_setup.py); None until then (shutdown releases only what exists).
        self._folder: ExperimentFolder | None = None
        self._parts: RunParts | None = None
        # Set by `_start` and the main loop.
        self.driver: SerialDriver | None = None  # serial mode: steps every component in this thread
        self.start_time: float | None = None  # time.monotonic() when the components were started
        self.points: ProgressPoints | None = None
        # Until every learner is up, a failed run undoes what it wrote (`_release_folder`): its cfg.json would
        # otherwise make the corrected command resume with the flags that failed.
        self.started_ok = False
        self.learners_up: set[ComponentKey] = set()
        # report kind -> handler. Every report is a sign of life for the supervisor's monitor, which is all that
        # "started" and "heartbeat" are.
        self.report_handlers: dict[str, Callable[[Report], None]] = {
            "started": self._on_started,
            "note": self._on_note,
            "samples": self._on_samples,
            "split_samples": self._on_split_samples,
            "sync_trained": self._on_sync_trained,
            "lag_counts": lambda r: self.parts.progress.add_lag_counts(r.index, r.payload),
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
        enable_stack_dumps()
        # --device is never taken from cfg.json: check it before creating anything
        self.cfg.device = resolve_device_name(self.cfg.device)
        self._folder = open_experiment(self.cfg)
        self._parts = build_run(self.cfg, self._folder.path, self._folder.lock, self._on_worker_restarted)

    @property
    def folder(self) -> ExperimentFolder:
        assert self._folder is not None, "setup opens the experiment folder"
        return self._folder

    @property
    def parts(self) -> RunParts:
        assert self._parts is not None, "setup builds the run's parts"
        return self._parts

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
        stop_between = self._parts.stop_between if self._parts is not None else None
        if self.stop_reason is None:
            if stop_between is not None and stop_between.request(signum):
                return  # the main loop stops the run between two iterations
            self.stop_reason = f"{signal.Signals(signum).name} received"
            self.interrupted_by = signum

    def _hurry(self) -> bool:
        """A second Ctrl+C (a third where the first was deferred to the end of an iteration) skips the waits."""
        stop_between = self._parts.stop_between if self._parts is not None else None
        deferred = stop_between is not None and stop_between.signum is not None
        return self.signals_received > 1 + deferred

    def _start(self) -> None:
        parts = self.parts
        if parts.remote is not None:  # first: a cluster that cannot be reached fails the run before it starts
            spaces = (parts.obs_space, parts.action_space, parts.num_agents)
            parts.remote.start(parts.buffers, parts.channels, parts.weights[0], *spaces)
        self.start_time = time.monotonic()  # after the sampler nodes' start: --train_for_seconds is sampling time
        if self.cfg.serial_mode:
            # Every component shares this process; its thread count is the learner's.
            torch.set_num_threads(self.cfg.learner_main_loop_num_cores)
            if self._restore_serial_snapshot():
                self.driver = SerialDriver(self.parts.components)
            else:
                self.driver = SerialDriver(self.parts.components)
                self.driver.init()
            self._resume_records()
            self.started_ok = True
            self._experiment_started()
            return
        self._resume_records()
        supervisor = self.parts.supervisor
        assert supervisor is not None, "build_run makes a supervisor for a run that is not serial"
        for c in self.parts.components:
            supervisor.start(c)
        self._experiment_started()

    def _resume_records(self) -> None:
        """progress.csv and the curves continue from the env frames this run resumes at (the checkpoint's, or the
        serial snapshot's): what a killed run recorded past them is dropped, so the counter never goes back."""
        if self.folder.previous_cfg is None:  # not a resume
            return
        resumed = self.parts.resumed_env_frames
        dropped = self.parts.summaries.resume_at(resumed)
        if dropped:
            unit = unit_name(self.cfg)
            log(f"progress.csv continues from the resumed {sum(resumed)} {unit} ({dropped} rows past them dropped)")

    def _experiment_started(self) -> None:
        if not self.cfg.evaluation_run:
            call_hook(self.parts.callbacks, "on_experiment_start", self.cfg, self.folder.path)

    def _on_worker_restarted(self, role: str, index: Any, reason: str, restarts: int) -> None:
        call_hook(self.parts.callbacks, "on_worker_restarted", role, index, reason, restarts)

    def _learners(self) -> list[Learner]:
        return [c for c in self.parts.components if isinstance(c, Learner)]

    def _restore_serial_snapshot(self) -> bool:
        latest = list_checkpoints(checkpoint_dir(self.cfg, 0))
        key = None
        if latest:  # checkpoint_<version>_<env frames>
            version, frames = latest[-1].stem.split("_")[1:3]
            key = (int(version), int(frames))
        state, why = load_snapshot(self.folder.path, self.cfg, key)
        if state is None:
            if key is not None:
                log(f"{why}: resuming from the checkpoint instead")
            return False
        parts = self.parts
        parts.components, parts.channels, parts.buffers = state["components"], state["channels"], state["buffers"]
        resumed = list(state["counters"]["env_steps"])  # env frames, under the snapshot's key
        for p, frames in enumerate(resumed):
            parts.progress.resume(p, frames)
        for p, window in enumerate(state["counters"].get("episode_windows", [])):
            parts.progress.restore_window(p, window)
        parts.resumed_env_frames = resumed
        log(f"{why} at {sum(resumed)} {unit_name(self.cfg)}")
        return True

    def _save_serial_snapshot(self) -> None:
        learner, parts = self._learners()[0], self.parts
        counters = {
            "checkpoint": (learner.version, learner.env_frames),
            "env_steps": list(parts.progress.env_frames),
            "episode_windows": [parts.progress.window(p) for p in range(self.cfg.num_policies)],
        }
        save_snapshot(self.folder.path, self.cfg, parts.components, parts.channels, parts.buffers, counters)

    def _periodic_eval(self) -> None:
        if self.parts.evaluator.enabled:  # logs its results and writes them to each evaluated policy's summaries
            self.parts.evaluator.update(self.parts.progress.env_frames)

    def _main_loop(self) -> None:
        cfg = self.cfg
        last_print = last_summary = last_best = time.monotonic()
        per_iteration = self.parts.iteration_samples is not None
        self.points = ProgressPoints(int(cfg.progress_every_env_steps), self.parts.summaries, last_print, per_iteration)
        while self.stop_reason is None:
            if self.driver is not None:
                for _ in range(20):
                    if not self.driver.step():
                        break
                reports = self.parts.channels.report.get_many(block=False)
            else:
                reports = self.parts.channels.report.get_many(timeout=0.1)
            for r in reports:
                self._on_report(r)
            now = time.monotonic()
            if now - last_print >= cfg.report_interval_sec:
                last_print = now
                log(self.parts.progress.line())
                self.points.report(self.parts.progress, now)
            if not per_iteration:
                self.points.update(self.parts.progress, now)
            self._periodic_eval()
            if now - last_best >= cfg.save_best_every_sec:
                last_best = now
                self.best.check(self.parts.progress)
            if now - last_summary >= cfg.experiment_summaries_interval:
                last_summary = now
                self.parts.summaries.write(self.parts.progress)
                if self.parts.pbt is not None:
                    self.parts.pbt.write_summaries(self.parts.summaries, self.parts.progress)
            self._check_stop(now)
        self.points.at_stop(self.parts.progress, time.monotonic(), cfg.stop_at_reward)

    def _on_report(self, msg: tuple) -> None:
        report = Report._make(msg)
        assert report.kind == REPORT, msg
        if self.parts.supervisor is not None:
            activity = report.payload if report.report_kind == "heartbeat" else ""
            self.parts.supervisor.monitor.seen(ComponentKey(report.role, report.index), activity)
        handler = self.report_handlers.get(report.report_kind)
        if handler is not None:
            handler(report)

    def _on_started(self, report: Report) -> None:
        if report.role == "learner" and not self.started_ok:
            self.learners_up.add(ComponentKey(report.role, report.index))
            self.started_ok = len(self.learners_up) == sum(c.role == "learner" for c in self.parts.components)

    def _on_note(self, report: Report) -> None:
        log(f"{report.role} {report.index}: {report.payload}")

    def _on_samples(self, report: Report) -> None:
        policy, env_frames, episodes, stats = report.payload
        self.parts.progress.add_samples(policy, env_frames, episodes, stats)

    def _on_split_samples(self, report: Report) -> None:
        split, rollout, reports = report.payload
        samples = self.parts.iteration_samples
        assert samples is not None, "split samples are reported in sync mode, where build_run counts iterations"
        samples.add(report.index, split, rollout, reports)
        # after the stop, the counts stay those of the iterations trained on; no points before the main loop's
        if self.stop_reason is None and self.points is not None:
            for _ in range(samples.apply(self.parts.progress)):
                self.points.update(self.parts.progress, time.monotonic())

    def _on_sync_trained(self, report: Report) -> None:
        trained = self.parts.progress.trained_frames
        assert trained is not None, "sync mode: build_run counts the frames each learner trained on"
        trained[report.index], iterations = report.payload
        if self.parts.stop_between is not None:
            self.parts.stop_between.iterations[report.index] = iterations

    def _on_train(self, report: Report) -> None:
        self.parts.progress.add_train_stats(report.index, report.payload)
        self.parts.summaries.add_train_stats(report.index, report.payload)
        if self.parts.pbt is not None and self.stop_reason is None:  # no decisions for learners that are stopping
            for decision in self.parts.pbt.on_train_report(report.index, report.payload, self.parts.progress):
                call_hook(self.parts.callbacks, "on_pbt_decision", decision)

    def _on_inference(self, report: Report) -> None:
        self.parts.progress.add_inference(*report.payload)

    def _on_resumed(self, report: Report) -> None:
        p, frames = report.index, report.payload["env_steps"]  # the learner's env frames, under the checkpoint's key
        self.parts.progress.resume(p, frames)
        window = load_windows(checkpoint_dir(self.cfg, p)).get(str(frames))
        if window is not None:
            self.parts.progress.restore_window(p, window)
        kept = f", its last {len(window['episodes'])} episodes in the reward window" if window else ""
        log(f"policy {p} resumed from {report.payload['path']} at {frames} {unit_name(self.cfg)}{kept}")

    def _on_checkpoint(self, report: Report) -> None:
        progress = self.parts.progress
        progress.last_checkpoint[report.index] = report.payload
        frames = checkpoint_env_frames(report.payload)
        window = None if frames is None else progress.window_history[report.index].at(frames)
        if frames is not None and window is not None:
            try:
                save_window(checkpoint_dir(self.cfg, report.index), frames, window)
            except OSError as e:  # the checkpoint itself is written; a resume would start an empty window
                log(f"WARNING: could not save the episode window beside {report.payload}: {e}")
        self.parts.evaluator.on_checkpoint(report.index, report.payload)

    def _on_timing(self, report: Report) -> None:
        self.parts.progress.timing[report.role].append(report.payload)

    def _on_discarded_rollouts(self, report: Report) -> None:
        self.parts.progress.discarded_rollouts += report.payload

    def _on_error(self, report: Report) -> None:
        message, trace, *fatal = report.payload
        if message == TERMINATED and self.interrupted_by == signal.SIGTERM:
            # The signal went to every process of the run (`kill` of the process group, Slurm's time limit): an
            # orderly stop like the runner's own (a learner saves as it exits), not a crash.
            log(f"{report.role} {report.index} got SIGTERM too: it finishes and exits")
            return
        log(f"ERROR in {report.role} {report.index}: {message}" + (f"\n{trace}" if trace else ""))
        if self.parts.supervisor is None or report.role not in RESTARTABLE or any(fatal):
            self.exit_code = 1
            self.stop_reason = self.stop_reason or f"{report.role} {report.index} failed: {message}"

    def _on_finished(self, report: Report) -> None:
        if self.parts.supervisor is not None:
            self.parts.supervisor.on_finished(ComponentKey(report.role, report.index), report.payload)

    def _check_stop(self, now: float) -> None:
        if (
            self.parts.remote is not None
            and (why := self.parts.remote.update(self.parts.progress))
            and self.stop_reason is None
        ):
            self.stop_reason, self.exit_code = why, 1
        assert self.start_time is not None, "_start has started the components"
        self.stop_reason = self.parts.progress.stop_condition(now - self.start_time) or self.stop_reason
        stop_between = self.parts.stop_between
        if self.stop_reason is None and stop_between is not None and (signum := stop_between.poll(log)):
            self.stop_reason, self.interrupted_by = f"{signal.Signals(signum).name} received", signum
        if self.parts.supervisor is not None and self.interrupted_by is None:  # on a signal, stop_all takes over
            fatal = self.parts.supervisor.check(stopping=self.stop_reason is not None)
            if fatal:
                if self.exit_code == 0:  # else the failure that made it stop is the reason (not its exit)
                    self.stop_reason = fatal
                self.exit_code = 1

    # ---- shutdown -----------------------------------------------------------------------------------------
    def _shutdown(self) -> None:
        if self.stop_reason:
            log(f"stopping: {self.stop_reason}")
        if self._parts is None:  # set-up failed (build_run released what it made)
            self._release_folder()
            return
        # STOPs go to actors first so no new rollouts arrive, then policy workers, then learners (which save
        # checkpoints); in serial mode every component is finished in turn.
        order = ("actor", "policy", "learner")
        if self.parts.remote is not None:  # first: its importer feeds the learner
            try:
                self.parts.remote.stop()
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
            for r in self.parts.channels.report.get_many(block=False):
                self._on_report(r)
        elif self.parts.supervisor is not None:
            self.parts.supervisor.stop_all(order, self._drain_reports, self.cfg.shutdown_timeout_sec, hurry=self._hurry)
            self.parts.progress.discarded_rollouts += self.parts.supervisor.discarded_rollouts
        try:
            interrupted = False
            if self.interrupted_by is not None and self.exit_code == 0:
                # saved, but not finished: told apart from a run that reached its stop condition
                interrupted, self.exit_code = True, interrupted_exit_code(self.interrupted_by)
            # Only a run whose components started has a final state: one that failed before (set-up, the sampler
            # nodes) adds no row to a resumed run's progress.csv and calls no on_experiment_end without a start.
            if self.start_time is not None:
                try:
                    self._final_bookkeeping(interrupted)
                except SummaryWriteError as e:  # a full disk: the rest of the shutdown (the lock) must still run
                    self._summaries_failed(e)
        finally:
            self.parts.close(on_summary_error=self._summaries_failed)
            self._release_folder()

    def _summaries_failed(self, e: SummaryWriteError) -> None:
        log(f"ERROR: {type(e).__name__}: {e}")
        self.exit_code = 1

    def _release_folder(self) -> None:
        """A run that failed before its learners were up trained nothing: a new experiment leaves nothing of its
        own behind, a resumed one puts its cfg.json back as it was. Otherwise the next command would resume with
        the flags that failed (a refused resume's, a bad --callbacks) although the user no longer types them. Then
        the lock goes."""
        folder = self._folder
        if folder is None or folder.lock is None:
            return
        if not self.started_ok and self.exit_code != 0 and folder.lock.fd is not None:
            try:
                folder.undo_start()
            except OSError as e:
                log(f"ERROR: could not undo the failed start in {folder.path}: {e}")
        folder.lock.release()

    def _final_bookkeeping(self, interrupted: bool) -> None:
        """The final report, on_experiment_end, progress.csv's last row, the summaries and the due evaluations."""
        self._final_report()
        if interrupted:
            log(f"exit code {self.exit_code}: interrupted before its stop condition (the same command resumes it)")
        self._experiment_ended()
        self.parts.summaries.progress_row(
            self.parts.progress
        )  # the final state, also for runs shorter than one interval
        self.parts.summaries.write(self.parts.progress)
        if not self.cfg.evaluation_run:
            try:
                self.parts.progress.write_lag(self.folder.path)
            except OSError as e:  # a full disk: the run's end is reported without it
                log(f"could not write the policy-lag distribution in {self.folder.path}: {e.strerror}")
        if not self.cfg.evaluation_run:  # after the summary, whose times and FPS are training's
            signals = self.signals_received  # a Ctrl+C during the final evaluations stops them
            skip = signals > 0 or self.exit_code != 0  # interrupted or failed: no evaluation is due
            self.parts.evaluator.finish(self.parts.progress.env_frames, skip, lambda: self.signals_received > signals)
        if self.parts.pbt is not None:
            self.parts.pbt.write_summaries(self.parts.summaries, self.parts.progress)

    def _experiment_ended(self) -> None:
        if self.cfg.evaluation_run or self.parts.callbacks is None:
            return
        P = self.cfg.num_policies
        result = {
            "stop_reason": self.stop_reason,
            "exit_code": self.exit_code,
            "env_steps": list(self.parts.progress.env_frames),  # the callback's key (docs/api)
            "reward_mean": [self.parts.progress.reward_mean(p) for p in range(P)],
            "episodes": list(self.parts.progress.num_episodes),
            "checkpoint": [self.parts.progress.last_checkpoint.get(p) for p in range(P)],
            "episode_stats": [self.parts.progress.episode_stats_means(p) for p in range(P)],
        }
        try:
            call_hook(self.parts.callbacks, "on_experiment_end", self.cfg, self.folder.path, result)
        except Exception as e:
            log(f"ERROR: {e}")
            self.exit_code = 1

    def _drain_reports(self, timeout: float) -> None:
        for r in self.parts.channels.report.get_many(block=timeout > 0, timeout=timeout):
            self._on_report(r)

    def _final_report(self) -> None:
        """Called only for a run whose components started (start_time set)."""
        assert self.start_time is not None
        elapsed = time.monotonic() - self.start_time
        if not self.cfg.evaluation_run:
            started = time.time() - elapsed  # the summary names the newest checkpoint on disk, not the last report
            for p in range(self.cfg.num_policies):
                if (newest := newest_checkpoint_since(self.cfg, p, started)) is not None:
                    self.parts.progress.last_checkpoint[p] = str(newest)
        log(self.parts.progress.line())
        log(self.parts.progress.final_summary(elapsed))
        log(f"experiment folder: {self.folder.path}")


def run(cfg: Config) -> int:
    return Runner(cfg).run()
