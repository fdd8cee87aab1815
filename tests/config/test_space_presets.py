"""Envs that no family preset names get defaults chosen from their spaces and episode length (issue 33 item 14)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from benchmarks.learning_suites import SUITES
from sample_factory.config import parse_cfg
from sample_factory.config.env_defaults import PRESET_ENVS, horizon_gamma, space_preset
from sample_factory.config.presets import PRESETS, SPACE_PRESETS
from sample_factory.envs import env_utils  # noqa: F401 - as train.py: the spaces of every env make_env makes


@pytest.mark.parametrize(
    "env, preset, gamma",
    [
        ("FrozenLake-v1", "vector_discrete", 0.99),  # index observations, discrete actions, 100 steps
        ("Blackjack-v1", "vector_discrete", 0.99),  # a Tuple of 3 indices (a Dict of them when made)
        ("Taxi-v4", "vector_discrete", 0.99),
        ("LunarLanderContinuous-v3", "vector_continuous", 0.99),
        ("mujoco_ant", "vector_continuous", 0.99),  # our short MuJoCo names resolve to the gymnasium id
        ("BipedalWalker-v3", "vector_continuous", 1 - 10 / 1600),  # 1,600-step episodes: a longer horizon
    ],
)
def test_an_env_without_a_family_preset_gets_the_defaults_of_its_spaces(env, preset, gamma):
    cfg = parse_cfg([f"--env={env}"])
    assert cfg.preset == preset
    assert cfg.gamma == pytest.approx(gamma)
    for k, v in SPACE_PRESETS[preset].items():
        if k != "gamma":
            assert getattr(cfg, k) == v, k


def test_typed_flags_win_over_the_space_preset():
    cfg = parse_cfg(["--env=FrozenLake-v1", "--gamma=0.9", "--learning_rate=1e-4"])
    assert cfg.preset == "vector_discrete" and cfg.gamma == 0.9 and cfg.learning_rate == 1e-4


def test_family_presets_custom_envs_unsupported_spaces_and_dqn_are_not_space_presets():
    assert parse_cfg(["--env=Pendulum-v1"]).preset == "continuous_control"  # named: its own preset
    assert parse_cfg(["--env=HalfCheetah-v5"]).preset == "mujoco"
    # MountainCarContinuous: its space's defaults with gSDE, each agent's matrix held for an episode
    cfg = parse_cfg(["--env=MountainCarContinuous-v0"])
    assert cfg.preset == "sparse_continuous" and cfg.use_sde and cfg.sde_sample_freq == 1000 and cfg.gamma == 0.999
    rest = {k: v for k, v in SPACE_PRESETS["vector_continuous"].items() if k != "gamma"}
    assert {k: getattr(cfg, k) for k in rest} == rest
    assert parse_cfg(["--env=SomeCustomEnv-v0"]).preset is None  # not a gymnasium id
    assert parse_cfg(["--env=FrozenLake-v1", "--algo=DQN"]).preset == "dqn"  # the space presets are PPO's


def test_space_preset_reads_the_spaces():
    image = gym.spaces.Box(0, 255, (96, 96, 3), np.uint8)
    vector = gym.spaces.Box(-1, 1, (5,), np.float32)
    assert space_preset(image, gym.spaces.Discrete(5), 1000)[0] == "image"
    assert space_preset(image, gym.spaces.Box(-1, 1, (3,)), None)[0] == "image"
    assert space_preset(vector, gym.spaces.Discrete(3), 200)[0] == "vector_discrete"
    assert space_preset(vector, gym.spaces.Box(-1, 1, (2,)), 200)[0] == "vector_continuous"
    assert space_preset(vector, gym.spaces.MultiDiscrete([2, 3]), 200) is None
    assert space_preset(image, gym.spaces.MultiDiscrete([2, 3]), 200) is None
    parts = {"a": vector, "b": gym.spaces.Discrete(4), "action_mask": gym.spaces.Box(0, 1, (3,), np.int8)}
    assert space_preset(gym.spaces.Dict(parts), gym.spaces.Discrete(3), 200)[0] == "vector_discrete"
    assert space_preset(gym.spaces.Tuple((vector, vector)), gym.spaces.Box(-1, 1, (2,)), 200)[0] == "vector_continuous"
    # frames among the parts (MiniGrid's image and direction): the image defaults, with a conv net that takes the
    # smallest frame (issue 53); nested or empty containers: the global defaults
    assert space_preset(gym.spaces.Dict({"a": vector, "screen": image}), gym.spaces.Discrete(3), 200)[0] == "image"
    small = gym.spaces.Dict({"direction": gym.spaces.Discrete(4), "image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)})
    name, values = space_preset(small, gym.spaces.Discrete(7), None)
    assert name == "image" and values["encoder_conv_architecture"] == "resnet_impala"
    assert space_preset(gym.spaces.Tuple((gym.spaces.Tuple((vector,)),)), gym.spaces.Discrete(3), 200) is None
    assert space_preset(gym.spaces.Dict({}), gym.spaces.Discrete(3), 200) is None
    assert [horizon_gamma(t) for t in (None, 100, 1000, 2000, 100_000)] == [0.99, 0.99, 0.99, 0.995, 0.999]


@pytest.mark.parametrize(
    "shape, arch",
    [
        ((96, 96, 3), "convnet_simple"),  # CarRacing's [H, W, C] frames: the atari preset's net
        ((3, 64, 64), "convnet_simple"),
        ((36, 40, 1), "convnet_simple"),  # the smallest the 8x8 stride-4 first layer takes
        ((10, 10, 4), "resnet_impala"),  # MinAtar-size frames: IMPALA's ResNet, which takes any size
        ((4, 20, 80), "resnet_impala"),
    ],
)
def test_image_preset_picks_a_conv_net_that_takes_the_frames(shape, arch):
    frames = gym.spaces.Box(0, 255, shape, np.uint8)
    assert space_preset(frames, gym.spaces.Discrete(3), None)[1]["encoder_conv_architecture"] == arch


def test_space_presets_are_listed_in_the_reference_and_measured_on_envs_outside_the_suites():
    for name in SPACE_PRESETS:
        assert name in PRESETS and name in PRESET_ENVS
    measured = {parse_cfg([f"--env={spec.env}"]).preset for spec in SUITES["no_preset"]}
    assert set(SPACE_PRESETS) <= measured  # CarRacing-v3 for `image`


def test_help_shows_the_space_preset_values(capsys):
    with pytest.raises(SystemExit):
        parse_cfg(["--env=FrozenLake-v1", "--help"])
    out = capsys.readouterr().out
    assert "vector_discrete preset for --env=FrozenLake-v1" in out


def test_max_episode_steps_sets_the_space_presets_gamma_and_is_refused_where_the_env_has_its_own_limit():
    assert parse_cfg(["--env=CliffWalking-v1"]).gamma == pytest.approx(0.99)  # no limit registered
    cfg = parse_cfg(["--env=CliffWalking-v1", "--max_episode_steps=5000"])
    assert cfg.preset == "vector_discrete" and cfg.gamma == pytest.approx(1 - 10 / 5000)
    assert parse_cfg(["--env=BipedalWalker-v3", "--max_episode_steps=500"]).gamma == pytest.approx(0.99)
    assert parse_cfg(["--env=CliffWalking-v1", "--max_episode_steps=5000", "--gamma=0.9"]).gamma == 0.9
    for argv in (
        ["--env=CliffWalking-v1", "--max_episode_steps=0"],
        ["--env=atari_pong", "--max_episode_steps=9"],
        ["--env=PongNoFrameskip-v4", "--max_episode_steps=9"],
    ):
        with pytest.raises(SystemExit):
            parse_cfg(argv)


class _Frames(gym.Env):
    """[H, W, C] frames and a discrete action: the `image` preset."""

    observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = gym.spaces.Discrete(3)


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (16, 2)])
def test_space_preset_learner_threads_are_capped_at_half_the_cores(cores, threads, monkeypatch):
    """As a family preset's (tests/config/test_cfg.py): `image` copies the atari preset's 2 learner threads, which
    it got uncapped on 2 cores before."""
    if "SfTestFrames-v0" not in gym.registry:
        gym.register("SfTestFrames-v0", entry_point=_Frames, max_episode_steps=100)
    monkeypatch.setattr("sample_factory.config.env_defaults.usable_cores", lambda: cores)
    cfg = parse_cfg(["--env=SfTestFrames-v0"])
    assert cfg.preset == "image" and cfg.learner_main_loop_num_cores == threads


class _Walk(gym.Env):
    """A 1-D walk to the right end: vector observations, discrete actions (the `vector_discrete` defaults)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)


