"""A run's set-up: its parts, built in one call and returned together.

`open_experiment` locks the experiment folder; `build_run` then makes everything the runner holds until shutdown
(the env probe, the initial weights, shared memory, the channels, every component) and returns it as `RunParts`.
Nothing starts here: the runner starts the components."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
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
from sample_factory.experiment.callbacks import Callbacks, make_callbacks
from sample_factory.experiment.checkpoints import (
    check_model_fits,
    checkpoint_dir,
    load_policy_checkpoint,
    remove_partial_writes,
)
from sample_factory.experiment.folder import (
    experiment_dir,
    folder_entries,
    prepare_experiment_dir,
    remove_created,
    write_cfg_json,
)
from sample_factory.experiment.progress import IterationSamples, ProgressTracker
from sample_factory.experiment.run_log import log
from sample_factory.experiment.summaries import SummaryWriteError, SummaryWriters
from sample_factory.model import activations
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.model.precision import resolve_auto_precision
from sample_factory.pbt.controller import PbtController
from sample_factory.runtime.component import Component
from sample_factory.runtime.device import torch_device
from sample_factory.runtime.fork_server import mp_context
from sample_factory.runtime.messages import Channels, ParkAfter, SaveNow
from sample_factory.runtime.placement import place_components
from sample_factory.runtime.reproducible import StopBetweenIterations
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers, make_buffer_spec
from sample_factory.runtime.supervisor import Supervisor
from sample_factory.workers.roles import RunComponents


@dataclass
class ExperimentFolder:
    """The folder a run writes to, locked, and what undoing a run that failed before it started needs."""

    path: Path
    lock: Any  # the folder's lock (None for evaluation runs, which only read the experiment)
    before: set[str] | None = None  # a new run's folder entries before it made them (None: the folder is its own)
    previous_cfg: bytes | None = None  # a resumed run's cfg.json as it was before this command

    def undo_start(self) -> None:
        """A resumed run puts its cfg.json back as it was; a new one removes what it wrote (its log file too)."""
        if self.previous_cfg is not None:
            write_cfg_json(self.path, self.previous_cfg)
            log("the run failed before it started: cfg.json is as it was before this command")
        else:
            log.close()  # its own log file goes too
            remove_created(self.path, self.before)


def open_experiment(cfg: Config) -> ExperimentFolder:
    """The experiment folder, locked, with cfg merged from a resumed run's cfg.json (it may change what follows),
    and the run's log opened in it. An evaluation run reads the experiment: no lock, no cfg.json rewrite."""
    if cfg.evaluation_run:
        folder, what = ExperimentFolder(experiment_dir(cfg), None), "evaluating"
        if not (folder.path / "cfg.json").exists():
            raise FileNotFoundError(f"no experiment at {folder.path}")
    else:
        before = folder_entries(experiment_dir(cfg))
        saved_cfg = experiment_dir(cfg) / "cfg.json"
        previous = saved_cfg.read_bytes() if saved_cfg.is_file() else None
        path, what, lock = prepare_experiment_dir(cfg, log)
        folder = ExperimentFolder(path, lock)
        if what.startswith("resuming"):
            folder.previous_cfg = previous
        else:  # a new folder (restart and overwrite made it afresh)
            folder.before = before if what == "new experiment" else None
        log.open(path / "sf_log.txt")
    log(f"{what}: {folder.path}")
    if "experiment" not in cfg.cli_flags and not cfg.evaluation_run:
        name = cfg.experiment
        log(f"no --experiment: this run is {name}; the same command resumes it (or --experiment={name})")
    log(defaults_line(cfg))
    return folder


@dataclass
class RunParts:
    """What a run holds from its set-up to its shutdown (the serial snapshot's restore replaces the components, the
    channels and the buffers)."""

    obs_space: gym.Space
    action_space: gym.Space
    num_agents: int
    buffers: TrajectoryBuffers
    weights: list[SharedWeights]  # one per policy
    resumed_env_frames: list[int]  # per policy: where a resumed run continues from
    channels: Channels
    pbt: PbtController | None
    components: list[Component]  # one per role and index, made by workers/roles.py (also for restarts)
    progress: ProgressTracker
    iteration_samples: IterationSamples | None  # sync mode: samples counted by whole iterations
    stop_between: StopBetweenIterations | None  # a reproducible multi-process run's Ctrl+C: between two iterations
    evaluator: PeriodicEvaluator
    summaries: SummaryWriters
    supervisor: Supervisor | None  # process mode; None in serial mode
    callbacks: Callbacks | None  # the runner process's instance of --callbacks
    remote: Any  # --sampler_nodes: distributed.remote_samplers.RemoteSamplers; None without

    def close(self, on_summary_error: Callable[[SummaryWriteError], None]) -> None:
        """Releases what the parts hold, once the components are stopped."""
        self.evaluator.stop()
        try:
            self.summaries.close()
        except SummaryWriteError as e:  # a full disk: the rest must still be released
            on_summary_error(e)
        if self.pbt is not None:
            self.pbt.close()
        self.channels.close()


