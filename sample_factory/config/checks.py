"""Derived values and the checks of flag combinations (`finalize_cfg`, one-line ConfigErrors), with the parsers of the
evaluation flags' values (--eval_env_overrides, --eval_policies) and the experiment's folder name."""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import math
import re
from typing import Any

from sample_factory.config.cfg import Config
from sample_factory.config.env_defaults import is_atari_name
from sample_factory.config.extras import install_hint
from sample_factory.config.machine import usable_cores
from sample_factory.config.options import ConfigError, all_options, int_list

# Env options an evaluation may not change, and why (the others named env_*, plus env and seed, are allowed).
_NOT_OVERRIDABLE = {
    "env_episodic_life": "evaluation always plays whole games",
    "env_backend": "it changes how envs are stepped, not the env",
    "env_seed_offset": "use seed=<n> to choose the evaluation's seed",
}


def overridable_env_options() -> list[str]:
    """Options --eval_env_overrides may set: those that say which env is played and how it is configured."""
    names = [opt.name for opt in all_options()]
    return [n for n in names if (n in ("env", "seed") or n.startswith("env_")) and n not in _NOT_OVERRIDABLE]


def parse_env_overrides(text: str | None) -> dict[str, Any]:
    """`name=value,name=value` (--eval_env_overrides) -> {name: parsed value}, in the order given. Raises
    ConfigError (one line) for a malformed pair, an option that is not an env option, a repeated name or a value
    the option's type or choices reject."""
    flag = "--eval_env_overrides"
    options = {opt.name: opt for opt in all_options()}
    allowed = overridable_env_options()
    out: dict[str, Any] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        name, sep, raw = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise ConfigError(f"{flag}: {pair.strip()!r} is not name=value")
        if name not in options:
            close = difflib.get_close_matches(name, allowed, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else f" (allowed: {', '.join(allowed)})"
            raise ConfigError(f"{flag}: unknown option {name!r}{hint}")
        if name in _NOT_OVERRIDABLE:
            raise ConfigError(f"{flag}: {name} cannot be overridden for evaluation: {_NOT_OVERRIDABLE[name]}")
        if name not in allowed:
            raise ConfigError(f"{flag}: {name} is not an env option (allowed: {', '.join(allowed)})")
        if name in out:
            raise ConfigError(f"{flag}: {name} is given twice")
        opt = options[name]
        try:
            value = opt.type(raw)
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            raise ConfigError(f"{flag}: {name}={raw!r} is not a valid {opt.type_name}") from None
        if opt.choices and value not in opt.choices:
            raise ConfigError(f"{flag}: {name}={raw!r} is not one of {', '.join(opt.choices)}")
        out[name] = value
    return out


def parse_eval_policies(text: str, num_policies: int) -> list[int]:
    """--eval_policies: `all` or policy indices like `0,2` -> sorted indices. Raises ConfigError (one line)."""
    s = text.strip().lower()
    if s == "all":
        return list(range(num_policies))
    try:
        indices = int_list(s)
    except argparse.ArgumentTypeError:
        raise ConfigError(f"--eval_policies must be all or policy indices like 0,2, got {text!r}") from None
    if not indices:
        raise ConfigError("--eval_policies is empty (use all, or policy indices like 0,2)")
    bad = [i for i in indices if not 0 <= i < num_policies]
    if bad:
        raise ConfigError(f"--eval_policies: no policy {bad[0]} (--num_policies={num_policies}: 0..{num_policies - 1})")
    if len(set(indices)) != len(indices):
        raise ConfigError(f"--eval_policies names a policy twice: {text!r}")
    return sorted(indices)


def module_available(name: str) -> bool:
    """Whether `name` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None (import blocked)
        return False


# Bytes: room for what is added to an experiment's name within a file name's 255 (`_archived_<time>` on
# --restart_behavior=restart, the launcher's `<name>.log`).
MAX_EXPERIMENT_NAME = 200


def experiment_name_problem(name: str) -> str | None:
    """Why `name` cannot name an experiment folder, None when it can: it must be one plain folder name inside
    train_dir (".", ".." or a path would put the run's files, or --restart_behavior's deletion, outside it)."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return "is not a folder name of its own (it names train_dir or its parent)"
    if "/" in name or "\0" in name:
        return "must be a plain folder name (no '/'): put the parent folders in --train_dir"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):  # a newline splits every log line and table naming it
        return "must not contain control characters (newline, tab, escape)"
    size = len(name.encode(errors="surrogateescape"))
    if size > MAX_EXPERIMENT_NAME:
        return f"is {size} bytes long (at most {MAX_EXPERIMENT_NAME})"
    return None


