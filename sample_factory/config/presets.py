"""Per env-family presets: applied to every flag the user did not type, and recorded in cfg.json.
Each preset says in a comment why its values were chosen."""

from __future__ import annotations

import os
import re
from typing import Any

from sample_factory.config.presets_dqn import DQN_VARIANT, dqn_presets

# Per env-family presets: used unless the flag is given on the command line; recorded in cfg.json.
# The classic-control preset is tuned for high FPS on small CPU machines: many cheap envs per worker so
# each inference request carries a large batch, and several epochs because samples are cheap.
CLASSIC_CONTROL_ENVS = ("CartPole-v0", "CartPole-v1", "Acrobot-v1")
LUNAR_LANDER_ENVS = ("LunarLander-v3",)
SPARSE_CLASSIC_CONTROL_ENVS = ("MountainCar-v0",)
# Pendulum only: the preset was tuned there (LunarLanderContinuous-v3, never measured with it, gets the defaults of
# its space below, which were measured on it: docs/results.md, "Envs without a preset").
CONTINUOUS_CONTROL_ENVS = ("Pendulum-v1",)
SPARSE_CONTINUOUS_ENVS = ("MountainCarContinuous-v0",)
PRESETS: dict[str, dict[str, Any]] = {
    "classic_control": {
        "num_envs_per_worker": 64,
        # One split: each request carries all 64 envs of a worker. On 2 cores (CartPole, gymnasium_vector backend,
        # 2026-11-25) 2 splits ran at 75k FPS and 1 split at 95k, 475 reached after 4.1 s vs 3.6 s (medians of 3).
        "worker_num_splits": 1,
        "rollout": 32,
        "batch_size": 2048,
        "num_batches_per_epoch": 2,
        "num_epochs": 4,
        "num_minibatches_to_accumulate": 0,  # less policy lag: CartPole is solved in fewer samples
        "use_rnn": False,
        "encoder_mlp_layers": [64, 64],
        "nonlinearity": "tanh",
        "learning_rate": 3e-3,
        "lr_schedule": "constant",
        "gamma": 0.99,
        "ppo_clip_ratio": 0.2,
        "ppo_clip_value": 0.0,
        "exploration_loss_coeff": 0.0,
        "max_grad_norm": 0.5,
        "value_loss_coeff": 0.5,
        "reward_scale": 0.1,
        "adam_eps": 1e-5,
    },
    # Small continuous-action tasks: Gaussian actions, both normalizers, short horizon.
    "continuous_control": {
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 64,
        "batch_size": 2048,
        "num_batches_per_epoch": 4,
        "num_epochs": 8,
        "num_minibatches_to_accumulate": 0,
        "use_rnn": False,
        "encoder_mlp_layers": [64, 64],
        "nonlinearity": "tanh",
        "learning_rate": 1e-3,
        "gamma": 0.95,
        "normalize_input": True,
        "normalize_returns": True,
        "exploration_loss_coeff": 0.0,
        "ppo_clip_ratio": 0.2,
        "max_grad_norm": 0.5,
    },
    # Atari (atari_* and ALE/* names): uint8 frames, a conv net, no RNN; clipped rewards as in the DQN setup.
    # Updates per sample chosen by reward per minute on a 2-core CPU (python train.py --env=atari_pong
    # --num_workers=2, 30 minutes, one run each, 2026-11-22/23; mean reward at 25 / 30 min):
    #   1 SGD step of 1,024 per 1,024 samples (the earlier preset): -20.2 at 25 min, still flat;
    #   4 minibatches of 256, 1 epoch, fp32: -19.5 / -18.5 (1.84M env steps);
    #   4 minibatches of 256, 2 epochs, bf16 learner (this preset): -17.0 / -14.4 (1.78M env steps, 990 FPS);
    #   the same without sticky actions and with 1 learner thread (this preset on 2 cores), 2026-11-24, a slower day:
    #   -18.1 / -15.4 (1.61M env steps, 895 FPS); per env step alike (-15.4 / -15.6 at 1.61M env steps);
    #   the same with bf16 inference, actor workers at niceness 10 and grayscale ALE screens, 2026-11-24:
    #   -15.5 / -8.3 (1.97M env steps, 1,099 FPS; -10 after 29.4 min).
    # (The env steps above are agent steps; train.py counts env frames on Atari, 4 per agent step.)
    # To +18 on 2 cores: 83 minutes (4.86M agent steps = 19.4M env frames, one seed, 2026-11-24) with
    # `--num_workers=1 --lr_schedule=linear_decay --train_for_env_steps=40000000 --stop_at_reward=18` (CleanRL's
    # schedule over its 10M agent steps = 40M frames; docs/results.md). The learning rate stays constant here because
    # a linear decay needs the run's length, which a preset cannot know.
    # bf16 (learner_precision auto: where it times faster, model/precision.py) made the conv net's training step 2.2x
    # faster on an AMD EPYC (tools/benchmark_learner.py), which paid for the second epoch there; on an Intel Xeon
    # whose bf16 is slower, auto keeps fp32 (Pong 1.36x the frames/s of bf16 there, 2026-11-24). On a GPU machine,
    # minibatches of 1,024 keep the learner at the sampler's speed (docs/results.md, "Atari Pong on one H100").
    "atari": {
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 256,
        "num_batches_per_epoch": 4,
        "num_epochs": 2,
        "learner_precision": "auto",
        "inference_precision": "auto",  # bf16 where it times faster (model/precision.py; benchmarks/notebook.md)
        "use_rnn": False,
        "encoder_conv_architecture": "convnet_simple",
        "encoder_mlp_layers": [512],
        "nonlinearity": "relu",
        "learning_rate": 2.5e-4,
        "gamma": 0.99,
        "ppo_clip_ratio": 0.1,
        "ppo_clip_value": 1.0,
        "exploration_loss_coeff": 0.01,
        "max_grad_norm": 0.5,
        "reward_clip": 1.0,
        # No sticky actions, as in the NoFrameskip-v4 setup of the published results that docs/results.md compares
        # with (CleanRL, Sample Factory, SB3's zoo, Rainbow, Ape-X); ALE's v5 protocol: --env_sticky_actions=0.25.
        "env_sticky_actions": 0.0,
        "learner_main_loop_num_cores": 2,  # at most half the cores: preset_values()
    },
}


