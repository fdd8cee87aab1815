"""The learner options: the training step (batches, V-trace or GAE returns, the PPO losses, the optimizer and its
schedule, reward scaling) and how fast it runs (threads, precision, compilation)."""

from __future__ import annotations

from sample_factory.config.option_types import OptionGroup, opt


class LearnerOptions(OptionGroup, title="Learner"):
    """The training step: batches, returns (V-trace, GAE), PPO's losses, the optimizer and its schedule, rewards."""

    algo: str = opt(
        "APPO",
        "Training algorithm (docs/algorithms.md): APPO (on-policy, asynchronous PPO with V-trace) or DQN "
        "(Ape-X: epsilon-greedy actors, replay, n-step double-Q; discrete actions, feed-forward models).",
        choices=("APPO", "DQN"),
    )

    batch_size: int = opt(
        1024,
        "Minibatch size in samples (a multiple of --rollout). DQN: the replayed minibatch of one SGD step "
        "(RLlib's train_batch_size).",
    )

    num_batches_per_epoch: int = opt(
        1,
        "Minibatches per training iteration; an iteration consumes batch_size * num_batches_per_epoch samples.",
        aliases=("num_batches_per_iteration", "num_minibatches"),
    )

    num_epochs: int = opt(1, "Passes over the data of one iteration.", aliases=("ppo_epochs", "update_epochs"))

    num_minibatches_to_accumulate: int = opt(
        -1,
        "Extra minibatches of experience collected ahead while the learner trains; collection pauses beyond "
        "it (-1: one iteration's worth in async mode, 0 in sync mode).",
    )

    max_policy_lag: int = opt(
        1000,
        "Samples older than this many policy versions are dropped (masked out of every loss term). 1000 is "
        "Sample Factory 2's default: effectively off, since the bounded trajectory buffers keep the lag to tens "
        "of versions; set it low to enforce a limit.",
    )

    gamma: float = opt(0.99, "Discount factor.")

    with_vtrace: bool = opt(True, "V-trace value targets and advantages; False uses GAE.")

    vtrace_rho: float = opt(1.0, "V-trace importance ratio clipping (rho bar).")

    vtrace_c: float = opt(1.0, "V-trace trace-cutting clipping (c bar).")

    gae_lambda: float = opt(0.95, "GAE lambda (used when --with_vtrace=False).")

    value_bootstrap: bool = opt(
        True, "On time-limit truncation bootstrap the return from the value of the final observation."
    )

    ppo_clip_ratio: float = opt(
        0.1,
        "PPO ratio clipping c: the ratio is clipped to [1 - c, 1 + c] (--ppo_clip_mode=unbiased: [1/(1+c), 1+c]).",
        aliases=("clip_coef",),
    )

    ppo_clip_mode: str = opt(
        "symmetric",
        "Interval of the PPO ratio clip: symmetric [1 - c, 1 + c] (the PPO paper), or unbiased [1/(1+c), 1+c], "
        "symmetric in log-ratio, as Sample Factory 2 clips (for c=0.1: [0.909, 1.1] instead of [0.9, 1.1]).",
        choices=("symmetric", "unbiased"),
    )

    ppo_ratio_clamp: float = opt(
        20.0,
        "Before the clipped objective the ratio is clamped to [1/x, x] (no gradient outside): a very stale sample "
        "whose probability moved more than x-fold would otherwise dominate the gradient through the unclipped "
        "branch (r * A with A < 0 is unbounded). 20 is Sample Factory 2's fixed [0.05, 20]; <= 0 disables.",
    )

    decoupled_ppo: bool = opt(
        False,
        "Clip PPO's ratio around the policy the iteration started from (the proximal policy) instead of the one "
        "that collected each sample, weighting each sample by pi_prox / mu: the decoupled objective of Hilton et "
        "al. 2021 (arXiv:2110.00641). In an asynchronous run the clip, clip_fraction and approx_kl (which "
        "--lr_schedule=kl_adaptive steers by) then measure the iteration's own change, not the policy lag. Costs "
        "one forward pass over the iteration's batch.",
    )

    ppo_clip_value: float = opt(1.0, "Value clipping around the behaviour value (<= 0 disables).")

    value_loss_coeff: float = opt(0.5, "Weight of the value loss.")

    normalize_advantage: bool = opt(
        True, "Normalize advantages to zero mean, unit std per minibatch.", aliases=("norm_adv",)
    )

    exploration_loss_coeff: float = opt(0.003, "Weight of the exploration loss (--exploration_loss).")

    exploration_loss_schedule: str = opt(
        "constant",
        "constant, or linear_decay of --exploration_loss_coeff to 0 over --train_for_env_steps (a wide search "
        "early, a sharper policy at the end; RLlib's entropy_coeff_schedule). Reported as exploration_coeff.",
        choices=("constant", "linear_decay"),
    )

    exploration_loss: str = opt(
        "entropy",
        "entropy: an entropy bonus. symmetric_kl: a penalty on KL(u || pi) + KL(pi || u) with u uniform over the "
        "allowed actions, which, unlike entropy, grows without bound as an action's probability goes to 0; "
        "discrete action spaces only (Discrete, MultiDiscrete, Tuples of them: a sum over the parts); a space "
        "with Box parts is rejected at start.",
        choices=("entropy", "symmetric_kl"),
    )

    kl_loss_coeff: float = opt(
        0.0,
        "Weight of a penalty on KL(behaviour policy || current policy) (the fixed-coefficient KL penalty of the "
        "PPO paper; Sample Factory recommends it for continuous actions). 0: off. Estimated from the stored "
        "behaviour log-probs as the mean of (r - 1) - log r over the valid samples (r = pi / mu): its gradient is "
        "an unbiased estimate of the KL's for any action space, with no extra buffers. Reported as kl_loss.",
    )

    max_grad_norm: float = opt(4.0, "Gradient norm clipping (<= 0 disables).")

    learning_rate: float = opt(1e-4, "Adam learning rate.", aliases=("lr",))

    lr_schedule: str = opt(
        "constant",
        "constant; linear_decay to 0 over --train_for_env_steps; or kl_adaptive (rl_games' adaptive schedule, "
        "APPO only): after every SGD step the rate is divided by 1.5 when the minibatch's approx_kl is above "
        "2 x --kl_threshold and multiplied by 1.5 when below half of it, within [--lr_min, --lr_max], starting "
        "at --learning_rate. Saved in the checkpoint; reported as lr (after the iteration's last step) and lr_mean "
        "(the mean over its steps).",
        choices=("constant", "linear_decay", "kl_adaptive"),
    )

    kl_threshold: float = opt(
        0.008,
        "--lr_schedule=kl_adaptive: the KL (behaviour policy -> current policy, per sample; from the proximal "
        "policy with --decoupled_ppo) the learning rate is steered to (rl_games' kl_threshold).",
    )

    lr_min: float = opt(1e-6, "--lr_schedule=kl_adaptive: the lowest learning rate.")

    lr_max: float = opt(1e-2, "--lr_schedule=kl_adaptive: the highest learning rate.")

    adam_eps: float = opt(1e-6, "Adam epsilon.")

    adam_beta1: float = opt(0.9, "Adam beta1.")

    adam_beta2: float = opt(0.999, "Adam beta2.")

    reward_scale: float = opt(1.0, "Rewards are multiplied by this before training.")

    reward_clip: float = opt(1000.0, "Rewards are clipped to [-c, c] after scaling.")

    max_nonfinite_updates: int = opt(
        20, "Consecutive SGD steps skipped for a NaN/inf loss or gradient before the run stops with an error."
    )