def run_name(cfg: Config | argparse.Namespace) -> str:
    """The folder name of a run that names no --experiment: CleanRL's run name (env__exp_name__seed) without its
    start time, so that a run on another env or seed gets a folder of its own and the same command resumes it."""
    env = re.sub(r"[/:\0]", "_", cfg.env or "")[:120]
    return "__".join([env, cfg.algo.lower(), *([str(cfg.seed)] if cfg.seed is not None else [])])


def finalize_cfg(cfg: Config) -> Config:
    """Fill derived values and validate combinations (raises ConfigError with a one-line message)."""
    if not cfg.env:
        raise ConfigError("--env is required (e.g. --env=CartPole-v1)")
    if cfg.experiment is None:
        cfg.experiment = run_name(cfg)
    why = experiment_name_problem(cfg.experiment)
    if why:
        shown = cfg.experiment if len(cfg.experiment) <= 60 else cfg.experiment[:57] + "..."
        raise ConfigError(f"--experiment={shown!r} {why}")
    if cfg.num_workers is None:
        cfg.num_workers = max(1, usable_cores())
    _spread_num_envs(cfg)
    positive = [
        "num_workers",
        "num_envs_per_worker",
        "worker_num_splits",
        "policy_workers_per_policy",
        "num_policies",
        "rollout",
        "batch_size",
        "num_batches_per_epoch",
        "num_epochs",
        "min_traj_buffers_per_worker",
        "rnn_size",
        "rnn_num_layers",
        "learner_main_loop_num_cores",
    ]
    for k in positive:
        if getattr(cfg, k) < 1:
            raise ConfigError(f"--{k} must be >= 1, got {getattr(cfg, k)}")
    _check_max_episode_steps(cfg)
    if cfg.num_envs_per_worker % cfg.worker_num_splits != 0:
        raise ConfigError(
            f"--num_envs_per_worker={cfg.num_envs_per_worker} must be divisible by "
            f"--worker_num_splits={cfg.worker_num_splits}"
        )
    if cfg.recurrence == -1:
        cfg.recurrence = cfg.rollout if cfg.use_rnn else 1
    if cfg.recurrence < 1 or cfg.rollout % cfg.recurrence != 0:
        raise ConfigError(f"--recurrence={cfg.recurrence} must divide --rollout={cfg.rollout}")
    if cfg.batch_size % cfg.rollout != 0:
        raise ConfigError(f"--batch_size={cfg.batch_size} must be a multiple of --rollout={cfg.rollout}")
    if not 0.0 <= cfg.gamma <= 1.0:
        raise ConfigError(f"--gamma must be in [0, 1], got {cfg.gamma}")
    for opt in all_options():  # NaN passes every comparison below: a worker would fail on it later
        value = getattr(cfg, opt.name, None)
        if isinstance(value, float) and math.isnan(value):
            raise ConfigError(f"--{opt.name} must be a number, got nan")
    if not cfg.learning_rate > 0:
        raise ConfigError(f"--learning_rate must be > 0, got {cfg.learning_rate}")
    if cfg.lr_schedule == "kl_adaptive":
        _check_kl_adaptive(cfg)
    for k in ("heartbeat_interval", "heartbeat_timeout_sec", "collective_timeout_sec"):
        if not getattr(cfg, k) > 0:
            raise ConfigError(f"--{k} must be > 0, got {getattr(cfg, k)}")
    if cfg.shutdown_timeout_sec < 0:
        raise ConfigError(f"--shutdown_timeout_sec must be >= 0, got {cfg.shutdown_timeout_sec}")
    if cfg.train_for_env_steps <= 0 or cfg.train_for_seconds <= 0:
        raise ConfigError("--train_for_env_steps and --train_for_seconds must be > 0")
    cfg.train_for_env_steps = int(cfg.train_for_env_steps)
    if cfg.env_backend == "envpool" and cfg.serial_mode:
        raise ConfigError("--env_backend=envpool does not run in --serial_mode (EnvPool batches cannot be snapshotted)")
    if not cfg.async_rl:
        envs_per_split = cfg.num_envs_per_worker // cfg.worker_num_splits
        round_samples = cfg.num_workers * cfg.worker_num_splits * envs_per_split * cfg.rollout
        it = cfg.batch_size * cfg.num_batches_per_epoch
        if it % round_samples != 0:
            raise ConfigError(
                f"--async_rl=False needs batch_size*num_batches_per_epoch ({it}) to be a multiple of "
                f"num_workers*num_envs_per_worker*rollout ({round_samples}) so every batch is on-policy"
            )
    parse_eval_policies(cfg.eval_policies, cfg.num_policies)  # checked now, used by the periodic evaluator
    parse_env_overrides(cfg.eval_env_overrides)
    if 0 < cfg.ppo_ratio_clamp <= 1:
        raise ConfigError(
            f"--ppo_ratio_clamp must be > 1 (the ratio is clamped to [1/x, x]) or <= 0 (off), got {cfg.ppo_ratio_clamp}"
        )
    if cfg.decoupled_ppo and cfg.algo != "APPO":
        raise ConfigError(f"--decoupled_ppo=True changes APPO's PPO clip; --algo={cfg.algo} has none")
    if cfg.kl_loss_coeff < 0:
        raise ConfigError(f"--kl_loss_coeff must be >= 0, got {cfg.kl_loss_coeff}")
    if cfg.decorrelate_experience_max_seconds < 0:
        raise ConfigError(
            f"--decorrelate_experience_max_seconds must be >= 0, got {cfg.decorrelate_experience_max_seconds}"
        )
    if cfg.max_worker_restarts < 0 or cfg.worker_restart_window_sec < 0:
        raise ConfigError("--max_worker_restarts and --worker_restart_window_sec must be >= 0")
    if cfg.with_wandb and not cfg.evaluation_run and not module_available("wandb"):
        raise ConfigError(f"--with_wandb needs the wandb package: {install_hint('wandb')}")
    if cfg.capture_video and not cfg.evaluation_run:
        if cfg.eval_every_env_steps <= 0 and "eval_every_env_steps" in cfg.cli_flags:
            raise ConfigError(
                "--capture_video records the periodic evaluations: give --eval_every_env_steps > 0, or leave it out "
                "for ten recordings over the budget"
            )
        if not module_available("imageio_ffmpeg"):
            raise ConfigError(f"--capture_video needs imageio and imageio-ffmpeg: {install_hint('video')}")
    if cfg.auto_tune and (cfg.serial_mode or (cfg.with_pbt and cfg.pbt_backend == "ray")):
        raise ConfigError(
            "--auto_tune tunes a multi-process run: not with --serial_mode or --pbt_backend=ray (tune a single run "
            "first, e.g. python -m sample_factory.tools.tune, and pass its pick to the population)"
        )
    if cfg.auto_tune_seconds is not None and cfg.auto_tune_seconds <= 0:
        raise ConfigError(f"--auto_tune_seconds must be > 0, got {cfg.auto_tune_seconds}")
    if cfg.with_pbt and cfg.pbt_backend == "ray":
        _check_ray_pbt(cfg)
    _check_replay(cfg)
    _check_remote_samplers(cfg)
    _check_data_parallel(cfg)
    if cfg.num_minibatches_to_accumulate < 0:
        cfg.num_minibatches_to_accumulate = cfg.num_batches_per_epoch if cfg.async_rl else 0
    return cfg


