"""Per env-family presets as tables: option -> value, applied to every flag the user did not type and recorded in
cfg.json. Each value has a one-line reason; the runs behind them are in benchmarks/notebook.md ("Presets: the
measurements behind the values") and docs/results.md. Which preset a run gets is config/env_defaults.py's choice."""

from __future__ import annotations

from typing import Any

Preset = dict[str, Any]


def _without(preset: Preset, *options: str) -> Preset:
    """A preset's table less some options (those the other family's env side does not share)."""
    return {k: v for k, v in preset.items() if k not in options}


# CartPole, Acrobot: tuned for frames per second on small CPU machines (benchmarks/notebook.md#classic_control-preset).
CLASSIC_CONTROL: Preset = {
    "num_envs_per_worker": 64,  # many cheap envs per worker: each inference request carries a large batch
    "worker_num_splits": 1,  # one request per worker round: faster than 2 splits here (notebook, classic_control)
    "rollout": 32,  # short trajectories: episodes are short and samples are cheap
    "batch_size": 2048,  # large minibatches: the MLP is tiny, a step's cost is per call
    "num_batches_per_epoch": 2,  # iterations of 4,096 samples
    "num_epochs": 4,  # several epochs because samples are cheap
    "num_minibatches_to_accumulate": 0,  # less policy lag: CartPole is solved in fewer samples
    "use_rnn": False,  # the state is fully observed
    "encoder_mlp_layers": [64, 64],  # the PPO paper's and CleanRL's MLP for these tasks
    "nonlinearity": "tanh",  # the PPO paper's and CleanRL's activation for these tasks
    "learning_rate": 3e-3,  # high, with the large minibatches: solved in seconds (docs/results.md#classic)
    "lr_schedule": "constant",  # a run stops at the score, whose length a schedule cannot know
    "gamma": 0.99,  # episodes of at most 500 steps
    "ppo_clip_ratio": 0.2,  # the PPO paper's
    "ppo_clip_value": 0.0,  # off: a fixed clip range would depend on the return's scale
    "exploration_loss_coeff": 0.0,  # the reward is dense: no entropy bonus needed
    "max_grad_norm": 0.5,  # CleanRL's PPO
    "value_loss_coeff": 0.5,  # CleanRL's PPO
    "reward_scale": 0.1,  # returns of up to 500 brought near the policy loss's scale
    "adam_eps": 1e-5,  # CleanRL's PPO
}

# Pendulum: Gaussian actions, both normalizers, short horizon. LunarLanderContinuous-v3 (never measured with this
# table) gets its space's defaults, which were measured on it (docs/results.md#envs-without-a-preset).
CONTINUOUS_CONTROL: Preset = {
    "num_envs_per_worker": 16,  # cheap steps, batched per inference request
    "worker_num_splits": 2,  # double buffering: one half steps while the other waits for actions
    "rollout": 64,  # a third of a 200-step episode
    "batch_size": 2048,  # large minibatches: the MLP is tiny
    "num_batches_per_epoch": 4,  # iterations of 8,192 samples
    "num_epochs": 8,  # many epochs: samples are cheap, and continuous control learns per sample
    "num_minibatches_to_accumulate": 0,  # less policy lag
    "use_rnn": False,  # the state is fully observed
    "encoder_mlp_layers": [64, 64],  # the PPO paper's MLP for continuous control
    "nonlinearity": "tanh",  # the PPO paper's activation
    "learning_rate": 1e-3,  # higher than MuJoCo's 3e-4 for a smaller task (docs/results.md#classic)
    "gamma": 0.95,  # short horizon: the reward is paid every step
    "normalize_input": True,  # angle and velocity on different scales
    "normalize_returns": True,  # rewards of -16..0 per step
    "exploration_loss_coeff": 0.0,  # the Gaussian's own spread explores
    "ppo_clip_ratio": 0.2,  # the PPO paper's
    "max_grad_norm": 0.5,  # CleanRL's PPO
}

