"""The options of a run's course: when it stops and what it saves, what it logs and reports, and how it survives
failing workers."""

from __future__ import annotations

from sample_factory.config.option_types import Number, OptionGroup, opt


class RunOptions(OptionGroup, title="Run length and checkpoints"):
    """When a run stops and what it saves."""

    train_for_env_steps: Number = opt(
        1e10,
        "Stop when every policy has collected this many env steps (a budget per policy, as in Sample Factory; "
        "--lr_schedule=linear_decay decays over it).",
    )

    total_timesteps: Number | None = opt(
        None,
        "CleanRL's budget, in agent steps: sets --train_for_env_steps to this many agent steps in the run's "
        "env-step unit (x --env_frameskip on Atari and VizDoom, whose counters count frames). Not with "
        "--train_for_env_steps.",
    )

    train_for_seconds: Number = opt(1e10, "Stop after this much wall time.")

    stop_at_reward: float | None = opt(
        None, "Stop once the mean episode reward (over --stats_avg episodes) of every policy reaches this value."
    )

    save_every_sec: int = opt(120, "Checkpoint period.")

    keep_checkpoints: int = opt(2, "Newest checkpoints kept per policy.")

    save_best_metric: str = opt(
        "reward",
        "Metric of the best checkpoint (higher is better): reward (mean episode reward) or a learner statistic.",
    )

    save_best_every_sec: int = opt(5, "How often the best-checkpoint metric is checked.")

    save_best_after: Number = opt(100000, "No best checkpoint before this many env steps.")

    save_milestones_sec: int = opt(-1, "Keep a permanent checkpoint copy this often (-1: never).")


class LoggingOptions(OptionGroup, title="Logging and callbacks"):
    """What a run reports: summaries, the progress line, episode statistics, W&B, user callbacks."""

    experiment_summaries_interval: int = opt(10, "Seconds between TensorBoard summaries.")

    summaries_use_frameskip: bool = opt(
        True,
        "Count env frames (agent steps x --env_frameskip) rather than agent steps on envs with a frame skip "
        "(Atari, VizDoom), as Sample Factory does: FPS, env-step counters and x axes, checkpoint names and every "
        "env-step option (--train_for_env_steps, --save_best_after, --eval_every_env_steps, PBT periods) are "
        "then in frames. Other envs always count agent steps. The progress line and TensorBoard tags name "
        "the unit.",
    )

    episode_info_keys: list[str] = opt(
        [],
        "Keys of the info dict of an episode's last step to average per policy, e.g. success,kills: "
        "TensorBoard policy_stats/<key>, progress.csv columns <key>_p<policy>, the final summary. Numbers in "
        "info['episode_extra_stats'] (a dict) are always averaged the same way.",
    )

    callbacks: str | None = opt(
        None,
        "User hooks: a Callbacks subclass registered with sample_factory.experiment.callbacks.register_callbacks "
        "(its name) or module:Class (docs/callbacks-and-metrics.md).",
    )

    report_interval_sec: float = opt(
        5.0,
        "Seconds between progress lines (and progress.csv rows; with --async_rl=False rows come only at "
        "--progress_every_env_steps, whole iterations, so that they are the same in every run).",
    )

    progress_every_env_steps: Number = opt(
        10000,
        "Also write a progress.csv row and the reward and FPS TensorBoard points each time the env-step counter "
        "passes a multiple of this (at most 4 a second), so a short run has a curve; 0: only every "
        "--report_interval_sec / --experiment_summaries_interval.",
    )

    stats_avg: int = opt(100, "Episodes averaged in reported episode statistics.")

    with_wandb: bool = opt(
        False,
        "Also log the TensorBoard scalars to Weights & Biases (needs the [wandb] extra; WANDB_MODE=offline writes "
        "the run locally, wandb sync uploads it later). The run's id is kept in the experiment folder, so a "
        "resumed experiment continues the same run.",
        aliases=("track",),
    )

    wandb_user: str | None = opt(
        None, "W&B entity (user or team); default: the logged-in user's default entity.", aliases=("wandb_entity",)
    )

    wandb_project: str = opt("sample_factory", "W&B project.", aliases=("wandb_project_name",))

    wandb_group: str | None = opt(None, "W&B group (default: the --env name).")

    wandb_job_type: str = opt("SF", "W&B job type.")

    wandb_tags: list[str] = opt([], "W&B tags, comma-separated (a,b,c).")


class FaultOptions(OptionGroup, title="Fault tolerance"):
    """Heartbeats, worker restarts and timeouts."""

    heartbeat_interval: float = opt(2.0, "Seconds between heartbeats of each process.")

    heartbeat_timeout_sec: float = opt(
        60.0,
        "A process silent this long is killed, its threads' stacks printed to stderr first; actor/policy workers "
        "are restarted, a silent learner stops the run. "
        "A process still starting (its init sends no heartbeats) gets at least 30 s.",
    )

    max_worker_restarts: int = opt(
        3,
        "Restarts allowed per actor/policy worker within --worker_restart_window_sec: one more crash in that "
        "window stops the run with an error (a crash loop), while crashes further apart never add up.",
    )

    worker_restart_window_sec: float = opt(
        3600.0,
        "The window of --max_worker_restarts: only a worker's restarts of the last this many seconds count. "
        "0: every restart of the run counts.",
    )

    shutdown_timeout_sec: float = opt(8.0, "Time children get to exit before they are killed.")

    probe_env_timeout_sec: float = opt(60.0, "Time allowed to create the env once to read its spaces.")