# MountainCar's reward is -1 per step until the goal, so nothing is learned before an episode reaches it by chance.
# Measured 2026-11-23, 2 workers, 2M-3M env steps per run: classic_control alone: -200 throughout (1 run);
# + --normalize_input (position and velocity, scales 1e-1 and 1e-3, on one scale): 1 of 3 runs reached -110;
# + an entropy bonus that keeps exploring until the goal is found: 0.01: 1 of 2 runs; 0.03: 2 of 2 found the goal
# but the bonus kept the return at -111..-129; 0.02: 3 of 3 reached -110 in a first probe (first at 1.8M, 1.8M,
# 2.8M env steps; -104..-107 at 3M, about 50 s per run) and 1 of 3 in the learning suite that followed
# (benchmarks/results/classic.md; multi-process runs are not deterministic): 4 of 6, not reliable.
# 2026-11-24, 3 seeds each, 3M env steps: + gamma 0.999 and a bonus of 0.03: 0 of 3; + GAE with lambda 0.98 instead
# of V-trace (this preset): 3 of 3 (-110 first after 1.15M / 1.31M / 1.43M env steps, final -102..-104); the
# learning suite then 5 of 5. Our reading (not isolated by a test): GAE's lambda < 1 gives lower-variance targets
# for the rare goal reward than V-trace's returns, which are lambda = 1 on-policy (c-bar 1).
PRESETS["sparse_classic_control"] = {
    **PRESETS["classic_control"],
    "worker_num_splits": 2,  # as measured in the learning suites (classic_control has one split since 2026-11-25)
    "normalize_input": True,
    "exploration_loss_coeff": 0.02,
    "with_vtrace": False,
    "gae_lambda": 0.98,
}

