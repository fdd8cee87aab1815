"""Every command-line option, declared once as an `Option` record (name, type, default, help, aliases, choices),
grouped for the generated reference (docs/config-reference.md). parse.py builds the parser and the checks from it;
config/fields.py (the typed attributes of `Config`) is generated from it. Some groups are declared in their own
modules (options_<group>.py) and only assembled here."""

from __future__ import annotations

from sample_factory.config.option_types import ConfigError, Option, _num, int_list, str2bool, str_list  # noqa: F401
from sample_factory.config.options_devices import DEVICE_OPTIONS
from sample_factory.config.options_eval import ENJOY_OPTIONS, EVAL_OPTIONS
from sample_factory.config.options_model import MODEL_OPTIONS
from sample_factory.config.options_pbt import PBT_OPTIONS
from sample_factory.config.options_remote import REMOTE_OPTIONS
from sample_factory.config.options_replay import REPLAY_OPTIONS

# Groups of options only enjoy.py reads: train.py refuses them, with a line saying where they belong.
ENJOY_ONLY_GROUP = "Evaluation (enjoy.py only)"
EVAL_GROUPS = ("Evaluation (train.py and enjoy.py)", ENJOY_ONLY_GROUP)


def all_options() -> list[Option]:
    return [opt for options in OPTIONS.values() for opt in options]