# Atari (atari_*, ALE/*, *NoFrameskip-v4): uint8 frames, a conv net, no RNN, clipped rewards; updates per sample chosen
# by reward per minute on 2 cores (benchmarks/notebook.md#atari-preset; docs/results.md#atari).
ATARI: Preset = {
    "num_envs_per_worker": 16,  # enough envs that inference requests batch well
    "worker_num_splits": 2,  # double buffering: one half steps while the other waits for actions
    "rollout": 32,  # CleanRL's and SF2's Atari rollout
    "batch_size": 256,  # 4 minibatches of 256, 2 epochs: the most reward per minute on 2 cores (notebook, atari)
    "num_batches_per_epoch": 4,  # iterations of 1,024 samples
    "num_epochs": 2,  # the second epoch paid for itself with a bf16 learner (notebook, atari)
    "learner_precision": "auto",  # bf16 where it times faster (model/precision.py)
    "inference_precision": "auto",  # bf16 where it times faster (model/precision.py)
    "use_rnn": False,  # the frame stack carries the motion
    "encoder_conv_architecture": "convnet_simple",  # a conv net cheap enough for a CPU learner
    "encoder_mlp_layers": [512],  # the Nature DQN's dense layer
    "nonlinearity": "relu",  # the Nature DQN's
    "learning_rate": 2.5e-4,  # CleanRL's Atari PPO; constant: a decay needs the run's length (notebook, atari)
    "gamma": 0.99,  # CleanRL's Atari PPO
    "ppo_clip_ratio": 0.1,  # CleanRL's Atari PPO
    "ppo_clip_value": 1.0,  # value clipping, on the scale of clipped rewards
    "exploration_loss_coeff": 0.01,  # CleanRL's Atari PPO
    "max_grad_norm": 0.5,  # CleanRL's Atari PPO
    "reward_clip": 1.0,  # the DQN setup's clipped rewards, as the published results use
    "env_sticky_actions": 0.0,  # NoFrameskip-v4's protocol, as the published results (notebook, atari)
    "learner_main_loop_num_cores": 2,  # at most half the cores (env_defaults.fit_to_cores)
}

# MountainCar-v0: the goal must be found by chance before anything is learned
# (benchmarks/notebook.md#sparse_classic_control-preset-mountaincar-v0).
SPARSE_CLASSIC_CONTROL: Preset = {
    **CLASSIC_CONTROL,  # the classic settings, with the changes below
    "worker_num_splits": 2,  # as measured in the learning suites
    "normalize_input": True,  # position and velocity (scales 1e-1 and 1e-3) on one scale
    "exploration_loss_coeff": 0.02,  # keeps exploring until the goal is found
    "with_vtrace": False,  # GAE instead: 3 of 3 seeds solved against 0 of 3 (notebook, sparse_classic_control)
    "gae_lambda": 0.98,  # lower-variance targets for the rare goal reward
}

# VizDoom scenarios whose state is visible in one frame: the atari table's network and updates, rewards scaled
# (benchmarks/notebook.md#doom_frame-preset; docs/results.md#doom). Maze and deathmatch scenarios keep the defaults.
DOOM_FRAME: Preset = {
    **_without(ATARI, "reward_clip", "env_sticky_actions"),  # VizDoom has neither ALE's sticky actions nor clipping
    "reward_scale": 0.01,  # rewards to about [-1, 1] (basic pays +100 for a kill, -1 per tic)
}

# LunarLander: episodes of up to 1,000 steps whose landing bonus comes at the end
# (benchmarks/notebook.md#lunar_lander-preset).
LUNAR_LANDER: Preset = {
    **CLASSIC_CONTROL,  # the classic settings, with a longer horizon below
    "worker_num_splits": 2,  # Box2D steps cost enough for double buffering
    "gamma": 0.999,  # the landing bonus comes at the end of a long episode (SB3 zoo's)
    "with_vtrace": False,  # GAE instead: higher final returns (notebook, lunar_lander)
    "gae_lambda": 0.98,  # SB3 zoo's for this env
    "exploration_loss_coeff": 0.01,  # rescues the seed that learns to hover (notebook, lunar_lander)
}

