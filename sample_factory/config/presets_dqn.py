"""The --algo=DQN presets (Ape-X DQN, algo/dqn.py): each family preset's DQN variant, which keeps the family's env side
(envs per worker, rollout, network, reward handling) and replaces PPO's updates with replay, target network and
exploration settings. config/presets.py adds them to PRESETS and picks them for --algo=DQN."""

from __future__ import annotations

from typing import Any

# family preset -> its DQN variant (the PPO presets' horizons, entropy bonuses and minibatches mean nothing to DQN).
# MountainCar-v0 (2026-11-27, seed 0, 2 cores): classic_control_dqn reached -107 after 260k env steps (113 s); its PPO
# preset's values (lr 3e-3, minibatches of 2,048, rewards x 0.1) ended at -198 after 2.9M env steps in 240 s.
DQN_VARIANT = {
    "classic_control": "classic_control_dqn",
    "lunar_lander": "classic_control_dqn",
    "sparse_classic_control": "classic_control_dqn",
    "atari": "atari_dqn",
    "minatar": "minatar_dqn",
}


def dqn_presets(atari: dict[str, Any], minatar_network: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The DQN presets by name, built on the `atari` family preset and the MinAtar network flags whose env side and
    network they share."""
    presets: dict[str, dict[str, Any]] = {}
    # --algo=DQN on an env without a family preset: DQN replays single transitions, so no recurrent core.
    presets["dqn"] = {"use_rnn": False}

    # DQN on the classic-control envs: many envs (Ape-X's spread of epsilons over 128 agents), small replayed
    # minibatches, 8 replayed per sampled transition and a target network refreshed every 1000 sampled transitions (~62
    # SGD steps). Tuned on CartPole-v1, 2 workers, 2 shared cores (load ~6), best mean reward of the least-exploring
    # third, one run each (2026-11-23), 300k env steps: lr 1e-3 / intensity 4 / target 2000: 350; lr 1e-3 / intensity 8
    # / target 1000: 456, rising; the same with a 64x64 MLP: 254 at 215k (slower per sample); lr 2e-3 / target 500: 412,
    # then unstable (395 at the end); + lr decayed linearly: 462. 400k env steps: lr 2e-3 decayed / target 500: 451 at
    # 287k, then fell to 311; lr 1e-3 decayed / target 1000 (this preset): 475 reached at 347k env steps (128 s).
    presets["classic_control_dqn"] = {
        "num_envs_per_worker": 64,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 128,
        "num_batches_per_epoch": 8,
        "use_rnn": False,
        "encoder_mlp_layers": [256, 256],
        "nonlinearity": "relu",
        "learning_rate": 1e-3,
        "lr_schedule": "linear_decay",
        "gamma": 0.99,
        "max_grad_norm": 10.0,
        "adam_eps": 1e-5,
        "replay_buffer_capacity": 100_000,
        "learning_starts": 5_000,
        "training_intensity": 8.0,
        "n_step": 3,
        "target_network_update_freq": 1000,
    }

    # DQN on Atari, Ape-X / Rainbow style. The env side (envs per worker, rollout, clipped rewards, learner cores,
    # precision) is the atari preset's; the rest is chosen from the published setups, scaled to this framework's units
    # (--target_network_update_freq counts sampled transitions, --training_intensity is replayed / sampled). Not tuned
    # by learning runs here (a Pong DQN run takes hours on the 2-core reference machine): starting values, measured as
    # they are on Breakout, 2 cores, 2026-11-27: mean return 0.2 -> 5.6 in 2.64M frames (135 min), still climbing
    # (docs/results.md, "Ape-X DQN (`atari_dqn`) learns Breakout on 2 CPU cores").
    #   encoder convnet_nature + 512: the DQN Nature network that Rainbow and Ape-X use.
    #   learning_rate 6.25e-5, adam_eps 1.5e-4: Rainbow's Adam (Ape-X's lr too); the large eps (0.01 / Rainbow's batch
    #     of 32) keeps early steps small while the second-moment estimates are noisy.
    #   batch_size 256: between Rainbow's 32 and Ape-X's 512; larger minibatches amortize the per-step overhead of a
    #     conv net on a CPU or GPU learner.
    #   training_intensity 4: each sampled transition replayed 4 times on average (Rainbow replays 8: a minibatch of 32
    #     every 4 agent steps; Ape-X well under 1). The actors wait for the learner beyond it (backpressure).
    #   target_network_update_freq 16,000 sampled transitions: at intensity 4 that is 64k replayed transitions between
    #     copies, as in Rainbow (2,000 SGD steps of 32).
    #   n_step 3: Rainbow's and Ape-X's n-step returns.
    #   replay_buffer_capacity 500,000: 4.0 GB with frames stored once (7.98 GB per 1M, measured: docs/algorithms.md),
    #     which fits a 16 GB machine beside the workers; Rainbow keeps 1M, Ape-X 2M: raise it where memory allows.
    #   learning_starts 20,000 transitions: Rainbow's 80k frames, enough variety before the first SGD step.
    #   max_grad_norm 40: Ape-X's (and RLlib's) gradient clipping; the atari preset's 0.5 is PPO's.
    #   dueling and double_q on: both are part of Rainbow and Ape-X (and the DQN defaults; stated here on purpose).
    #   eval_epsilon 0.05: the Nature DQN evaluation's. Greedy, the Breakout agent of docs/results.md (1.37M frames)
    #     played two of three evaluation games to ALE's 108,000-frame limit without pressing FIRE after a lost life.
    #   prioritized replay with alpha 0.6, beta 0.4 -> 1, Ape-X epsilons 0.4 / alpha 7: the DQN defaults are Ape-X's.
    presets["atari_dqn"] = {
        **{
            k: atari[k]
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
        "encoder_conv_architecture": "convnet_nature",
        "learning_rate": 6.25e-5,
        "lr_schedule": "constant",
        "adam_eps": 1.5e-4,
        "batch_size": 256,
        "training_intensity": 4.0,
        "target_network_update_freq": 16_000,
        "n_step": 3,
        "replay_buffer_capacity": 500_000,
        "learning_starts": 20_000,
        "max_grad_norm": 40.0,
        "dueling": True,
        "double_q": True,
        "eval_epsilon": 0.05,
    }

    # DQN on MinAtar: the MinAtar paper's DQN (replay of 100k transitions, first update after 5,000, minibatches of 32,
    # one update per agent step, target network copied every 1,000 agent steps, gamma 0.99, Huber loss, RMSProp at
    # lr 2.5e-4 with eps 0.01), in this framework's units and Ape-X's shape:
    #   training_intensity 32: one minibatch of 32 per sampled transition is 32 replayed per sampled, the paper's ratio;
    #     batch_size 32 as in the paper (the learner is the bound on a CPU at this ratio: the price of the per-frame
    #     sample efficiency that MinAtar's comparisons are about).
    #   target_network_update_freq 1,000 sampled transitions: the paper's 1,000 agent steps (= 1,000 SGD steps here).
    #   Adam at lr 1e-4 with eps 3.125e-4 (Rainbow's 0.01 / 32, for minibatches of 32) in place of the paper's RMSProp,
    #     whose eps of 0.01 on the root of the squared-gradient average damps its steps as Adam's larger eps does here.
    #   exploration: Ape-X's per-agent epsilons over 2 x 16 agents (the DQN defaults) instead of the paper's single
    #     epsilon annealed 1 -> 0.1 over 100k frames; the reported return is the least-exploring third's.
    #   n_step 3, double_q, dueling, prioritized replay: Ape-X's (the paper's DQN has none of them).
    # The price on a 2-core CPU (docs/results.md, MinAtar row): the learner bounds the run at about 150-180 SGD steps of
    # 32 a second, i.e. as many frames a second (5.5 ms a step in `benchmark_learner --loop --algo=DQN
    # --env=MinAtar/Breakout-v1`; minibatches of 128 take 12 ms, of 256 24 ms: a bigger minibatch buys at most 2x the
    # replayed samples a second). `--training_intensity=8 --batch_size=128 --num_batches_per_epoch=4` collects 6x the
    # frames a second and learns less per frame (Breakout: 1.2 at 28k frames against 2.9 at 33k in one seed each).
    presets["minatar_dqn"] = {
        **minatar_network,
        "gamma": 0.99,
        "num_envs_per_worker": 16,
        "worker_num_splits": 2,
        "rollout": 32,
        "batch_size": 32,
        "num_batches_per_epoch": 16,  # iterations of 512 sampled transitions (16 x 32), trained with 512 SGD steps
        "learning_rate": 1e-4,
        "lr_schedule": "constant",
        "adam_eps": 3.125e-4,
        "training_intensity": 32.0,
        "target_network_update_freq": 1000,
        "n_step": 3,
        "replay_buffer_capacity": 100_000,
        "learning_starts": 5_000,
        "max_grad_norm": 10.0,
        "dueling": True,
        "double_q": True,
    }
    return presets