# VizDoom scenarios whose state is visible in one frame (no memory needed): a feed-forward conv net trained like the
# Atari preset, rewards scaled to about [-1, 1] (basic pays +100 for a kill, -1 per tic). Measured 2026-11-23 on
# 2 cores, doom_basic, 2 workers: the global defaults (GRU 512, 2 envs per worker, lr 1e-4, one SGD step of 1,024
# per 1,024 samples) stayed at the random policy's return (-169 after 200k env steps, 503 FPS); this preset
# reached a mean return of +45 at 158k env steps (about 750 FPS). Maze and deathmatch scenarios keep the defaults.
DOOM_FRAME_ENVS = (
    "doom_basic",
    "doom_defend_the_center",
    "doom_defend_the_line",
    "doom_health_gathering",
    "doom_take_cover",
)
PRESETS["doom_frame"] = {
    **{k: v for k, v in PRESETS["atari"].items() if k not in ("reward_clip", "env_sticky_actions")},
    "reward_scale": 0.01,
}

# LunarLander: episodes of up to 1,000 steps whose landing bonus comes at the end, so a longer horizon than CartPole's.
# Measured 2026-11-24, 2 workers, 3M env steps, 3 seeds each (short budget of the classic suite):
#   classic_control (V-trace, gamma 0.99, no entropy bonus): 2 of 3 reached 200 (one stuck near -47: it learned to
#     hover), benchmarks/results/classic.md of 2026-11-23;
#   + gamma 0.999 and an entropy bonus of 0.01: 3 of 3 (200 first after 1.23M / 1.69M / 2.10M env steps), final
#     221..254;
#   + GAE with lambda 0.98 instead of V-trace (this preset; SB3 zoo's lambda and gamma for this env): 3 of 3 (0.98M /
#     1.53M / 1.66M), final 266..274;
#   lr 1e-3 with the entropy bonus, gamma 0.99, V-trace: 3 of 3 (1.57M / 1.57M / 1.75M), final 218..249.
# The entropy bonus is what rescues the hovering seed; GAE 0.98 and gamma 0.999 add the higher final returns.
PRESETS["lunar_lander"] = {
    **PRESETS["classic_control"],
    "worker_num_splits": 2,  # as measured in the learning suites; Box2D steps cost enough for double buffering
    "gamma": 0.999,
    "with_vtrace": False,
    "gae_lambda": 0.98,
    "exploration_loss_coeff": 0.01,
}

# MinAtar (MinAtar/<Game>-v1 and -v0; envs/minatar.py): bool [C, 10, 10] grids, games of thousands of cheap steps.
# The network is the MinAtar paper's (Young & Tian 2019): one conv layer of 16 3x3 filters, stride 1, then a dense
# layer of 128 units. The env steps cost microseconds, so a worker runs many envs and the learner is the bound.
# APPO: the atari preset's PPO (clip 0.1, entropy 0.01, 4 minibatches of 256, 2 epochs) with that network; rewards
# are small counts (a point per brick, fish or alien) and stay unclipped. Starting values, not tuned by learning runs.
_MINATAR_NETWORK = {
    "use_rnn": False,
    "encoder_conv_architecture": "convnet_minatar",
    "encoder_mlp_layers": [128],
    "nonlinearity": "relu",
    "learner_main_loop_num_cores": 1,  # a network this small gains nothing from a second learner thread
}
PRESETS["minatar"] = {
    # neither the atari preset's reward clipping nor its ALE sticky actions (MinAtar has its own), nor its bf16: the
    # network is too small to gain from it
    **{
        k: v
        for k, v in PRESETS["atari"].items()
        if k not in ("reward_clip", "env_sticky_actions", "learner_precision", "inference_precision")
    },
    **_MINATAR_NETWORK,
    "num_envs_per_worker": 32,
}

# The --algo=DQN variants of the family presets (config/presets_dqn.py).
PRESETS.update(dqn_presets(PRESETS["atari"], _MINATAR_NETWORK))

