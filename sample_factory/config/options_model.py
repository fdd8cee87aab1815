"""The model options: encoder, recurrent core, action distribution, normalizers. Assembled into OPTIONS by
options.py."""

from __future__ import annotations

from sample_factory.config.option_types import Option, conv_architecture, int_list, str2bool

MODEL_OPTIONS: list[Option] = [
    Option("encoder_mlp_layers", int_list, [512, 512], "Hidden layer sizes of the MLP encoder, e.g. 64,64."),
    Option("encoder_custom", str, None, "Name of an encoder registered with register_encoder (custom models)."),
    Option(
        "encoder_conv_architecture",
        conv_architecture,
        "convnet_simple",
        "Conv net for image observations (then --encoder_mlp_layers): convnet_simple (3 conv layers), "
        "convnet_nature (the DQN Nature paper's; Sample Factory 2's convnet_atari), convnet_minatar (the MinAtar "
        "paper's: 16 filters 3x3, stride 1, for small grids) or resnet_impala (IMPALA's 15-layer ResNet; Sample "
        "Factory 2's convnet_impala).",
        choices=("convnet_simple", "convnet_nature", "convnet_minatar", "resnet_impala"),
    ),
    Option("nonlinearity", str, "elu", "Activation function.", choices=("elu", "relu", "tanh")),
    Option(
        "policy_initialization",
        str,
        "orthogonal",
        "Weight initialization.",
        choices=("orthogonal", "xavier_uniform", "torch_default"),
    ),
    Option("use_rnn", str2bool, True, "Recurrent core after the encoder."),
    Option("rnn_type", str, "gru", "Recurrent core type.", choices=("gru", "lstm")),
    Option("rnn_size", int, 512, "Size of the recurrent state.", aliases=("hidden_size",)),
    Option("rnn_num_layers", int, 1, "Stacked recurrent layers."),
    Option("recurrence", int, -1, "BPTT length (-1: --rollout with an RNN, else 1). Divides --rollout."),
    Option("actor_critic_share_weights", str2bool, True, "Actor and critic share encoder and core."),
    Option("initial_stddev", float, 1.0, "Initial standard deviation of Gaussian actions."),
    Option(
        "adaptive_stddev",
        str2bool,
        False,
        "Gaussian actions: the policy head predicts the std per state (False: one learned std per dimension).",
    ),
    Option(
        "use_sde",
        str2bool,
        False,
        "Gaussian actions: generalized state-dependent exploration (gSDE, SB3's use_sde): the noise is the policy "
        "features times a random matrix per agent, held for --sde_sample_freq steps; the std per state follows "
        "from them (--initial_stddev where every feature is 1).",
    ),
    Option(
        "sde_sample_freq",
        int,
        -1,
        "With --use_sde: draw each agent's exploration matrix anew every this many of its steps (-1: every "
        "--rollout steps).",
    ),
    Option(
        "continuous_tanh_scale",
        float,
        0.0,
        "Gaussian actions: squash the predicted means to (-scale, scale) with scale * tanh(mean / scale) (0: off).",
    ),
    Option(
        "action_bounds",
        str,
        "clip",
        "How Box actions are brought into the action space's bounds before the env gets them: clip, tanh "
        "(squash into the bounds; needs finite bounds), or none. Training always uses the unbounded sample.",
        choices=("clip", "tanh", "none"),
    ),
    Option(
        "normalize_returns",
        str2bool,
        False,
        "The value head predicts returns normalized by their running mean/std (buffers keep real-scale values).",
    ),
    Option(
        "normalize_input",
        str2bool,
        False,
        "Normalize float observations with running mean/std (updated by the learner, shared with the workers).",
    ),
]