def test_an_env_registered_in_the_users_script_gets_the_defaults_of_its_spaces():
    """register_env in the script, as examples/train_custom_env.py does: the defaults were looked up before (and
    without) the registration, so the global ones applied (issue 53)."""
    from sample_factory.config.parse import defaults_line
    from sample_factory.envs.env_utils import _ENV_REGISTRY, register_env

    register_env("sf_test_walk", lambda cfg, env_config: _Walk())
    try:
        cfg = parse_cfg(["--env=sf_test_walk"])
        assert (
            cfg.preset == "vector_discrete" and cfg.learning_rate == SPACE_PRESETS["vector_discrete"]["learning_rate"]
        )
        assert "chosen from sf_test_walk's spaces: Box(1,) observations, Discrete(2) actions" in defaults_line(cfg)
        assert parse_cfg(["--env=sf_test_walk", "--max_episode_steps=5000"]).gamma == pytest.approx(1 - 10 / 5000)
    finally:
        del _ENV_REGISTRY["sf_test_walk"]


def test_a_module_env_id_gets_the_defaults_of_its_spaces(tmp_path, monkeypatch):
    """`module:EnvId`: the module that registers the id is imported before the defaults are chosen (issue 53)."""
    (tmp_path / "sf_test_walk_module.py").write_text(
        "import gymnasium as gym\nimport numpy as np\n\n\nclass Walk(gym.Env):\n"
        "    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)\n"
        "    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)\n\n\n"
        "gym.register('SfTestModuleWalk-v0', entry_point=Walk, max_episode_steps=2000)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = parse_cfg(["--env=sf_test_walk_module:SfTestModuleWalk-v0"])
    assert cfg.preset == "vector_continuous" and cfg.gamma == pytest.approx(0.995)  # 2,000-step episodes
    assert "Box(3,) observations, Box(2,) actions" in cfg.preset_reason


def test_the_start_line_says_why_a_run_has_no_preset():
    from sample_factory.config.parse import defaults_line

    cfg = parse_cfg(["--env=SomeCustomEnv-v0"])
    assert defaults_line(cfg).startswith("defaults: the global defaults (no defaults chosen from SomeCustomEnv-v0's")
    assert defaults_line(parse_cfg(["--env=CartPole-v1"])) == (
        "defaults: the classic_control preset (CartPole-v1's family) for the flags not typed"
    )