# MuJoCo locomotion (gymnasium's MuJoCo ids and our mujoco_* names): PPO as in the PPO paper and CleanRL (64x64
# tanh MLP, lr 3e-4 decayed linearly, GAE 0.95, both normalizers, no entropy bonus), run synchronously: these small
# tasks learn per sample from many small SGD steps on fresh data, so policy lag costs more than the waiting does.
# Chosen by the return after 300k env steps of HalfCheetah-v5 and the wall time to get there, 2 workers x 8 envs,
# rollout 64, 10 epochs of 2,048-sample iterations, seed 0, one run each, 2-core CPU (2026-11-23):
#   async, minibatches of 256 (80 SGD steps per 2,048 samples): 185 in 74 s (policy lag ~120 SGD steps);
#   async, minibatches of 128 (160 steps): 490 in 91 s; async, minibatches of 64 (CleanRL's 320 steps): 497 in 136 s;
#   synchronous, minibatches of 64: 964 in 153 s; synchronous, minibatches of 128 (this preset): 1,046 in 103 s.
# At 1M env steps, 2 seeds (benchmarks/results/mujoco.md): HalfCheetah 1,513, Hopper 2,189, Walker2d 1,974
# (CleanRL's PPO: 1,443 / 2,383 / 2,288), 5.5-7.1 min per run on the 2 cores.
# Short names for gymnasium's MuJoCo v5 envs (the [mujoco] extra; envs/env_utils.py makes them).
MUJOCO_NAMES = {
    f"mujoco_{short}": f"{full}-v5"
    for short, full in {
        "halfcheetah": "HalfCheetah",
        "ant": "Ant",
        "hopper": "Hopper",
        "walker": "Walker2d",
        "humanoid": "Humanoid",
        "humanoidstandup": "HumanoidStandup",
        "swimmer": "Swimmer",
        "reacher": "Reacher",
        "pusher": "Pusher",
        "invertedpendulum": "InvertedPendulum",
        "inverteddoublependulum": "InvertedDoublePendulum",
    }.items()
}

# The locomotion envs measured with it (benchmarks/results/mujoco.md); the other MuJoCo ids (Ant, Humanoid, Swimmer,
# Reacher, InvertedPendulum, ...) get the defaults of their spaces (SPACE_PRESETS["vector_continuous"]: the same
# PPO), which were measured on a sample of envs without a preset.
MUJOCO_ENV_PATTERN = re.compile(r"^(mujoco_(halfcheetah|hopper|walker)|(HalfCheetah|Hopper|Walker2d)-v\d+)$")
PRESETS["mujoco"] = {
    "async_rl": False,
    # 2 workers on any machine: the run is learner-bound (SGD steps of 128 samples), and in synchronous mode every
    # worker's round goes into one iteration, so more workers would make iterations bigger rather than faster (and
    # with more than 4, num_workers x 8 envs x rollout 64 would no longer divide the 2,048-sample iteration).
    "num_workers": 2,
    "num_envs_per_worker": 8,
    "worker_num_splits": 2,
    "rollout": 64,
    "batch_size": 128,
    "num_batches_per_epoch": 16,
    "num_epochs": 10,
    "num_minibatches_to_accumulate": 0,
    "use_rnn": False,
    "encoder_mlp_layers": [64, 64],
    "nonlinearity": "tanh",
    "learning_rate": 3e-4,
    "lr_schedule": "linear_decay",
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "with_vtrace": False,
    "normalize_input": True,
    "normalize_returns": True,
    "exploration_loss_coeff": 0.0,
    "ppo_clip_ratio": 0.2,
    "max_grad_norm": 0.5,
}


