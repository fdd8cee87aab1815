"""The options of replay-based learning (--exp_replayer, IMPALA's --replay_proportion) and --algo=DQN (Ape-X)."""

from __future__ import annotations

from sample_factory.config.option_types import OptionGroup, opt


class ReplayOptions(OptionGroup, title="Replay and DQN"):
    """Replay-based learning: IMPALA's replay for APPO and Ape-X DQN."""

    exp_replayer: str | None = opt(
        None,
        "How training batches reuse experience (ALF's exp_replayer): one_time (every sample trained on once, "
        "as it arrives), uniform or prioritized (a replay buffer; proportional prioritization). Default: "
        "one_time for APPO (uniform with --replay_proportion), prioritized for DQN.",
        choices=("one_time", "uniform", "prioritized"),
    )

    replay_proportion: float = opt(
        0.0,
        "APPO (IMPALA replay, RLlib's option): replayed / fresh trajectories in every training batch, drawn "
        "uniformly from the last --replay_buffer_num_slots trajectories; needs V-trace. 0: no replay.",
    )

    replay_buffer_num_slots: int = opt(0, "APPO replay: trajectories kept for --replay_proportion.")

    replay_buffer_capacity: int = opt(
        100_000,
        "Replay buffer size in transitions (per policy, preallocated in the learner; docs/algorithms.md gives "
        "the memory per transition).",
    )

    replay_buffer_device: str = opt(
        "auto",
        "DQN: where the replay buffer's observations live. auto: on the learner's GPU when they take at most "
        "half of its free memory (minibatches are then gathered where they are trained on instead of crossing "
        "to the GPU at every SGD step), else in host memory; cpu: host memory; learner: the learner's device "
        "whatever their size. A learner group (--learners_per_policy > 1) keeps them in host memory.",
        choices=("auto", "cpu", "learner"),
    )

    learning_starts: int = opt(
        1000,
        "DQN: transitions in the replay buffer before the first SGD step (again after a resume without "
        "--save_replay_buffer).",
    )

    training_intensity: float = opt(
        8.0,
        "DQN: replayed / sampled transitions (SGD steps per iteration = intensity * new samples / batch_size). "
        "The learner trains that much before it takes the next rollouts, so actors wait instead of the "
        "learner falling behind.",
    )

    n_step: int = opt(3, "DQN: n-step returns (windows end at rollout ends, bootstrapping from there).")

    target_network_update_freq: int = opt(
        500, "DQN: copy the online network into the target network every this many sampled transitions."
    )

    double_q: bool = opt(True, "DQN: double-Q targets (the online network picks the bootstrap action).")

    dueling: bool = opt(True, "DQN: dueling heads, Q = V + A - mean(A) (value and policy heads).")

    huber_delta: float = opt(1.0, "DQN: Huber loss threshold on the TD error.")

    prioritized_replay_alpha: float = opt(0.6, "Prioritized replay: priority = (|TD error| + eps)^alpha.")

    prioritized_replay_beta: float = opt(
        0.4,
        "Prioritized replay: importance-weight exponent at the start, annealed linearly to 1 over "
        "--train_for_env_steps.",
    )

    prioritized_replay_eps: float = opt(1e-6, "Prioritized replay: added to |TD error| before alpha.")

    apex_epsilon: float = opt(
        0.4, "DQN exploration (Ape-X): agent i of N acts randomly with probability eps^(1 + alpha * i / (N - 1))."
    )

    apex_epsilon_alpha: float = opt(7.0, "DQN exploration (Ape-X): alpha of the per-agent epsilons.")

    eval_epsilon: float = opt(
        0.0,
        "DQN evaluations (enjoy.py, the periodic evaluations, Policy.act without deterministic=True): the "
        "probability of a uniformly random action instead of the greedy one; 0: greedy. The atari_dqn preset uses "
        "0.05, the Nature DQN evaluation's: a greedy agent that does not press FIRE after a lost life (training "
        "pressed it for the agent) waits until ALE ends the game at 108,000 frames.",
    )

    save_replay_buffer: bool = opt(
        False,
        "Checkpoints include the replay buffer (DQN's, or APPO's --replay_proportion trajectories; large: see "
        "docs/algorithms.md) and its sampling RNG, so a resume continues replaying instead of refilling it.",
    )
