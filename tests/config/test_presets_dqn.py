"""The --algo=DQN presets (config/presets.py): every family with a DQN variant gets it, and the variants keep
their family's env side."""

from __future__ import annotations

from sample_factory.config.env_defaults import DQN_VARIANT, preset_name_for_env
from sample_factory.config.presets import PRESETS


def test_every_variant_is_a_feed_forward_preset_that_dqn_runs_pick():
    assert set(DQN_VARIANT.values()) <= set(PRESETS)
    assert all(PRESETS[v]["use_rnn"] is False for v in DQN_VARIANT.values())
    envs = {"classic_control": "CartPole-v1", "atari": "atari_pong", "minatar": "MinAtar/Seaquest-v1"}
    for family, env in envs.items():
        assert preset_name_for_env(env) == family
        assert preset_name_for_env(env, "DQN") == DQN_VARIANT[family]
    assert preset_name_for_env("SomeCustomEnv-v0", "DQN") == "dqn"


def test_variants_keep_their_familys_env_side_and_network():
    for k in ("num_envs_per_worker", "rollout", "reward_clip", "env_sticky_actions", "encoder_mlp_layers"):
        assert PRESETS["atari_dqn"][k] == PRESETS["atari"][k]
    for k in ("encoder_conv_architecture", "encoder_mlp_layers", "nonlinearity", "use_rnn"):
        assert PRESETS["minatar_dqn"][k] == PRESETS["minatar"][k]
