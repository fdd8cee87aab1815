"""The options of replay-based learning (--exp_replayer, IMPALA's --replay_proportion) and --algo=DQN (Ape-X), a
section of the option table in options.py."""

from __future__ import annotations

from sample_factory.config.option_types import Option, _num, int_list, str2bool, str_list  # noqa: F401

REPLAY_OPTIONS: list[Option] = [
    Option(
        "exp_replayer",
        str,
        None,
        "How training batches reuse experience (ALF's exp_replayer): one_time (every sample trained on once, "
        "as it arrives), uniform or prioritized (a replay buffer; proportional prioritization). Default: "
        "one_time for APPO (uniform with --replay_proportion), prioritized for DQN.",
        choices=("one_time", "uniform", "prioritized"),
    ),
    Option(
        "replay_proportion",
        float,
        0.0,
        "APPO (IMPALA replay, RLlib's option): replayed / fresh trajectories in every training batch, drawn "
        "uniformly from the last --replay_buffer_num_slots trajectories; needs V-trace. 0: no replay.",
    ),
    Option("replay_buffer_num_slots", int, 0, "APPO replay: trajectories kept for --replay_proportion."),
    Option(
        "replay_buffer_capacity",
        int,
        100_000,
        "Replay buffer size in transitions (per policy, preallocated in the learner; docs/algorithms.md gives "
        "the memory per transition).",
    ),
    Option(
        "replay_buffer_device",
        str,
        "auto",
        "DQN: where the replay buffer's observations live. auto: on the learner's GPU when they take at most "
        "half of its free memory (minibatches are then gathered where they are trained on instead of crossing "
        "to the GPU at every SGD step), else in host memory; cpu: host memory; learner: the learner's device "
        "whatever their size. A learner group (--learners_per_policy > 1) keeps them in host memory.",
        choices=("auto", "cpu", "learner"),
    ),
    Option(
        "learning_starts",
        int,
        1000,
        "DQN: transitions in the replay buffer before the first SGD step (again after a resume without "
        "--save_replay_buffer).",
    ),
    Option(
        "training_intensity",
        float,
        8.0,
        "DQN: replayed / sampled transitions (SGD steps per iteration = intensity * new samples / batch_size). "
        "The learner trains that much before it takes the next rollouts, so actors wait instead of the "
        "learner falling behind.",
    ),
    Option("n_step", int, 3, "DQN: n-step returns (windows end at rollout ends, bootstrapping from there)."),
    Option(
        "target_network_update_freq",
        int,
        500,
        "DQN: copy the online network into the target network every this many sampled transitions.",
    ),
    Option("double_q", str2bool, True, "DQN: double-Q targets (the online network picks the bootstrap action)."),
    Option("dueling", str2bool, True, "DQN: dueling heads, Q = V + A - mean(A) (value and policy heads)."),
    Option("huber_delta", float, 1.0, "DQN: Huber loss threshold on the TD error."),
    Option("prioritized_replay_alpha", float, 0.6, "Prioritized replay: priority = (|TD error| + eps)^alpha."),
    Option(
        "prioritized_replay_beta",
        float,
        0.4,
        "Prioritized replay: importance-weight exponent at the start, annealed linearly to 1 over "
        "--train_for_env_steps.",
    ),
    Option("prioritized_replay_eps", float, 1e-6, "Prioritized replay: added to |TD error| before alpha."),
    Option(
        "apex_epsilon",
        float,
        0.4,
        "DQN exploration (Ape-X): agent i of N acts randomly with probability eps^(1 + alpha * i / (N - 1)).",
    ),
    Option("apex_epsilon_alpha", float, 7.0, "DQN exploration (Ape-X): alpha of the per-agent epsilons."),
    Option(
        "eval_epsilon",
        float,
        0.0,
        "DQN evaluations (enjoy.py, the periodic evaluations, Policy.act without deterministic=True): the "
        "probability of a uniformly random action instead of the greedy one; 0: greedy. The atari_dqn preset uses "
        "0.05, the Nature DQN evaluation's: a greedy agent that does not press FIRE after a lost life (training "
        "pressed it for the agent) waits until ALE ends the game at 108,000 frames.",
    ),
    Option(
        "save_replay_buffer",
        str2bool,
        False,
        "Checkpoints include the replay buffer (DQN's, or APPO's --replay_proportion trajectories; large: see "
        "docs/algorithms.md) and its sampling RNG, so a resume continues replaying instead of refilling it.",
    ),
]