# Envs that no family preset names (gymnasium ids outside the suites: a user's first env is often one never tuned
# here) get defaults chosen from their spaces: vector or image observations, discrete or continuous actions, and the
# episode length for gamma (space_preset). Both return normalizers make them independent of the reward's scale.
# Measured on envs outside the suites: docs/results.md, "Envs without a preset".
SPACE_PRESETS: dict[str, dict[str, Any]] = {
    # The lunar_lander preset (solved 5 of 5 there, CartPole's settings plus an entropy bonus and GAE) without its
    # LunarLander-specific horizon: GAE 0.95 and gamma from the episode length, and a larger entropy bonus. Probes,
    # 2 workers, one run each (2026-11-26): with lunar_lander's bonus of 0.01 Taxi-v4 stayed at -200 for 1.5M env
    # steps (wrong pickups and drop-offs cost -10, so they stopped being tried before a delivery was found); with
    # 0.05 it reached 7.6 at 0.4M. FrozenLake-v1 reached 0.7 with either. In the suite (2026-11-27) 0.05 reaches 8 on 3
    # of 6 Taxi seeds; on two, pickup and drop-off end at probability 0 in every state. --exploration_loss=symmetric_kl
    # (same coefficient; it keeps every action's probability above 0) made all 6 deliver but capped them at 6.2-6.6
    # and FrozenLake at 0.2 (the floor keeps stepping into holes), so it is not the default.
    # Minibatches of 512 instead of 2,048 (2026-11-27, 1M env steps, 2 cores, 6 seeds): 32 SGD steps per 4,096 samples
    # instead of 8, so a first delivery is learned from before pickup and drop-off have faded out. With a constant lr:
    # Taxi-v4 reached 8 on 6 of 6 (the 2,048 minibatches: 1 of 3 in the same probe), CliffWalking-v1 -17 on 4 of 6
    # (0 of 2); with the lr decayed linearly over --train_for_env_steps (this preset; constant without a budget):
    # Taxi 5 of 6, CliffWalking 4 of 6, FrozenLake 6 of 6, and steadier finals (Taxi 7.4..8.0 against 6.5..7.8, where
    # one constant-lr seed fell from 7.5 to -42 in its last 10k env steps; FrozenLake 0.7 against 0.6). lr 1e-2
    # instead: Taxi 2 of 3; minibatches of 256: slower (learner-bound) and below 8 at the end; lr 3e-4: 0 of 5.
    # An entropy bonus of 0.1 decayed linearly over the budget instead of a constant 0.05 (2026-11-28, quiet 2 cores,
    # 1M env steps): CliffWalking-v1 reached -17 on 17 of 20 seeds (13 of 20 with 0.05; a failed seed learns to
    # keep off the cliff within 90k env steps and never finds the goal), Taxi-v4 10 of 10 (10 of 10), FrozenLake-v1
    # 10 of 10 (10 of 10). A constant 0.1: CliffWalking 9 of 10, but FrozenLake 0 of 10 (finals 0.5: the wider policy
    # keeps stepping into holes).
    "vector_discrete": {
        **PRESETS["lunar_lander"],
        "batch_size": 512,
        "num_batches_per_epoch": 8,
        "lr_schedule": "linear_decay",
        "exploration_loss_coeff": 0.1,
        "exploration_loss_schedule": "linear_decay",
        "gae_lambda": 0.95,
        "normalize_input": True,
        "normalize_returns": True,
        "reward_scale": 1.0,
    },
    # The mujoco preset (PPO as in the PPO paper and CleanRL's continuous-action script, which both apply unchanged
    # to every continuous-control task they report) with an entropy bonus of 0.01. Without it (2026-11-27/28, 2 cores)
    # the action spread kept shrinking after the task was learned: LunarLanderContinuous-v3 seed 0 reached 200 at 670k
    # env steps and fell to 77 at 2M (std ~0.08, episodes 320 -> 570 steps: hovering), seed 1 ended at 194; with it
    # both reached 200 by 710k and ended at 249 and 216. InvertedDoublePendulum-v5 reached 9,100 on 3 of 4 seeds (1 of
    # 4 without), InvertedPendulum-v5 2 of 2 (as without); MountainCarContinuous-v0 in the results (docs/results.md,
    # "Envs without a preset").
    "vector_continuous": {**PRESETS["mujoco"], "exploration_loss_coeff": 0.01},
    # Frames: the atari preset's network and updates, rewards left unclipped (their scale is unknown) and normalized.
    "image": {
        **{k: v for k, v in PRESETS["atari"].items() if k not in ("reward_clip", "env_sticky_actions")},
        "normalize_returns": True,
    },
}
PRESETS.update(SPACE_PRESETS)