# The MinAtar paper's network (Young & Tian 2019): one conv layer of 16 3x3 filters, stride 1, then 128 dense units.
MINATAR_NETWORK: Preset = {
    "use_rnn": False,  # the paper's DQN network is feed-forward
    "encoder_conv_architecture": "convnet_minatar",  # the paper's conv layer
    "encoder_mlp_layers": [128],  # the paper's dense layer
    "nonlinearity": "relu",  # the paper's
    "learner_main_loop_num_cores": 1,  # a network this small gains nothing from a second learner thread
}

# MinAtar (MinAtar/<Game>-v1 and -v0): bool [C, 10, 10] grids, cheap steps, so the learner is the bound. The atari
# table's PPO with the paper's network; starting values, not tuned by learning runs
# (docs/results.md#minatar-first-checks).
MINATAR: Preset = {
    # MinAtar has its own sticky actions and small rewards; its network is too small to gain from bf16
    **_without(ATARI, "reward_clip", "env_sticky_actions", "learner_precision", "inference_precision"),
    **MINATAR_NETWORK,  # the paper's network in place of the conv net
    "num_envs_per_worker": 32,  # steps cost microseconds: many envs per worker
}

# --algo=DQN on an env without a family preset.
DQN: Preset = {
    "use_rnn": False,  # DQN replays single transitions: no recurrent core
}

# DQN on the classic-control envs, Ape-X style: many envs with a spread of epsilons, small replayed minibatches
# (benchmarks/notebook.md#classic_control_dqn-preset; docs/results.md#dqn-on-classic-control).
CLASSIC_CONTROL_DQN: Preset = {
    "num_envs_per_worker": 64,  # Ape-X's spread of epsilons over many agents
    "worker_num_splits": 2,  # double buffering
    "rollout": 32,  # transitions per actor round
    "batch_size": 128,  # small replayed minibatches
    "num_batches_per_epoch": 8,  # iterations of 1,024 sampled transitions
    "use_rnn": False,  # DQN replays single transitions
    "encoder_mlp_layers": [256, 256],  # faster per sample than 64x64 here (notebook, classic_control_dqn)
    "nonlinearity": "relu",  # DQN's
    "learning_rate": 1e-3,  # 2e-3 became unstable (notebook, classic_control_dqn)
    "lr_schedule": "linear_decay",  # steadier late returns (notebook, classic_control_dqn)
    "gamma": 0.99,  # episodes of at most 500 steps
    "max_grad_norm": 10.0,  # DQN's larger TD errors need a looser clip than PPO's 0.5
    "adam_eps": 1e-5,  # as the PPO table
    "replay_buffer_capacity": 100_000,  # a few hundred episodes
    "learning_starts": 5_000,  # enough variety before the first SGD step
    "training_intensity": 8.0,  # 8 replayed per sampled transition: better than 4 (notebook, classic_control_dqn)
    "n_step": 3,  # Ape-X's n-step returns
    "target_network_update_freq": 1000,  # sampled transitions between copies (~62 SGD steps)
}