def _check_kl_adaptive(cfg: Config) -> None:
    if cfg.algo != "APPO":
        raise ConfigError(f"--lr_schedule=kl_adaptive steers APPO's policy KL; --algo={cfg.algo} has none")
    if cfg.kl_threshold <= 0:
        raise ConfigError(f"--kl_threshold must be > 0, got {cfg.kl_threshold}")
    if not 0 < cfg.lr_min <= cfg.learning_rate <= cfg.lr_max:
        raise ConfigError(
            f"--lr_schedule=kl_adaptive needs 0 < --lr_min <= --learning_rate <= --lr_max, got "
            f"{cfg.lr_min} / {cfg.learning_rate} / {cfg.lr_max}"
        )


def _spread_num_envs(cfg: Config) -> None:
    """CleanRL's --num_envs (all the envs) as --num_envs_per_worker: the workers (the most up to --num_workers that
    divide it, where --num_workers is not typed) get equal shares, in one split where a share is odd. A preset's
    --num_envs yields to a typed --num_envs_per_worker."""
    if cfg.num_envs is None:
        return
    typed = set(cfg.cli_flags)
    if "num_envs" not in typed and "num_envs_per_worker" in typed:
        return
    n = cfg.num_envs
    if "num_envs_per_worker" in typed:
        raise ConfigError(
            "--num_envs (all the envs, CleanRL's) and --num_envs_per_worker count the same envs: give one"
        )
    if n < 1:
        raise ConfigError(f"--num_envs must be >= 1, got {n}")
    assert cfg.num_workers is not None  # finalize_cfg has set its default
    if "num_workers" not in typed:
        cfg.num_workers = max(w for w in range(1, min(cfg.num_workers, n) + 1) if n % w == 0)
    if n % cfg.num_workers:
        whose = "" if "num_envs" in typed else "the preset's "
        raise ConfigError(
            f"{whose}--num_envs={n} is not a multiple of --num_workers={cfg.num_workers}: every worker steps as many "
            "envs (give --num_envs or --num_envs_per_worker)"
        )
    cfg.num_envs_per_worker = n // cfg.num_workers
    if cfg.num_envs_per_worker % cfg.worker_num_splits and "worker_num_splits" not in typed:
        cfg.worker_num_splits = 1