# MountainCarContinuous-v0 pays +100 at the flag and -0.1 a^2 per step: per-step Gaussian noise rarely swings the car
# up there, and the policy learns to stand still. Its space's defaults reached 90 on 1 of 6 seeds (2026-11-28, 1M env
# steps, 2 cores). With gSDE (algo/sde.py) the noise is a function of the state, each agent's matrix held here for
# 1,000 of its steps (an episode lasts at most 999; the count runs across episodes): the first episodes reach the
# flag, and 4 of 6 seeds ended at 90 or above (one more at 88.8; 3 of 6 with the matrix held for --rollout steps).
# Not in vector_continuous: InvertedPendulum-v5 with the same flags reached 950 on 0 of 2 seeds in 300k env steps
# (2 of 2 without). docs/results.md, "gSDE on MountainCarContinuous". Gamma 0.999 rather than the 0.99 that
# horizon_gamma gives a 999-step episode: over 12 seeds each (2026-11-28), 9 ended at 90 or above against 8, 11 at 88
# or above against 9, 1 lost the flag against 3, and the solved ones held 88 from a median 130k env steps against
# 373k (0.9999: 9, 11, 1 and 450k). Within seed noise at 12 seeds, but better on every count.
PRESETS["sparse_continuous"] = {
    **SPACE_PRESETS["vector_continuous"],
    "gamma": 0.999,
    "use_sde": True,
    "sde_sample_freq": 1000,
}


# frames with a shorter side below this (e.g. MinAtar's 10x10) get the `image` preset with IMPALA's ResNet
SMALL_FRAME = 36


def channels_last_frames(shape: tuple[int, ...]) -> bool:
    """Whether an image space of this shape is [H, W, C] (gymnasium's renders, CarRacing, board planes, most custom
    envs) rather than [C, H, W] (our Atari and VizDoom frames): a square frame decides ([N, N, C] or [C, N, N], as
    chess's [8, 8, 111] planes), otherwise the channels are a last size smaller than both others."""
    if shape[0] == shape[1] != shape[2]:
        return True
    if shape[1] == shape[2] != shape[0]:
        return False
    return shape[2] < shape[0] and shape[2] < shape[1]


def horizon_gamma(max_episode_steps: int | None) -> float:
    """0.99, longer for episodes of over 1,000 steps (1 - 10 / steps, at most 0.999): a return that looks about a
    tenth of an episode ahead."""
    if not max_episode_steps or max_episode_steps <= 1000:
        return 0.99
    return min(0.999, 1.0 - 10.0 / max_episode_steps)


def _is_vector(space: Any) -> bool:
    import gymnasium as gym

    return isinstance(space, gym.spaces.Discrete) or (isinstance(space, gym.spaces.Box) and len(space.shape) == 1)


def _is_image(space: Any) -> bool:
    import gymnasium as gym

    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def space_preset(obs_space: Any, action_space: Any, max_episode_steps: int | None) -> tuple[str, dict[str, Any]] | None:
    """The SPACE_PRESETS entry for an env with these gymnasium spaces, with gamma from its episode length: `image`
    where an image is among the observations (a frame, or a Dict or Tuple of frames and vectors: MiniGrid's image and
    direction), else `vector_*` by the actions. None for spaces none fits (nested Dicts or Tuples, multi-discrete
    actions: the global defaults apply)."""
    import gymnasium as gym

    if isinstance(obs_space, (gym.spaces.Tuple, gym.spaces.Dict)):
        # Blackjack's Tuple of Discretes (made a Dict by the env layer), a Dict of vectors and an action mask
        parts = list(obs_space.values() if isinstance(obs_space, gym.spaces.Dict) else obs_space)
    else:
        parts = [obs_space]
    if not parts or not all(_is_vector(s) or _is_image(s) for s in parts):
        return None
    frames = [s.shape for s in parts if _is_image(s)]
    if frames:
        if not isinstance(action_space, (gym.spaces.Discrete, gym.spaces.Box)):
            return None
        name = "image"
    elif isinstance(action_space, gym.spaces.Discrete):
        name = "vector_discrete"
    elif isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        name = "vector_continuous"
    else:
        return None
    values = {**PRESETS[name], "gamma": horizon_gamma(max_episode_steps)}
    if frames:
        smallest = min(min(shape[:2] if channels_last_frames(shape) else shape[1:]) for shape in frames)
        if smallest < SMALL_FRAME:
            # the atari conv net's 8x8 stride-4 first layer needs 36 pixels; IMPALA's ResNet pads and pools, so it
            # takes any size (MiniGrid's 7x7 view, MinAtar's 10x10 board)
            values["encoder_conv_architecture"] = "resnet_impala"
    return name, values