# DQN on Atari, Ape-X / Rainbow style: the atari table's env side, the published setups' learning side in this
# framework's units; starting values, the learning rate measured (benchmarks/notebook.md#atari_dqn-preset;
# docs/results.md#ape-x-dqn-atari_dqn-learns-breakout-on-2-cpu-cores).
ATARI_DQN: Preset = {
    # the atari table's env side, network body, precision and learner threads
    **{
        k: ATARI[k]
        for k in (
            "num_envs_per_worker",
            "worker_num_splits",
            "rollout",
            "num_batches_per_epoch",
            "learner_precision",
            "use_rnn",
            "encoder_mlp_layers",
            "nonlinearity",
            "gamma",
            "reward_clip",
            "env_sticky_actions",
            "learner_main_loop_num_cores",
        )
    },
    "encoder_conv_architecture": "convnet_nature",  # the Nature DQN network that Rainbow and Ape-X use
    # Rainbow's Adam rate (6.25e-5, for minibatches of 32) x 4 for minibatches of 256: Breakout at 2.64M frames
    # 12.4 and 15.0 against 4.7 (notebook, "The atari_dqn learning rate for minibatches of 256")
    "learning_rate": 2.5e-4,
    "lr_schedule": "constant",  # Rainbow's and Ape-X's
    "adam_eps": 1.5e-4,  # Rainbow's 0.01 / 32: keeps early steps small while the moment estimates are noisy
    "batch_size": 256,  # between Rainbow's 32 and Ape-X's 512: amortizes a conv net step's overhead
    "training_intensity": 4.0,  # each sampled transition replayed 4 times on average (Rainbow 8, Ape-X under 1)
    "target_network_update_freq": 16_000,  # at intensity 4, 64k replayed between copies: Rainbow's 2,000 steps of 32
    "n_step": 3,  # Rainbow's and Ape-X's n-step returns
    "replay_buffer_capacity": 500_000,  # 4.0 GB: fits a 16 GB machine beside the workers (Rainbow 1M, Ape-X 2M)
    "learning_starts": 20_000,  # Rainbow's 80k frames
    "max_grad_norm": 40.0,  # Ape-X's (and RLlib's) clipping; the atari table's 0.5 is PPO's
    "dueling": True,  # part of Rainbow and Ape-X (the default too; stated on purpose)
    "double_q": True,  # part of Rainbow and Ape-X (the default too; stated on purpose)
    "eval_epsilon": 0.05,  # the Nature DQN evaluation's; greedy agents stall after a lost life (notebook, atari_dqn)
}

# DQN on MinAtar: the MinAtar paper's DQN in this framework's units and Ape-X's shape; the learner bounds the run on a
# CPU (benchmarks/notebook.md#minatar_dqn-preset; docs/results.md#minatar-first-checks).
MINATAR_DQN: Preset = {
    **MINATAR_NETWORK,  # the paper's network
    "gamma": 0.99,  # the paper's
    "num_envs_per_worker": 16,  # 2 x 16 agents for Ape-X's spread of epsilons
    "worker_num_splits": 2,  # double buffering
    "rollout": 32,  # transitions per actor round
    "batch_size": 32,  # the paper's
    "num_batches_per_epoch": 16,  # iterations of 512 sampled transitions (16 x 32), trained with 128 SGD steps
    "learning_rate": 1e-4,  # Adam in place of the paper's RMSProp at 2.5e-4
    "lr_schedule": "constant",  # the paper's
    "adam_eps": 3.125e-4,  # Rainbow's 0.01 / 32: damps steps as the paper's RMSProp eps of 0.01 does
    # one minibatch of 32 per 4 sampled transitions (the Nature DQN's ratio): per frame level with the paper's one per
    # transition at 1M frames, 3.4x the frames a minute on 2 cores (notebook, MinAtar DQN per frame)
    "training_intensity": 8.0,
    "target_network_update_freq": 1000,  # the paper's 1,000 frames (250 SGD steps at intensity 8)
    "n_step": 1,  # the paper's one-step target: Ape-X's 3 steps collapsed Freeway (notebook, MinAtar DQN per frame)
    "replay_buffer_capacity": 100_000,  # the paper's
    "learning_starts": 5_000,  # the paper's
    "max_grad_norm": 10.0,  # DQN's larger TD errors need a looser clip than PPO's 0.5
    "dueling": True,  # Ape-X's (the paper's DQN has none)
    "double_q": True,  # Ape-X's (the paper's DQN has none)
    "save_replay_buffer": True,  # 100k MinAtar transitions are 0.04-0.1 GB: a resume continues replaying exactly
}

