"""Generated from config/options.py by `make docs` (`python -m sample_factory.config.reference fields`); do not edit.
The type of every option's value, so that editors and readers see each option attribute of `Config`.
"""

from __future__ import annotations


class OptionFields:
    """Annotations only: argparse (or `Config.from_dict`) sets every option on the instance."""

    # Basic
    env: str | None  # default None
    experiment: str | None  # default None
    train_dir: str  # default './train_dir'
    device: str  # default 'auto'; one of auto, gpu, cpu
    tuned_for: str  # default 'auto'; one of auto, gpu, cpu
    seed: int | None  # default None
    serial_mode: bool  # default False
    async_rl: bool  # default True
    restart_behavior: str  # default 'resume'; one of resume, restart, overwrite

    # Sampling
    num_workers: int | None  # default None
    num_envs_per_worker: int  # default 2
    num_envs: int | None  # default None
    worker_num_splits: int  # default 2
    policy_workers_per_policy: int  # default 1
    num_policies: int  # default 1
    policy_mapping: str | None  # default None
    rollout: int  # default 32
    min_traj_buffers_per_worker: int  # default 2
    decorrelate_envs_on_one_worker: bool  # default True
    decorrelate_experience_max_seconds: float  # default 0.0
    force_envs_single_thread: bool  # default True
    set_workers_cpu_affinity: bool  # default True
    default_niceness: int  # default 0
    actor_worker_niceness: int  # default 10
    sampler_only: bool  # default False
    auto_tune: bool  # default False
    auto_tune_cache_dir: str  # default '~/.cache/sample_factory/auto_tune'
    auto_tune_seconds: float | None  # default None
    auto_tune_max_trials: int  # default 8
    message_queue: str  # default 'socket'; one of socket, faster_fifo
    env_backend: str  # default 'auto'; one of auto, gymnasium, gymnasium_vector, envpool
    env_frameskip: int  # default 4
    env_episodic_life: bool  # default True
    env_framestack: int  # default 4
    obs_keys: list[str]  # default []
    env_sticky_actions: float  # default 0.25
    env_seed_offset: int  # default 0
    max_episode_steps: int | None  # default None

    # Learner
    algo: str  # default 'APPO'; one of APPO, DQN
    batch_size: int  # default 1024
    num_batches_per_epoch: int  # default 1
    num_epochs: int  # default 1
    num_minibatches_to_accumulate: int  # default -1
    max_policy_lag: int  # default 1000
    gamma: float  # default 0.99
    with_vtrace: bool  # default True
    vtrace_rho: float  # default 1.0
    vtrace_c: float  # default 1.0
    gae_lambda: float  # default 0.95
    value_bootstrap: bool  # default True
    ppo_clip_ratio: float  # default 0.1
    ppo_clip_mode: str  # default 'symmetric'; one of symmetric, unbiased
    ppo_ratio_clamp: float  # default 20.0
    ppo_clip_value: float  # default 1.0
    value_loss_coeff: float  # default 0.5
    normalize_advantage: bool  # default True
    exploration_loss_coeff: float  # default 0.003
    exploration_loss_schedule: str  # default 'constant'; one of constant, linear_decay
    exploration_loss: str  # default 'entropy'; one of entropy, symmetric_kl
    kl_loss_coeff: float  # default 0.0
    max_grad_norm: float  # default 4.0
    learning_rate: float  # default 0.0001
    lr_schedule: str  # default 'constant'; one of constant, linear_decay, kl_adaptive
    kl_threshold: float  # default 0.008
    lr_min: float  # default 1e-06
    lr_max: float  # default 0.01
    adam_eps: float  # default 1e-06
    adam_beta1: float  # default 0.9
    adam_beta2: float  # default 0.999
    reward_scale: float  # default 1.0
    reward_clip: float  # default 1000.0
    max_nonfinite_updates: int  # default 20
    learner_main_loop_num_cores: int  # default 1
    learner_precision: str  # default 'fp32'; one of fp32, bf16, auto
    inference_precision: str  # default 'fp32'; one of fp32, bf16, auto
    torch_compile_learner: bool  # default False
    torch_compile_worker: bool  # default False
    inference_cuda_graphs: str  # default 'auto'; one of auto, True, False
    torch_compile_dynamo_backend: str  # default 'inductor'
    torch_compile_dynamo_mode: str  # default ''

    # Replay and DQN
    exp_replayer: str | None  # default None; one of one_time, uniform, prioritized
    replay_proportion: float  # default 0.0
    replay_buffer_num_slots: int  # default 0
    replay_buffer_capacity: int  # default 100000
    replay_buffer_device: str  # default 'auto'; one of auto, cpu, learner
    learning_starts: int  # default 1000
    training_intensity: float  # default 8.0
    n_step: int  # default 3
    target_network_update_freq: int  # default 500
    double_q: bool  # default True
    dueling: bool  # default True
    huber_delta: float  # default 1.0
    prioritized_replay_alpha: float  # default 0.6
    prioritized_replay_beta: float  # default 0.4
    prioritized_replay_eps: float  # default 1e-06
    apex_epsilon: float  # default 0.4
    apex_epsilon_alpha: float  # default 7.0
    eval_epsilon: float  # default 0.0
    save_replay_buffer: bool  # default False

    # Model
    encoder_mlp_layers: list[int]  # default [512, 512]
    encoder_custom: str | None  # default None
    # default 'convnet_simple'; one of convnet_simple, convnet_nature, convnet_minatar, resnet_impala
    encoder_conv_architecture: str
    nonlinearity: str  # default 'elu'; one of elu, relu, tanh
    policy_initialization: str  # default 'orthogonal'; one of orthogonal, xavier_uniform, torch_default
    use_rnn: bool  # default True
    rnn_type: str  # default 'gru'; one of gru, lstm
    rnn_size: int  # default 512
    rnn_num_layers: int  # default 1
    recurrence: int  # default -1
    actor_critic_share_weights: bool  # default True
    initial_stddev: float  # default 1.0
    adaptive_stddev: bool  # default False
    use_sde: bool  # default False
    sde_sample_freq: int  # default -1
    continuous_tanh_scale: float  # default 0.0
    action_bounds: str  # default 'clip'; one of clip, tanh, none
    normalize_returns: bool  # default False
    normalize_input: bool  # default False

    # Run control and logging
    train_for_env_steps: float  # default 10000000000.0
    total_timesteps: float | None  # default None
    train_for_seconds: float  # default 10000000000.0
    stop_at_reward: float | None  # default None
    save_every_sec: int  # default 120
    keep_checkpoints: int  # default 2
    save_best_metric: str  # default 'reward'
    save_best_every_sec: int  # default 5
    save_best_after: float  # default 100000
    save_milestones_sec: int  # default -1
    experiment_summaries_interval: int  # default 10
    summaries_use_frameskip: bool  # default True
    episode_info_keys: list[str]  # default []
    callbacks: str | None  # default None
    report_interval_sec: float  # default 5.0
    progress_every_env_steps: float  # default 10000
    stats_avg: int  # default 100
    with_wandb: bool  # default False
    wandb_user: str | None  # default None
    wandb_project: str  # default 'sample_factory'
    wandb_group: str | None  # default None
    wandb_job_type: str  # default 'SF'
    wandb_tags: list[str]  # default []
    heartbeat_interval: float  # default 2.0
    heartbeat_timeout_sec: float  # default 60.0
    max_worker_restarts: int  # default 3
    worker_restart_window_sec: float  # default 3600.0
    shutdown_timeout_sec: float  # default 8.0
    probe_env_timeout_sec: float  # default 60.0

    # Evaluation (train.py and enjoy.py)
    eval_every_env_steps: float  # default -1
    eval_episodes: int  # default 10
    eval_policies: str  # default 'all'
    eval_env_overrides: str | None  # default None
    max_num_frames: float  # default 1000000000.0
    eval_deterministic: bool  # default False
    capture_video: bool  # default False

    # Evaluation (enjoy.py only)
    max_num_episodes: int  # default 10
    policy_index: int  # default 0
    load_checkpoint_kind: str  # default 'latest'; one of latest, best
    no_render: bool  # default False
    fps: float  # default 0.0
    save_video: bool  # default False
    video_frames: float  # default 1000000000.0
    video_name: str  # default 'replay'
    video_per_episode: bool  # default False
    eval_results_file: str | None  # default None

    # Devices and data-parallel learners
    learners_per_policy: int  # default 1
    learner_devices: str  # default ''
    policy_worker_devices: str  # default ''
    collective_timeout_sec: float  # default 45.0

    # Remote samplers (Ray)
    sampler_nodes: int  # default 0
    ray_address: str | None  # default None
    broadcast_interval: int  # default 1
    local_samplers: bool  # default True
    remote_compression: str  # default 'auto'; one of none, zlib, auto
    remote_link_mbps: float  # default 1000.0

    # PBT
    with_pbt: bool  # default False
    pbt_period_env_steps: int  # default 5000000
    pbt_start_mutation: int  # default 20000000
    pbt_replace_fraction: float  # default 0.3
    pbt_mutation_rate: float  # default 0.15
    pbt_replace_reward_gap: float  # default 0.1
    pbt_replace_reward_gap_absolute: float  # default 1e-06
    pbt_optimize_gamma: bool  # default False
    pbt_target_objective: str  # default 'true_objective'
    pbt_perturb_min: float  # default 1.1
    pbt_perturb_max: float  # default 1.5
    pbt_backend: str  # default 'in_process'; one of in_process, ray
    pbt_cpus_per_member: int  # default 0
    pbt_gpus_per_member: float  # default 0.0
    pbt_max_member_restarts: int  # default 3
    pbt_mix_policies_in_one_env: bool  # default True