# What a preset changes on a machine where the run trains on a GPU (--device=gpu, or auto with CUDA visible): there
# the learner is no longer the bottleneck at 2-core settings, and the setup that reaches a score fastest differs.
# atari: Sample Factory 2's documented fast Atari setup (8 envs per worker, 2 splits, rollout 32, 4 epochs x 4
# minibatches of 1,024, normalized returns, Nature CNN). On one H200 with 16 workers (2026-11-26, before the
# learner-loop work of issue 31) it ran 46.8k frames/s against 36.9k for the 2-core preset, and Pong reached a mean
# of +18.5 after 196 s of training (10.1M frames), where the 2-core preset was at -1.7 after 8.4 min on an H100
# (docs/results.md). Measured again with the final code: docs/results.md, "Time to a score on a GPU machine".
GPU_PRESETS: dict[str, dict[str, Any]] = {
    "atari": {
        "num_envs_per_worker": 8,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 1024,
        "num_batches_per_epoch": 4,
        "num_epochs": 4,
        "normalize_returns": True,
        "encoder_conv_architecture": "convnet_nature",
    },
}


def gpu_expected(device: str) -> bool:
    """Whether --device will put training on a CUDA GPU (runtime/device.py decides for real). torch, slow to import,
    is imported only where an NVIDIA driver is present and --device=auto leaves the choice open."""
    if device == "cpu":
        return False
    if device in ("gpu", "cuda") or device.startswith("cuda:"):
        return True
    if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() in ("-1",) or (
        "CUDA_VISIBLE_DEVICES" in os.environ and not os.environ["CUDA_VISIBLE_DEVICES"].strip()
    ):
        return False
    if not (os.path.exists("/dev/nvidia0") or os.path.isdir("/proc/driver/nvidia")):
        return False
    import torch

    # NVML's count, not is_available()'s CUDA runtime query: this runs in the launcher before it forks the fork
    # server, and a fork of a process that queried the CUDA runtime cannot use CUDA (runtime/fork_server.py)
    return torch.cuda.device_count() > 0


# A preset's learner threads are capped at half the usable cores (config/machine.py): the samplers keep the rest.
# On 2 cores, `train.py --env=atari_pong --num_workers=2` collected and trained 1.11x as many frames in
# 75 s with one learner thread as with the preset's two (208,896 and 204,800 vs 188,416 and 183,040 frames, two
# alternating runs each, 2026-11-24), and doom_basic 1.12x (234,688 and 217,088 vs 204,800 and 196,608); the tuner
# found the same for Pong (benchmarks/notebook.md, "Throughput auto-tuner").
def preset_values(name: str, cpu_count: int, gpu: bool = False) -> dict[str, Any]:
    """The preset's values on a machine with `cpu_count` cores, with its GPU_PRESETS changes where `gpu`."""
    return fit_to_cores({**PRESETS[name], **(GPU_PRESETS.get(name, {}) if gpu else {})}, cpu_count)