# MuJoCo locomotion (HalfCheetah, Hopper, Walker2d): PPO as in the PPO paper and CleanRL, run synchronously: small
# tasks that learn per sample from many small SGD steps on fresh data, where policy lag costs more than waiting
# (benchmarks/notebook.md#mujoco-preset; docs/results.md#mujoco).
MUJOCO: Preset = {
    "async_rl": False,  # policy lag cost more than the waiting (notebook, mujoco)
    # 2 workers on any machine: the run is learner-bound, and in synchronous mode more workers make iterations
    # bigger rather than faster (with more than 4, num_workers x 8 x 64 would no longer divide the 2,048 samples)
    "num_workers": 2,
    "num_envs_per_worker": 8,  # 2 x 8 envs x rollout 64 = one 2,048-sample iteration
    "worker_num_splits": 2,  # double buffering
    "rollout": 64,  # 2 x 8 envs x 64 = one 2,048-sample iteration (CleanRL's)
    "batch_size": 128,  # 160 SGD steps per iteration: the best return per minute (notebook, mujoco)
    "num_batches_per_epoch": 16,  # iterations of 2,048 samples (CleanRL's)
    "num_epochs": 10,  # the PPO paper's and CleanRL's
    "num_minibatches_to_accumulate": 0,  # no policy lag in synchronous mode
    "use_rnn": False,  # the state is fully observed
    "encoder_mlp_layers": [64, 64],  # the PPO paper's and CleanRL's
    "nonlinearity": "tanh",  # the PPO paper's and CleanRL's
    "learning_rate": 3e-4,  # the PPO paper's and CleanRL's
    "lr_schedule": "linear_decay",  # CleanRL's (constant without --train_for_env_steps)
    "gamma": 0.99,  # the PPO paper's and CleanRL's
    "gae_lambda": 0.95,  # the PPO paper's and CleanRL's
    "with_vtrace": False,  # GAE: synchronous PPO has no off-policy samples to correct
    "normalize_input": True,  # CleanRL's observation normalization
    "normalize_returns": True,  # CleanRL's reward normalization
    "exploration_loss_coeff": 0.0,  # the PPO paper's and CleanRL's
    "ppo_clip_ratio": 0.2,  # the PPO paper's and CleanRL's
    "max_grad_norm": 0.5,  # CleanRL's
}

# Envs without a family preset get one of these by their spaces (env_defaults.space_preset), with gamma from the
# episode length; measured on envs outside the suites (docs/results.md#envs-without-a-preset).
# Vector observations, discrete actions: the lunar_lander table without its LunarLander horizon
# (benchmarks/notebook.md#vector_discrete-preset).
VECTOR_DISCRETE: Preset = {
    **LUNAR_LANDER,  # the LunarLander settings that solved 5 of 5, changed below
    "batch_size": 512,  # 32 SGD steps per iteration: a first success is learned from before it fades out
    "num_batches_per_epoch": 8,  # iterations of 4,096 samples
    "lr_schedule": "linear_decay",  # steadier finals (constant without --train_for_env_steps)
    "exploration_loss_coeff": 0.1,  # decayed below: finds CliffWalking's and Taxi's goals, then settles
    "exploration_loss_schedule": "linear_decay",  # a constant 0.1 keeps FrozenLake stepping into holes
    "gae_lambda": 0.95,  # the PPO paper's, for horizons of unknown length
    "normalize_input": True,  # observation scales are unknown
    "normalize_returns": True,  # reward scales are unknown
    "reward_scale": 1.0,  # the return normalizer scales instead
}
# Vector observations, continuous actions: the mujoco table's PPO (benchmarks/notebook.md#vector_continuous-preset).
VECTOR_CONTINUOUS: Preset = {
    **MUJOCO,  # the PPO paper's and CleanRL's continuous-control PPO
    "exploration_loss_coeff": 0.01,  # keeps the action spread from collapsing after the task is learned (hovering)
}
# Image observations: the atari table's network and updates.
IMAGE: Preset = {
    **_without(ATARI, "reward_clip", "env_sticky_actions"),  # rewards of unknown scale stay unclipped; no ALE
    "normalize_returns": True,  # the unclipped rewards are normalized instead
}