# Groups make the reference readable.
OPTIONS: dict[str, list[Option]] = {
    "Basic": [
        Option(
            "env",
            str,
            None,
            "Environment: a gymnasium id (CartPole-v1), a custom env registered with register_env, or module:EnvId "
            "(the module is imported first, in every process).",
            aliases=("env_id",),
        ),
        Option(
            "experiment",
            str,
            None,
            "Experiment name; its folder is <train_dir>/<experiment>. A plain folder name: not '.' or '..', no '/', "
            "at most 200 bytes. Not given: <env>__<algo>__<seed> (CleanRL's run name without its start time, so the "
            "same command resumes the run).",
            aliases=("exp_name",),
        ),
        Option("train_dir", str, "./train_dir", "Root folder for experiments."),
        Option(
            "device",
            str,
            "auto",
            "Where policy workers and learners run: auto (GPU when available), gpu, or cpu.",
            choices=("auto", "gpu", "cpu"),
        ),
        Option(
            "tuned_for",
            str,
            "auto",
            "Which of the preset's setups applies: gpu (the GPU setup: larger batches, more epochs), cpu (the CPU "
            "one), or auto (gpu where training runs on a GPU). --device=cpu --tuned_for=gpu trains what a GPU user "
            "gets, on the CPU: same samples per update, same frames to a score (up to policy lag), slower.",
            choices=("auto", "gpu", "cpu"),
        ),
        Option(
            "seed",
            int,
            None,
            "Random seed. With --async_rl=False or --serial_mode=True a fixed seed makes the run reproducible "
            "(same weights for the same command, on the CPU; docs/algorithms.md).",
        ),
        Option("serial_mode", str2bool, False, "Run actor, policy and learner components in one process (debugging)."),
        Option(
            "async_rl",
            str2bool,
            True,
            "Asynchronous collection (APPO). False: collect one batch with the current policy, train, repeat "
            "(with --seed: reproducible, see docs/algorithms.md).",
        ),
        Option(
            "restart_behavior",
            str,
            "resume",
            "What to do when the experiment folder already exists: resume it, restart (archive the old one), "
            "or overwrite (delete it).",
            choices=("resume", "restart", "overwrite"),
        ),
    ],
    "Sampling": [
        Option(
            "num_workers",
            int,
            None,
            "Number of actor worker processes (default: the CPU cores this process may use: its affinity, e.g. "
            "taskset, capped by a cgroup CPU quota).",
        ),
        Option("num_envs_per_worker", int, 2, "Envs stepped by one actor worker."),
        Option(
            "num_envs",
            int,
            None,
            "CleanRL's: the total number of envs, spread evenly over the workers (sets --num_envs_per_worker; "
            "without a typed --num_workers, the workers are the most cores that divide it).",
        ),
        Option(
            "worker_num_splits",
            int,
            2,
            "Groups the envs of a worker are split into for double-buffered sampling (divides num_envs_per_worker).",
        ),
        Option("policy_workers_per_policy", int, 1, "Policy worker processes serving inference for each policy."),
        Option(
            "num_policies",
            int,
            1,
            "Number of policies trained at once, each with its own learner, policy workers, checkpoints and "
            "summaries; they share the actor workers (docs/multi-policy-and-pbt.md).",
        ),
        Option(
            "policy_mapping",
            str,
            None,
            "Multi-agent envs with several policies mixed in one env: a mapping registered with "
            "sample_factory.workers.policy_mapping.register_policy_mapping that picks each agent's policy at episode "
            "start (default: uniformly at random).",
        ),
        Option(
            "rollout",
            int,
            32,
            "Trajectory length collected per env before it is handed to the learner.",
            aliases=("num_steps",),
        ),
        Option(
            "min_traj_buffers_per_worker",
            int,
            2,
            "Shared trajectory buffers per split of each actor worker (more buffers: more tolerance to learner "
            "hiccups, more policy lag).",
        ),
        Option(
            "decorrelate_envs_on_one_worker",
            str2bool,
            True,
            "Step the envs of a worker a different random number of times at start so episodes are decorrelated. "
            "Not applied where the run resumes a checkpoint nor to a restarted worker: there the policy has trained, "
            "and episodes begun with random actions would be counted as its own.",
        ),
        Option(
            "decorrelate_experience_max_seconds",
            float,
            0.0,
            "Each split of each actor worker waits a random time, uniform in [0, this], after creating its envs and "
            "before its first inference request, so the rollouts of different workers do not finish in lockstep "
            "(the learner then gets an even stream instead of bursts). 0: no wait (Sample Factory's default). Not "
            "applied in --serial_mode or to a restarted worker.",
        ),
        Option(
            "force_envs_single_thread", str2bool, True, "Limit native thread pools in actor workers (threadpoolctl)."
        ),
        Option("set_workers_cpu_affinity", str2bool, True, "Pin actor workers to CPU cores (psutil)."),
        Option(
            "default_niceness",
            int,
            0,
            "Niceness of the learner and policy-worker processes (0: the runner's); actor workers run "
            "--actor_worker_niceness above it. Below 0 needs root or CAP_SYS_NICE.",
        ),
        Option(
            "actor_worker_niceness",
            int,
            10,
            "How much nicer than --default_niceness the actor workers run (at most 19, never below the runner's; "
            "Sample Factory uses 10): where busy processes outnumber the cores, the learner and inference, which "
            "the others wait for, get the CPU first and the envs use what is left (measured in "
            "benchmarks/notebook.md). 0: every process at the same priority.",
        ),
        Option("sampler_only", str2bool, False, "Collect experience without training (throughput measurement)."),
        Option(
            "auto_tune",
            str2bool,
            False,
            "Before training, pick --num_workers, --num_envs_per_worker, --worker_num_splits, "
            "--policy_workers_per_policy and --learner_main_loop_num_cores for this machine with the throughput tuner "
            "(python -m sample_factory.tools.tune: short training runs, minutes) and train with the pick; flags typed "
            "on the command line are kept, and nothing that changes learning per sample is touched. The pick is "
            "cached per env, flags and machine in --auto_tune_cache_dir: later runs reuse it at once.",
        ),
        Option(
            "auto_tune_cache_dir",
            str,
            "~/.cache/sample_factory/auto_tune",
            "Where --auto_tune keeps its picks (one JSON file per env, flags and machine; delete it to tune again).",
        ),
        Option(
            "auto_tune_seconds",
            float,
            None,
            "Length of each --auto_tune trial run (default: 20 s for envs stepping faster than 20k steps/s in one "
            "process, else 60 s).",
        ),
        Option(
            "auto_tune_max_trials",
            int,
            8,
            "--auto_tune's search runs after the defaults' run (then 2 confirmation runs each of the defaults and "
            "of the pick).",
        ),
        Option(
            "message_queue",
            str,
            "socket",
            "Transport of the small messages between processes: socket (Unix SOCK_SEQPACKET, kill-safe, default) "
            "or faster_fifo (Sample Factory's; a process killed inside a put can leave its lock held and hang the "
            "run: docs/architecture.md).",
            choices=("socket", "faster_fifo"),
        ),
        Option(
            "env_backend",
            str,
            "auto",
            "How an actor worker steps the envs of a split: gymnasium (one python env each), gymnasium_vector "
            "(gymnasium's own batched numpy implementation of the env, one call per split: CartPole), envpool (one "
            "batched EnvPool call per split; Atari and MuJoCo names, needs the [envpool] extra), or auto: "
            "gymnasium_vector where the env has one, else gymnasium.",
            choices=("auto", "gymnasium", "gymnasium_vector", "envpool"),
        ),
        Option(
            "env_frameskip", int, 4, "Atari and VizDoom: frames per agent step (Atari max-pools over the last two)."
        ),
        Option(
            "env_episodic_life",
            str2bool,
            True,
            "Atari: a lost life ends the training episode (the game goes on); evaluation always plays whole games "
            "and episode rewards are always reported per whole game.",
        ),
        Option("env_framestack", int, 4, "Atari: stacked frames per observation."),
        Option(
            "obs_keys",
            str_list,
            [],
            "Dict observations: the keys the model reads, comma-separated (gymnasium's FilterObservation). Empty: "
            "every key an encoder takes (Box, Discrete, MultiBinary, MultiDiscrete); others, such as MiniGrid's text "
            "mission, are left out and the run says which at start.",
        ),
        Option("env_sticky_actions", float, 0.25, "Atari: probability of repeating the previous action."),
        Option("env_seed_offset", int, 0, "Added to the per-env seed (seed * 1000 + worker * envs + env)."),
        Option(
            "max_episode_steps",
            int,
            None,
            "Truncate every episode after this many agent steps (gymnasium's TimeLimit, as gym.make's argument of "
            "the same name: a truncation, so values bootstrap past it). Default: the env's own limit; envs that "
            "register none (CliffWalking-v1, ...) run an episode until the env ends it. Gymnasium ids and custom "
            "envs; Atari and VizDoom games keep their own limits.",
        ),
    ],
    "Learner": [
        Option(
            "algo",
            str,
            "APPO",
            "Training algorithm (docs/algorithms.md): APPO (on-policy, asynchronous PPO with V-trace) or DQN "
            "(Ape-X: epsilon-greedy actors, replay, n-step double-Q; discrete actions, feed-forward models).",
            choices=("APPO", "DQN"),
        ),
        Option(
            "batch_size",
            int,
            1024,
            "Minibatch size in samples (a multiple of --rollout). DQN: the replayed minibatch of one SGD step "
            "(RLlib's train_batch_size).",
        ),
        Option(
            "num_batches_per_epoch",
            int,
            1,
            "Minibatches per training iteration; an iteration consumes batch_size * num_batches_per_epoch samples.",
            aliases=("num_batches_per_iteration", "num_minibatches"),
        ),
        Option("num_epochs", int, 1, "Passes over the data of one iteration.", aliases=("ppo_epochs", "update_epochs")),
        Option(
            "num_minibatches_to_accumulate",
            int,
            -1,
            "Extra minibatches of experience collected ahead while the learner trains; collection pauses beyond "
            "it (-1: one iteration's worth in async mode, 0 in sync mode).",
        ),
        Option(
            "max_policy_lag",
            int,
            1000,
            "Samples older than this many policy versions are dropped (masked out of every loss term). 1000 is "
            "Sample Factory 2's default: effectively off, since the bounded trajectory buffers keep the lag to tens "
            "of versions; set it low to enforce a limit.",
        ),
        Option("gamma", float, 0.99, "Discount factor."),
        Option("with_vtrace", str2bool, True, "V-trace value targets and advantages; False uses GAE."),
        Option("vtrace_rho", float, 1.0, "V-trace importance ratio clipping (rho bar)."),
        Option("vtrace_c", float, 1.0, "V-trace trace-cutting clipping (c bar)."),
        Option("gae_lambda", float, 0.95, "GAE lambda (used when --with_vtrace=False)."),
        Option(
            "value_bootstrap",
            str2bool,
            True,
            "On time-limit truncation bootstrap the return from the value of the final observation.",
        ),
        Option(
            "ppo_clip_ratio",
            float,
            0.1,
            "PPO ratio clipping c: the ratio is clipped to [1 - c, 1 + c] (--ppo_clip_mode=unbiased: [1/(1+c), 1+c]).",
            aliases=("clip_coef",),
        ),
        Option(
            "ppo_clip_mode",
            str,
            "symmetric",
            "Interval of the PPO ratio clip: symmetric [1 - c, 1 + c] (the PPO paper), or unbiased [1/(1+c), 1+c], "
            "symmetric in log-ratio, as Sample Factory 2 clips (for c=0.1: [0.909, 1.1] instead of [0.9, 1.1]).",
            choices=("symmetric", "unbiased"),
        ),
        Option(
            "ppo_ratio_clamp",
            float,
            20.0,
            "Before the clipped objective the ratio is clamped to [1/x, x] (no gradient outside): a very stale sample "
            "whose probability moved more than x-fold would otherwise dominate the gradient through the unclipped "
            "branch (r * A with A < 0 is unbounded). 20 is Sample Factory 2's fixed [0.05, 20]; <= 0 disables.",
        ),
        Option("ppo_clip_value", float, 1.0, "Value clipping around the behaviour value (<= 0 disables)."),
        Option("value_loss_coeff", float, 0.5, "Weight of the value loss."),
        Option(
            "normalize_advantage",
            str2bool,
            True,
            "Normalize advantages to zero mean, unit std per minibatch.",
            aliases=("norm_adv",),
        ),
        Option("exploration_loss_coeff", float, 0.003, "Weight of the exploration loss (--exploration_loss)."),
        Option(
            "exploration_loss_schedule",
            str,
            "constant",
            "constant, or linear_decay of --exploration_loss_coeff to 0 over --train_for_env_steps (a wide search "
            "early, a sharper policy at the end; RLlib's entropy_coeff_schedule). Reported as exploration_coeff.",
            choices=("constant", "linear_decay"),
        ),
        Option(
            "exploration_loss",
            str,
            "entropy",
            "entropy: an entropy bonus. symmetric_kl: a penalty on KL(u || pi) + KL(pi || u) with u uniform over the "
            "allowed actions, which, unlike entropy, grows without bound as an action's probability goes to 0; "
            "discrete action spaces only (Discrete, MultiDiscrete, Tuples of them: a sum over the parts); a space "
            "with Box parts is rejected at start.",
            choices=("entropy", "symmetric_kl"),
        ),
        Option(
            "kl_loss_coeff",
            float,
            0.0,
            "Weight of a penalty on KL(behaviour policy || current policy) (the fixed-coefficient KL penalty of the "
            "PPO paper; Sample Factory recommends it for continuous actions). 0: off. Estimated from the stored "
            "behaviour log-probs as the mean of (r - 1) - log r over the valid samples (r = pi / mu): its gradient is "
            "an unbiased estimate of the KL's for any action space, with no extra buffers. Reported as kl_loss.",
        ),
        Option("max_grad_norm", float, 4.0, "Gradient norm clipping (<= 0 disables)."),
        Option("learning_rate", float, 1e-4, "Adam learning rate.", aliases=("lr",)),
        Option(
            "lr_schedule",
            str,
            "constant",
            "constant; linear_decay to 0 over --train_for_env_steps; or kl_adaptive (rl_games' adaptive schedule, "
            "APPO only): after every SGD step the rate is divided by 1.5 when the minibatch's approx_kl is above "
            "2 x --kl_threshold and multiplied by 1.5 when below half of it, within [--lr_min, --lr_max], starting "
            "at --learning_rate. Saved in the checkpoint; reported as lr.",
            choices=("constant", "linear_decay", "kl_adaptive"),
        ),
        Option(
            "kl_threshold",
            float,
            0.008,
            "--lr_schedule=kl_adaptive: the KL (behaviour policy -> current policy, per sample) the learning rate "
            "is steered to (rl_games' kl_threshold).",
        ),
        Option("lr_min", float, 1e-6, "--lr_schedule=kl_adaptive: the lowest learning rate."),
        Option("lr_max", float, 1e-2, "--lr_schedule=kl_adaptive: the highest learning rate."),
        Option("adam_eps", float, 1e-6, "Adam epsilon."),
        Option("adam_beta1", float, 0.9, "Adam beta1."),
        Option("adam_beta2", float, 0.999, "Adam beta2."),
        Option("reward_scale", float, 1.0, "Rewards are multiplied by this before training."),
        Option("reward_clip", float, 1000.0, "Rewards are clipped to [-c, c] after scaling."),
        Option(
            "max_nonfinite_updates",
            int,
            20,
            "Consecutive SGD steps skipped for a NaN/inf loss or gradient before the run stops with an error.",
        ),
        Option("learner_main_loop_num_cores", int, 1, "Torch threads in the learner process."),
        Option(
            "learner_precision",
            str,
            "fp32",
            "Precision of the learner's forward pass. bf16: conv and linear layers run under torch.autocast in "
            "bfloat16 (weights, gradients, optimizer, distributions and losses stay fp32); the Atari conv net's "
            "training step ran 2.2x faster on an AMD EPYC with AVX512-BF16, 1.45x slower on an Intel Xeon with it. "
            "auto: on a CPU with native bf16, whichever of the two runs the run's model faster here (timed by the "
            "runner at start, 0.4 s for the Atari net, and logged); on a GPU, bf16 where it supports it.",
            choices=("fp32", "bf16", "auto"),
        ),
        Option(
            "inference_precision",
            str,
            "fp32",
            "Precision of the policy workers' conv encoders. bf16: their weights and activations are bfloat16 (a "
            "copy converted at each weight update; MLP encoders, cores, heads and action sampling stay fp32); the "
            "Atari conv net inferred 1.5-1.8x faster at batches of 8-32 on an AMD EPYC with AVX512-BF16, 1.2-1.4x "
            "slower on an Intel Xeon with it. auto: as for --learner_precision, timed at the policy workers' batch.",
            choices=("fp32", "bf16", "auto"),
        ),
        Option(
            "torch_compile_learner",
            str2bool,
            False,
            "torch.compile the learner's encoders (RLlib's name). A compilation failure falls back to eager with one "
            "log line. Compiling takes seconds to a minute at start (cached in /tmp/torchinductor_<user> for later "
            "runs); measured gains are in benchmarks/notebook.md.",
        ),
        Option(
            "torch_compile_worker",
            str2bool,
            False,
            "torch.compile the policy workers' encoders for inference (dynamic batch sizes), same fallback.",
        ),
        Option(
            "inference_cuda_graphs",
            str,
            "auto",
            "Replay the policy workers' inference step (forward and action sampling) from CUDA graphs, one per bucket "
            "of batch sizes (powers of two; a batch is padded to the next): one launch instead of one per kernel. "
            "auto: on CUDA devices for recurrent models (whole runs 1.15-1.2x), off for feed-forward ones (no "
            "whole-run gain measured yet) and with --torch_compile_worker. A failed capture falls back to eager "
            "with one log line. Measured in benchmarks/notebook.md.",
            choices=("auto", "True", "False"),
        ),
        Option(
            "torch_compile_dynamo_backend",
            str,
            "inductor",
            "torch.compile backend for --torch_compile_learner/--torch_compile_worker.",
        ),
        Option(
            "torch_compile_dynamo_mode",
            str,
            "",
            "torch.compile mode: empty for torch's default, reduce-overhead (CUDA graphs: small GPU batches), "
            "max-autotune.",
        ),
    ],
    "Replay and DQN": REPLAY_OPTIONS,
    "Model": MODEL_OPTIONS,
    "Run control and logging": [
        Option(
            "train_for_env_steps",
            _num,
            1e10,
            "Stop when every policy has collected this many env steps (a budget per policy, as in Sample Factory; "
            "--lr_schedule=linear_decay decays over it).",
        ),
        Option(
            "total_timesteps",
            _num,
            None,
            "CleanRL's budget, in agent steps: sets --train_for_env_steps to this many agent steps in the run's "
            "env-step unit (x --env_frameskip on Atari and VizDoom, whose counters count frames). Not with "
            "--train_for_env_steps.",
        ),
        Option("train_for_seconds", _num, 1e10, "Stop after this much wall time."),
        Option(
            "stop_at_reward",
            float,
            None,
            "Stop once the mean episode reward (over --stats_avg episodes) of every policy reaches this value.",
        ),
        Option("save_every_sec", int, 120, "Checkpoint period."),
        Option("keep_checkpoints", int, 2, "Newest checkpoints kept per policy."),
        Option(
            "save_best_metric",
            str,
            "reward",
            "Metric of the best checkpoint (higher is better): reward (mean episode reward) or a learner statistic.",
        ),
        Option("save_best_every_sec", int, 5, "How often the best-checkpoint metric is checked."),
        Option("save_best_after", _num, 100000, "No best checkpoint before this many env steps."),
        Option("save_milestones_sec", int, -1, "Keep a permanent checkpoint copy this often (-1: never)."),
        Option("experiment_summaries_interval", int, 10, "Seconds between TensorBoard summaries."),
        Option(
            "summaries_use_frameskip",
            str2bool,
            True,
            "Count env frames (agent steps x --env_frameskip) rather than agent steps on envs with a frame skip "
            "(Atari, VizDoom), as Sample Factory does: FPS, env-step counters and x axes, checkpoint names and every "
            "env-step option (--train_for_env_steps, --save_best_after, --eval_every_env_steps, PBT periods) are "
            "then in frames. Other envs always count agent steps. The progress line and TensorBoard tags name "
            "the unit.",
        ),
        Option(
            "episode_info_keys",
            str_list,
            [],
            "Keys of the info dict of an episode's last step to average per policy, e.g. success,kills: "
            "TensorBoard policy_stats/<key>, progress.csv columns <key>_p<policy>, the final summary. Numbers in "
            "info['episode_extra_stats'] (a dict) are always averaged the same way.",
        ),
        Option(
            "callbacks",
            str,
            None,
            "User hooks: a Callbacks subclass registered with sample_factory.experiment.callbacks.register_callbacks "
            "(its name) or module:Class (docs/callbacks-and-metrics.md).",
        ),
        Option(
            "report_interval_sec",
            float,
            5.0,
            "Seconds between progress lines (and progress.csv rows; with --async_rl=False rows come only at "
            "--progress_every_env_steps, whole iterations, so that they are the same in every run).",
        ),
        Option(
            "progress_every_env_steps",
            _num,
            10000,
            "Also write a progress.csv row and the reward and FPS TensorBoard points each time the env-step counter "
            "passes a multiple of this (at most 4 a second), so a short run has a curve; 0: only every "
            "--report_interval_sec / --experiment_summaries_interval.",
        ),
        Option("stats_avg", int, 100, "Episodes averaged in reported episode statistics."),
        Option(
            "with_wandb",
            str2bool,
            False,
            "Also log the TensorBoard scalars to Weights & Biases (needs the [wandb] extra; WANDB_MODE=offline writes "
            "the run locally, wandb sync uploads it later). The run's id is kept in the experiment folder, so a "
            "resumed experiment continues the same run.",
            aliases=("track",),
        ),
        Option(
            "wandb_user",
            str,
            None,
            "W&B entity (user or team); default: the logged-in user's default entity.",
            aliases=("wandb_entity",),
        ),
        Option("wandb_project", str, "sample_factory", "W&B project.", aliases=("wandb_project_name",)),
        Option("wandb_group", str, None, "W&B group (default: the --env name)."),
        Option("wandb_job_type", str, "SF", "W&B job type."),
        Option("wandb_tags", str_list, [], "W&B tags, comma-separated (a,b,c)."),
        Option("heartbeat_interval", float, 2.0, "Seconds between heartbeats of each process."),
        Option(
            "heartbeat_timeout_sec",
            float,
            60.0,
            "A process silent this long is killed, its threads' stacks printed to stderr first; actor/policy workers "
            "are restarted, a silent learner stops the run. "
            "A process still starting (its init sends no heartbeats) gets at least 30 s.",
        ),
        Option(
            "max_worker_restarts",
            int,
            3,
            "Restarts allowed per actor/policy worker within --worker_restart_window_sec: one more crash in that "
            "window stops the run with an error (a crash loop), while crashes further apart never add up.",
        ),
        Option(
            "worker_restart_window_sec",
            float,
            3600.0,
            "The window of --max_worker_restarts: only a worker's restarts of the last this many seconds count. "
            "0: every restart of the run counts.",
        ),
        Option("shutdown_timeout_sec", float, 8.0, "Time children get to exit before they are killed."),
        Option("probe_env_timeout_sec", float, 60.0, "Time allowed to create the env once to read its spaces."),
    ],
    "Evaluation (train.py and enjoy.py)": EVAL_OPTIONS,
    ENJOY_ONLY_GROUP: ENJOY_OPTIONS,
    "Devices and data-parallel learners": DEVICE_OPTIONS,
    "Remote samplers (Ray)": REMOTE_OPTIONS,
    "PBT": PBT_OPTIONS,
}