def fit_to_cores(values: dict[str, Any], cpu_count: int) -> dict[str, Any]:
    """A preset's values with its learner threads capped at half the cores: the samplers need the others, and a
    learner thread left without a core stalls the rest at every barrier. On one core of the 2-core VM (2026-11-28)
    the `image` preset's 2 threads, then uncapped, made the CarRacing smoke run's bf16 learner spend 26 CPU-s where
    1 thread spent 0.65 (oneDNN's bf16 backward-weights kernel)."""
    if "learner_main_loop_num_cores" in values:
        cap = max(1, cpu_count // 2)
        values = {**values, "learner_main_loop_num_cores": min(values["learner_main_loop_num_cores"], cap)}
    return values


# preset -> the envs it applies to, as the config reference lists them
PRESET_ENVS = {
    "classic_control": ", ".join(CLASSIC_CONTROL_ENVS),
    "continuous_control": ", ".join(CONTINUOUS_CONTROL_ENVS),
    "atari": "atari_*, ALE/*, *NoFrameskip-v4",
    "lunar_lander": ", ".join(LUNAR_LANDER_ENVS),
    "sparse_classic_control": ", ".join(SPARSE_CLASSIC_CONTROL_ENVS),
    "sparse_continuous": ", ".join(SPARSE_CONTINUOUS_ENVS),
    "doom_frame": ", ".join(DOOM_FRAME_ENVS),
    "dqn": "--algo=DQN on envs without a family preset",
    "classic_control_dqn": ", ".join(CLASSIC_CONTROL_ENVS + LUNAR_LANDER_ENVS + SPARSE_CLASSIC_CONTROL_ENVS)
    + " with --algo=DQN",
    "atari_dqn": "atari_*, ALE/*, *NoFrameskip-v4 with --algo=DQN",
    "minatar": "MinAtar/*",
    "minatar_dqn": "MinAtar/* with --algo=DQN",
    "mujoco": "HalfCheetah-v*, Hopper-v*, Walker2d-v*, mujoco_halfcheetah, mujoco_hopper, mujoco_walker",
    "vector_discrete": "envs without a family preset: vector or index observations, discrete actions",
    "vector_continuous": "envs without a family preset: vector or index observations, continuous actions",
    "image": "envs without a family preset: image observations",
}


def preset_name_for_env(env: str | None, algo: str = "APPO") -> str | None:
    """The preset of the env's family; with --algo=DQN its DQN variant where there is one, else the family's
    (when it is feed-forward) or the generic "dqn" preset."""
    base = _family_preset(env)
    if algo != "DQN":
        return base
    if base in DQN_VARIANT:
        return DQN_VARIANT[base]
    return base if base is not None and PRESETS[base].get("use_rnn") is False else "dqn"


# CleanRL's and SB3's Atari ids (BreakoutNoFrameskip-v4): the same game as ALE/Breakout-v5 with v4's protocol (no
# sticky actions, which the atari preset sets anyway), made by envs/atari.py like our other Atari names.
ATARI_V4_ID = re.compile(r"^([A-Z][A-Za-z]*)NoFrameskip-v4$")


def is_atari_name(env: str | None) -> bool:
    """atari_<game>, ALE/<Game>-v5 or <Game>NoFrameskip-v4: the names envs/atari.py makes."""
    if not env:
        return False
    return env.startswith(("atari_", "ALE/")) or ATARI_V4_ID.match(env) is not None


def _family_preset(env: str | None) -> str | None:
    if env in CLASSIC_CONTROL_ENVS:
        return "classic_control"
    if env in LUNAR_LANDER_ENVS:
        return "lunar_lander"
    if env in SPARSE_CLASSIC_CONTROL_ENVS:
        return "sparse_classic_control"
    if env in CONTINUOUS_CONTROL_ENVS:
        return "continuous_control"
    if env in SPARSE_CONTINUOUS_ENVS:
        return "sparse_continuous"
    if is_atari_name(env):
        return "atari"
    if env and env.startswith("MinAtar/"):
        return "minatar"
    if env in DOOM_FRAME_ENVS:
        return "doom_frame"
    if env and MUJOCO_ENV_PATTERN.match(env):
        return "mujoco"
    return None