# Env families whose episodes our own wrappers or the engine limit (ALE's 108,000 frames, a scenario's timeout).
_OWN_EPISODE_LIMITS = ("atari_", "ALE/", "doom_", "Vizdoom", "pettingzoo.")


def _check_max_episode_steps(cfg: Config) -> None:
    if cfg.max_episode_steps is None:
        return
    if cfg.max_episode_steps < 1:
        raise ConfigError(f"--max_episode_steps must be >= 1, got {cfg.max_episode_steps}")
    if (cfg.env or "").startswith(_OWN_EPISODE_LIMITS) or is_atari_name(cfg.env):
        raise ConfigError(
            f"--max_episode_steps applies to gymnasium ids and custom envs; {cfg.env} keeps its own episode limit "
            "(Atari: ALE's 108,000 frames; VizDoom: the scenario's timeout)"
        )


def _check_replay(cfg: Config) -> None:
    """--exp_replayer default per algorithm, IMPALA replay for APPO, and what DQN does not support."""
    if cfg.exp_replayer is None:
        if cfg.algo == "DQN":
            cfg.exp_replayer = "prioritized"
        else:
            cfg.exp_replayer = "uniform" if cfg.replay_proportion > 0 else "one_time"
    if cfg.algo != "DQN":
        if cfg.exp_replayer == "prioritized":
            raise ConfigError("APPO replays uniformly (IMPALA): use --exp_replayer=uniform with --replay_proportion")
        if (cfg.exp_replayer == "uniform") != (cfg.replay_proportion > 0):
            raise ConfigError(
                f"--exp_replayer={cfg.exp_replayer} with --replay_proportion={cfg.replay_proportion}: APPO replay "
                "needs both --exp_replayer=uniform and --replay_proportion > 0"
            )
        if cfg.replay_proportion > 0:
            if not cfg.with_vtrace:
                raise ConfigError(
                    "--replay_proportion needs V-trace (--with_vtrace=True): GAE cannot correct replayed data"
                )
            if cfg.replay_buffer_num_slots < 1:
                raise ConfigError("--replay_proportion needs --replay_buffer_num_slots >= 1 (trajectories kept)")
        return
    if cfg.replay_proportion > 0:
        raise ConfigError("--replay_proportion is APPO's (IMPALA) replay; DQN replays with --training_intensity")
    if not 0.0 <= cfg.eval_epsilon <= 1.0:
        raise ConfigError(f"--eval_epsilon must be in [0, 1], got {cfg.eval_epsilon}")
    # Evaluation is greedy (argmax Q: a softmax over Q-values is no policy), or epsilon-greedy with --eval_epsilon.
    cfg.eval_deterministic = cfg.eval_epsilon == 0.0
    if cfg.use_rnn:
        raise ConfigError("--algo=DQN needs a feed-forward model: --use_rnn=False (recurrent replay is not built)")
    if cfg.normalize_returns:
        raise ConfigError("--algo=DQN does not normalize returns: --normalize_returns=False")
    for k in ("n_step", "target_network_update_freq", "replay_buffer_capacity"):
        if getattr(cfg, k) < 1:
            raise ConfigError(f"--{k} must be >= 1, got {getattr(cfg, k)}")
    if cfg.replay_buffer_capacity < 2 * cfg.batch_size * cfg.num_batches_per_epoch:
        raise ConfigError(
            f"--replay_buffer_capacity={cfg.replay_buffer_capacity} must hold at least two iterations "
            f"(2 * batch_size * num_batches_per_epoch = {2 * cfg.batch_size * cfg.num_batches_per_epoch})"
        )
    if cfg.training_intensity <= 0:
        raise ConfigError(f"--training_intensity must be > 0, got {cfg.training_intensity}")
    if not 0.0 <= cfg.apex_epsilon <= 1.0:
        raise ConfigError(f"--apex_epsilon must be in [0, 1], got {cfg.apex_epsilon}")