def build_run(
    cfg: Config, exp_dir: Path, lock: Any, on_worker_restarted: Callable[[str, Any, str, int], None]
) -> RunParts:
    """Resolves what cfg leaves to the machine and the env, probes the env, makes the initial weights, the shared
    buffers, the channels and every component (started later by the runner). On failure, what was made is released
    before the error goes on."""
    set_step_units(cfg)  # before any component copies cfg
    if cfg.env_backend == "auto":  # cfg.json keeps auto; every component gets the resolved backend
        cfg.env_backend = env_backend(cfg)
        log(f"--env_backend=auto: {cfg.env_backend}")
    if note := episode_limit_note(cfg):
        log(note)
    callbacks = make_callbacks(cfg)
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
    ctx = None if cfg.serial_mode else mp_context()
    # Through the same context: this also starts the fork server, which preloads torch for all children.
    env_info = probe_env(cfg, False if cfg.serial_mode else ctx)
    algorithm_class(cfg).check_spaces(cfg, env_info[0], env_info[1])
    obs_space, action_space, num_agents, reward_shaping, left_out = env_info
    if left_out:
        assert isinstance(obs_space, gym.spaces.Dict), "only a Dict observation has keys to leave out"
        reads = ", ".join(obs_space.spaces)
        log(f"observation keys left out: {', '.join(left_out)}; the model reads {reads} (--obs_keys chooses)")
    # The initial weights are made once here, so policy workers and learners start identical.
    model = ActorCritic(cfg, obs_space, action_space)
    resolve_auto_precision(cfg, model, obs_space, log)  # before any component gets a copy of cfg
    spec = make_buffer_spec(cfg, obs_space, action_space, model.rnn_state_size, num_agents)
    remote = None
    if cfg.sampler_nodes > 0 and not cfg.evaluation_run:  # Ray is optional: imported only here
        from sample_factory.distributed.remote_samplers import RemoteSamplers

        remote = RemoteSamplers(cfg, spec, log)  # adds the import slots to spec
    buffers = TrajectoryBuffers(spec, share=not cfg.serial_mode)
    weights, resumed_env_frames, run_frames = initial_weights(cfg, model, obs_space, action_space)
    resume_point = (tuple(w.version for w in weights), run_frames) if run_frames else None
    kind = "local" if cfg.serial_mode else cfg.message_queue
    channels = Channels(spec.num_workers, cfg.num_policies, kind, cfg.learners_per_policy)
    with contextlib.ExitStack() as release_on_failure:
        release_on_failure.callback(channels.close)
        pbt = None
        if cfg.with_pbt:  # with the published weights: their versions say which policies have trained
            pbt = PbtController(cfg, exp_dir, channels, log, reward_shaping, weights)
            release_on_failure.callback(pbt.close)
        roles = RunComponents(
            cfg,
            place_components(cfg, log),
            buffers,
            channels,
            weights,
            obs_space,
            action_space,
            hyperparams=lambda p: pbt.hyperparams(p) if pbt is not None else None,
            resume_point=resume_point,
        )
        components = [roles.make(role, index) for role, index in roles.keys()]
        progress = ProgressTracker(cfg)
        if not cfg.evaluation_run:
            progress.load_lag(exp_dir)
        iteration_samples, stop_between = None, None
        if not cfg.async_rl and not cfg.evaluation_run:
            assert cfg.num_workers is not None, "parse_cfg resolves --num_workers"
            iteration_samples = IterationSamples(
                cfg.num_workers, cfg.worker_num_splits, spec.slots_per_split, int(cfg.train_for_env_steps)
            )
            progress.trained_frames = [0] * cfg.num_policies
            if reproducible(cfg) and not cfg.serial_mode and cfg.sampler_nodes == 0:
                stop_between = StopBetweenIterations(
                    cfg.num_policies, lambda p, n: channels.learner[p].put(ParkAfter.wire(n))
                )
        evaluator = PeriodicEvaluator(
            cfg,
            exp_dir,
            request_checkpoint=lambda p: channels.learner[p].put(SaveNow.wire()),
            log=log,
            add_scalar=lambda p, tag, value, frames: summaries.add_scalar(p, tag, value, frames),
        )
        release_on_failure.callback(evaluator.stop)
        summaries = SummaryWriters(exp_dir, cfg.num_policies, enabled=not cfg.evaluation_run, cfg=cfg)
        release_on_failure.callback(summaries.close)
        supervisor = (
            None
            if cfg.serial_mode
            else Supervisor(cfg, ctx, roles.make, buffers, channels, log, on_worker_restarted, lock=lock)
        )
        parts = RunParts(
            obs_space,
            action_space,
            num_agents,
            buffers,
            weights,
            resumed_env_frames,
            channels,
            pbt,
            components,
            progress,
            iteration_samples,
            stop_between,
            evaluator,
            summaries,
            supervisor,
            callbacks,
            remote,
        )
        release_on_failure.pop_all()
    log(
        f"experiment {exp_dir} | env {cfg.env} obs {obs_space.shape} actions {action_space} | "
        f"{cfg.num_workers} workers x {cfg.num_envs_per_worker} envs, {spec.num_slots} trajectory slots "
        f"({buffers.nbytes() / 2**20:.1f} MiB) | device {cfg.device} | "
        f"{'serial' if cfg.serial_mode else 'async' if cfg.async_rl else 'sync'} mode"
    )
    return parts


def initial_weights(
    cfg: Config, model: ActorCritic, obs_space: gym.Space, action_space: gym.Space
) -> tuple[list[SharedWeights], list[int], int]:
    """Each policy's weights, published before any component starts: `model`'s for policy 0 and fresh random ones
    for the others of a population, or the latest checkpoint's where the run resumes or evaluates one (so no worker
    ever acts with random weights there). Returns them with each policy's env frames at its checkpoint (0: none) and
    the env frames of all policies the checkpoints trained on (0: none; sync mode's learners record every policy's,
    else their own are added up). Checkpoints keep env frames under the key "env_steps"."""
    weights, env_frames, run_frames = [], [], 0
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
            run_frames = run_frames or int(sum(loaded[0].get("run_env_steps", [0])))
        env_frames.append(loaded[0]["env_steps"] if loaded is not None else 0)
        w = SharedWeights.for_model(model)
        w.publish(model, version)
        weights.append(w)
    return weights, env_frames, run_frames or sum(env_frames)