# MountainCarContinuous-v0: per-step Gaussian noise rarely swings the car up to the flag
# (benchmarks/notebook.md#sparse_continuous-preset-mountaincarcontinuous-v0;
# docs/results.md#gsde-on-mountaincarcontinuous).
SPARSE_CONTINUOUS: Preset = {
    **VECTOR_CONTINUOUS,  # its space's defaults, with state-dependent noise below
    "gamma": 0.999,  # better on every count than horizon_gamma's 0.99 over 12 seeds (notebook, sparse_continuous)
    "use_sde": True,  # state-dependent noise: the first episodes reach the flag (algo/sde.py)
    "sde_sample_freq": 1000,  # one noise matrix per episode (at most 999 steps): 4 of 6 seeds against 3 per rollout
}

# name -> table, in the config reference's order
PRESETS: dict[str, Preset] = {
    "classic_control": CLASSIC_CONTROL,
    "continuous_control": CONTINUOUS_CONTROL,
    "atari": ATARI,
    "sparse_classic_control": SPARSE_CLASSIC_CONTROL,
    "doom_frame": DOOM_FRAME,
    "lunar_lander": LUNAR_LANDER,
    "minatar": MINATAR,
    "dqn": DQN,
    "classic_control_dqn": CLASSIC_CONTROL_DQN,
    "atari_dqn": ATARI_DQN,
    "minatar_dqn": MINATAR_DQN,
    "mujoco": MUJOCO,
    "vector_discrete": VECTOR_DISCRETE,
    "vector_continuous": VECTOR_CONTINUOUS,
    "image": IMAGE,
    "sparse_continuous": SPARSE_CONTINUOUS,
}
# the presets that env_defaults.space_preset chooses by an env's spaces
SPACE_PRESETS: dict[str, Preset] = {name: PRESETS[name] for name in ("vector_discrete", "vector_continuous", "image")}

# What a preset changes where training runs on a GPU (--device=gpu, auto with CUDA visible, or --tuned_for=gpu): there
# the learner is no longer the bound, and the setup that needs the fewest frames wins
# (docs/results.md#fewest-frames-to-pong-18).
GPU_PRESETS: dict[str, Preset] = {
    # rl_games' Pong recipe, run synchronously with a learning rate that keeps the KL near 0.01, in minibatches of 512
    # and with the 2-core table's PPO clip of 0.1 (with rl_games' 0.2 BeamRider ended at 0.73x and Pong's slowest seed
    # took 1.38x the frames): Pong +18 after a median of 3.51M frames over 5 seeds, against 10.35M for Sample
    # Factory 2's fast setup, and more reward than it on Breakout, BeamRider and SpaceInvaders at 4M frames (every seed)
    "atari": {
        "num_envs": 64,  # rl_games': 16 workers x 4 envs x rollout 128 = one iteration of 8,192 samples
        "rollout": 128,  # rl_games' horizon
        "async_rl": False,  # every sample from the weights being trained: kl_adaptive needs it (docs/algorithms.md)
        "batch_size": 512,  # a quarter of rl_games' 2,048: 64 SGD steps an iteration learn more per frame (results.md)
        "num_batches_per_epoch": 16,  # iterations of 8,192 samples (rl_games' 64 envs x 128)
        "num_epochs": 4,  # rl_games'
        "encoder_conv_architecture": "convnet_nature",  # rl_games' and the Nature DQN's: cheap on a GPU
        "nonlinearity": "elu",  # rl_games'
        "learning_rate": 3e-4,  # rl_games' start; the schedule moves it
        "lr_schedule": "kl_adaptive",  # rl_games' adaptive rate: a constant 3e-4 stalled at -15.6 (results.md)
        "kl_threshold": 0.01,  # rl_games' target KL
        "lr_max": 1e-3,  # under rl_games' 1e-2 the rate swung to 6.7e-3 and the KL spiked (notebook, candidate B)
        "with_vtrace": False,  # GAE: a synchronous run has no off-policy samples to correct
        "gae_lambda": 0.95,  # rl_games'
        "ppo_clip_value": 0.0,  # rl_games' unclipped value loss
        "value_loss_coeff": 2.0,  # rl_games' critic_coef
        "normalize_returns": True,  # rl_games' normalize_value
        "max_grad_norm": 1.0,  # rl_games'
    },
}