def _check_ray_pbt(cfg: Config) -> None:
    """--pbt_backend=ray trains each member in segments that end at PBT boundaries (pbt/ray_backend.py)."""
    if cfg.pbt_target_objective != "true_objective":
        raise ConfigError(
            "--pbt_backend=ray ranks members by --pbt_target_objective=true_objective only (learner statistics "
            "are not in the members' progress.csv)"
        )
    for schedule in ("lr_schedule", "exploration_loss_schedule"):
        if getattr(cfg, schedule) == "linear_decay":
            raise ConfigError(f"--pbt_backend=ray needs --{schedule}=constant (each segment has its own budget)")
    if cfg.pbt_cpus_per_member < 0 or cfg.pbt_gpus_per_member < 0 or cfg.pbt_max_member_restarts < 0:
        raise ConfigError("--pbt_cpus_per_member, --pbt_gpus_per_member and --pbt_max_member_restarts must be >= 0")


def _check_remote_samplers(cfg: Config) -> None:
    """--sampler_nodes: what the remote samplers support (distributed/remote_samplers.py)."""
    if cfg.sampler_nodes < 0 or cfg.broadcast_interval < 1:
        raise ConfigError("--sampler_nodes must be >= 0 and --broadcast_interval >= 1")
    if cfg.evaluation_run:
        return  # enjoy.py samples locally whatever the trained run did
    if cfg.sampler_nodes == 0:
        if not cfg.local_samplers:
            raise ConfigError("--local_samplers=False needs --sampler_nodes >= 1 (someone has to sample)")
        return
    if cfg.serial_mode or not cfg.async_rl or cfg.num_policies > 1 or cfg.algo != "APPO":
        raise ConfigError(
            "--sampler_nodes needs a single-policy APPO training run with --async_rl=True and --serial_mode=False"
        )
    if not module_available("ray"):
        raise ConfigError(f"--sampler_nodes needs Ray: {install_hint('ray')}")


def _check_data_parallel(cfg: Config) -> None:
    """--learners_per_policy > 1: what a data-parallel learner group does not run with."""
    n = cfg.learners_per_policy
    if n < 1:
        raise ConfigError(f"--learners_per_policy must be >= 1, got {n}")
    if n == 1:
        return
    if not 0 < cfg.collective_timeout_sec < cfg.heartbeat_timeout_sec:
        raise ConfigError(
            f"--collective_timeout_sec={cfg.collective_timeout_sec:g} must be > 0 and below "
            f"--heartbeat_timeout_sec={cfg.heartbeat_timeout_sec:g} (a rank waiting in a collective sends no heartbeat)"
        )
    off = {
        "--serial_mode": cfg.serial_mode,  # its ranks must run at once, in processes of their own
        "--with_pbt": cfg.with_pbt,  # hyperparameter and weight exchanges would have to reach every rank
        "--exp_replayer=uniform with --algo=APPO": cfg.algo == "APPO" and cfg.exp_replayer == "uniform",
        "--sampler_only": cfg.sampler_only,
        "--sampler_nodes": cfg.sampler_nodes > 0,
    }
    if bad := [flag for flag, on in off.items() if on]:
        raise ConfigError(f"--learners_per_policy={n} does not run with {', '.join(bad)}")
    if cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout < n:
        raise ConfigError(
            f"--learners_per_policy={n}: an iteration of batch_size*num_batches_per_epoch/rollout = "
            f"{cfg.batch_size * cfg.num_batches_per_epoch // cfg.rollout} trajectories leaves a rank without one"
        )