class SpeedOptions(OptionGroup, title="Learner threads, precision and compilation"):
    """How fast the learner and the policy workers compute: threads, bf16, torch.compile, CUDA graphs."""

    learner_main_loop_num_cores: int = opt(1, "Torch threads in the learner process.")

    learner_precision: str = opt(
        "fp32",
        "Precision of the learner's forward pass. bf16: conv and linear layers run under torch.autocast in "
        "bfloat16 (weights, gradients, optimizer, distributions and losses stay fp32); the Atari conv net's "
        "training step ran 2.2x faster on an AMD EPYC with AVX512-BF16, 1.45x slower on an Intel Xeon with it. "
        "auto: on a CPU with native bf16, whichever of the two runs the run's model faster here (timed by the "
        "runner at start, 0.4 s for the Atari net, and logged); on a GPU, bf16 where it supports it.",
        choices=("fp32", "bf16", "auto"),
    )

    inference_precision: str = opt(
        "fp32",
        "Precision of the policy workers' conv encoders. bf16: their weights and activations are bfloat16 (a "
        "copy converted at each weight update; MLP encoders, cores, heads and action sampling stay fp32); the "
        "Atari conv net inferred 1.5-1.8x faster at batches of 8-32 on an AMD EPYC with AVX512-BF16, 1.2-1.4x "
        "slower on an Intel Xeon with it. auto: as for --learner_precision, timed at the policy workers' batch.",
        choices=("fp32", "bf16", "auto"),
    )

    torch_compile_learner: bool = opt(
        False,
        "torch.compile the learner's encoders (RLlib's name). A compilation failure falls back to eager with one "
        "log line. Compiling takes seconds to a minute at start (cached in /tmp/torchinductor_<user> for later "
        "runs); measured gains are in benchmarks/notebook.md.",
    )

    torch_compile_worker: bool = opt(
        False, "torch.compile the policy workers' encoders for inference (dynamic batch sizes), same fallback."
    )

    inference_cuda_graphs: str = opt(
        "auto",
        "Replay the policy workers' inference step (forward and action sampling) from CUDA graphs, one per bucket "
        "of batch sizes (powers of two; a batch is padded to the next): one launch instead of one per kernel. "
        "auto: on CUDA devices for recurrent models (whole runs 1.15-1.2x), off for feed-forward ones (no "
        "whole-run gain measured yet) and with --torch_compile_worker. A failed capture falls back to eager "
        "with one log line. Measured in benchmarks/notebook.md.",
        choices=("auto", "True", "False"),
    )

    torch_compile_dynamo_backend: str = opt(
        "inductor", "torch.compile backend for --torch_compile_learner/--torch_compile_worker."
    )

    torch_compile_dynamo_mode: str = opt(
        "",
        "torch.compile mode: empty for torch's default, reduce-overhead (CUDA graphs: small GPU batches), "
        "max-autotune.",
    )
