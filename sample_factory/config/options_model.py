"""The model options: encoder, recurrent core, action distribution, normalizers."""

from __future__ import annotations

from sample_factory.config.option_types import ConvArchitecture, OptionGroup, opt


class ModelOptions(OptionGroup, title="Model"):
    """The network: encoder, recurrent core, action distribution, normalizers."""

    encoder_mlp_layers: list[int] = opt([512, 512], "Hidden layer sizes of the MLP encoder, e.g. 64,64.")

    encoder_custom: str | None = opt(None, "Name of an encoder registered with register_encoder (custom models).")

    encoder_conv_architecture: ConvArchitecture = opt(
        "convnet_simple",
        "Conv net for image observations (then --encoder_mlp_layers): convnet_simple (3 conv layers), "
        "convnet_nature (the DQN Nature paper's; Sample Factory 2's convnet_atari), convnet_minatar (the MinAtar "
        "paper's: 16 filters 3x3, stride 1, for small grids) or resnet_impala (IMPALA's 15-layer ResNet; Sample "
        "Factory 2's convnet_impala).",
        choices=("convnet_simple", "convnet_nature", "convnet_minatar", "resnet_impala"),
    )

    nonlinearity: str = opt("elu", "Activation function.", choices=("elu", "relu", "tanh"))

    policy_initialization: str = opt(
        "orthogonal", "Weight initialization.", choices=("orthogonal", "xavier_uniform", "torch_default")
    )

    use_rnn: bool = opt(True, "Recurrent core after the encoder.")

    rnn_type: str = opt("gru", "Recurrent core type.", choices=("gru", "lstm"))

    rnn_size: int = opt(512, "Size of the recurrent state.", aliases=("hidden_size",))

    rnn_num_layers: int = opt(1, "Stacked recurrent layers.")

    recurrence: int = opt(-1, "BPTT length (-1: --rollout with an RNN, else 1). Divides --rollout.")

    actor_critic_share_weights: bool = opt(True, "Actor and critic share encoder and core.")

    initial_stddev: float = opt(1.0, "Initial standard deviation of Gaussian actions.")

    adaptive_stddev: bool = opt(
        False, "Gaussian actions: the policy head predicts the std per state (False: one learned std per dimension)."
    )

    use_sde: bool = opt(
        False,
        "Gaussian actions: generalized state-dependent exploration (gSDE, SB3's use_sde): the noise is the policy "
        "features times a random matrix per agent, held for --sde_sample_freq steps; the std per state follows "
        "from them (--initial_stddev where every feature is 1).",
    )

    sde_sample_freq: int = opt(
        -1,
        "With --use_sde: draw each agent's exploration matrix anew every this many of its steps (-1: every "
        "--rollout steps).",
    )

    continuous_tanh_scale: float = opt(
        0.0, "Gaussian actions: squash the predicted means to (-scale, scale) with scale * tanh(mean / scale) (0: off)."
    )

    action_bounds: str = opt(
        "clip",
        "How Box actions are brought into the action space's bounds before the env gets them: clip, tanh "
        "(squash into the bounds; needs finite bounds), or none. Training always uses the unbounded sample.",
        choices=("clip", "tanh", "none"),
    )

    normalize_returns: bool = opt(
        False, "The value head predicts returns normalized by their running mean/std (buffers keep real-scale values)."
    )

    normalize_input: bool = opt(
        False, "Normalize float observations with running mean/std (updated by the learner, shared with the workers)."
    )
