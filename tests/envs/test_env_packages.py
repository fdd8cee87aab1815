"""Env packages from PyPI used as they come, with no flag but the env (issue 53): ids that gymnasium knows only once
their package is imported, Dict observations with keys no encoder takes, frames smaller than the default conv net
takes. minigrid (a Dict of a 7x7 image, a direction and a text mission) and popgym (ids registered on import) are
the packages; each is skipped, naming its extra, where it is not installed."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from sample_factory.config import parse_cfg
from sample_factory.envs.env_utils import make_env, probe_env, unknown_env_message
from sample_factory.envs.spaces import with_dict_observations

MINIGRID = "MiniGrid-Empty-5x5-v0"
POPGYM = "popgym-RepeatPreviousEasy-v0"


def needs(package: str) -> None:
    pytest.importorskip(package, reason=f"needs the [{package}] extra: pip install -e .[{package}]")


@pytest.mark.parametrize(("package", "env_id"), [("minigrid", MINIGRID), ("popgym", POPGYM)])
def test_an_id_known_once_its_package_is_imported_needs_no_module_prefix(package, env_id):
    needs(package)
    assert unknown_env_message(env_id) is None  # was: unknown env, no hint
    env = make_env(parse_cfg([f"--env={env_id}"]))
    env.close()
    assert parse_cfg([f"--env={package}:{env_id}"]).preset == parse_cfg([f"--env={env_id}"]).preset


def test_an_unknown_id_says_how_to_name_an_env_package():
    msg = unknown_env_message("SomePackageNobodyHas-Foo-v0")
    assert msg.endswith("--env=PACKAGE:SomePackageNobodyHas-Foo-v0 imports the package first"), msg


def test_minigrid_gets_image_defaults_that_fit_its_frames_and_leaves_the_text_mission_out():
    needs("minigrid")
    cfg = parse_cfg([f"--env={MINIGRID}"])
    # a Dict of a 7x7 frame and an index: before, the global defaults, whose conv net needs 36x36 frames
    assert cfg.preset == "image" and cfg.encoder_conv_architecture == "resnet_impala"
    assert "Dict(direction: Discrete(4), image: Box(7, 7, 3))" in cfg.preset_reason
    info = probe_env(cfg, False)
    assert list(info.observation_space.spaces) == ["direction", "image"]
    assert info.left_out_keys == ("mission (MissionSpace)",)
    env = make_env(cfg)
    try:
        obs, _ = env.reset(seed=0)
        assert set(obs) == {"direction", "image"} and env.observation_space.contains(obs)
    finally:
        env.close()
    only = probe_env(parse_cfg([f"--env={MINIGRID}", "--obs_keys=image"]), False)
    assert list(only.observation_space.spaces) == ["image"] and only.left_out_keys == (
        "direction (Discrete)",
        "mission (MissionSpace)",
    )
    for keys, why in (("mission", "no encoder takes 'mission'"), ("imag", "no observation key 'imag'")):
        with pytest.raises(ValueError, match=why):
            make_env(parse_cfg([f"--env={MINIGRID}", f"--obs_keys={keys}"]))


@pytest.mark.timeout(120)
def test_minigrid_trains_with_no_flag_but_the_env(tmp_path):
    """The run starts and says which keys it left out (a serial run: no processes left). Without --experiment it
    gets CleanRL's run name, says how to resume, and enjoy.py finds it by the same flags."""
    needs("minigrid")
    from sample_factory.evaluation.enjoy import load_experiment_cfg
    from sample_factory.runner import Runner

    argv = [f"--env={MINIGRID}", "--seed=0", f"--train_dir={tmp_path}"]
    cfg = parse_cfg([*argv, "--serial_mode=True", "--num_workers=1", "--train_for_env_steps=3000"])
    assert Runner(cfg).run() == 0
    name = "MiniGrid-Empty-5x5-v0__appo__0"
    log = (tmp_path / name / "sf_log.txt").read_text()
    assert "defaults: the image preset (chosen from MiniGrid-Empty-5x5-v0's spaces" in log
    assert "observation keys left out: mission (MissionSpace); the model reads direction, image" in log
    assert f"no --experiment: this run is {name}; the same command resumes it (or --experiment={name})" in log
    assert load_experiment_cfg(argv).experiment == name


class _Mission(gym.Env):
    observation_space = gym.spaces.Dict(
        {"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "mission": gym.spaces.Text(20)}
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        return {"pos": np.zeros(2, np.float32), "mission": "go"}, {}


def test_keys_no_encoder_takes_are_left_out_and_obs_keys_must_be_dict_keys():
    env = with_dict_observations(_Mission())
    assert list(env.observation_space.spaces) == ["pos"] and set(env.reset()[0]) == {"pos"}
    with pytest.raises(ValueError, match="--obs_keys chooses keys of Dict observations"):
        with_dict_observations(gym.make("CartPole-v1"), ["obs"])
