"""AleFrameSkip + FrameStack against gymnasium's AtariPreprocessing + FrameStackObservation on an RGB ALE env (the
pipeline they replace): the same observations, rewards, episode ends and lives, step by step, through resets."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest

from sample_factory.config import parse_cfg
from sample_factory.envs.atari import EpisodicLife, FireReset, register_ale_envs
from sample_factory.envs.atari_frames import AleFrameSkip, FrameStack
from sample_factory.envs.env_utils import make_env
from tests.envs.test_integrations import needs_atari


def _ale(env_id: str, sticky: float, full: bool, obs_type: str) -> gym.Env:
    register_ale_envs()
    return gym.make(env_id, frameskip=1, repeat_action_probability=sticky, full_action_space=full, obs_type=obs_type)


def _gymnasium_pipeline(env_id: str, sticky: float, full: bool = False, game_wrappers: bool = False) -> gym.Env:
    env = gym.wrappers.AtariPreprocessing(
        _ale(env_id, sticky, full, "rgb"), noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True
    )
    if game_wrappers:
        env = FireReset(EpisodicLife(env))
    return gym.wrappers.FrameStackObservation(env, 4)


def _ours(env_id: str, sticky: float, full: bool = False, game_wrappers: bool = False) -> gym.Env:
    env = AleFrameSkip(_ale(env_id, sticky, full, "grayscale"), frame_skip=4, noop_max=30, size=84)
    if game_wrappers:
        env = FireReset(EpisodicLife(env))
    return FrameStack(env, 4)


def _same_trajectories(ours: gym.Env, ref: gym.Env, steps: int, seed: int) -> int:
    """Steps both with the same random actions; returns the number of episode ends seen."""
    assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
    a, ia = ours.reset(seed=seed)
    b, ib = ref.reset(seed=seed)
    assert a.dtype == b.dtype == np.uint8 and np.array_equal(a, b) and ia["lives"] == ib["lives"]
    rng = np.random.default_rng(seed)
    ends = 0
    for i in range(steps):
        action = int(rng.integers(ours.action_space.n))
        oa, ra, ta, ua, ia = ours.step(action)
        ob, rb, tb, ub, ib = ref.step(action)
        assert np.array_equal(oa, ob), f"step {i}"
        assert (ra, ta, ua, ia["lives"]) == (rb, tb, ub, ib["lives"]), f"step {i}"
        assert ia.get("game_over") == ib.get("game_over")
        if ta or ua:
            ends += 1
            reseed = {"seed": seed + ends} if ends % 2 else {}  # a seeded reset, then an unseeded one
            a, _ = ours.reset(**reseed)
            b, _ = ref.reset(**reseed)
            assert np.array_equal(a, b), f"reset after step {i}"
    return ends


@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_breakout_with_lives_and_fire_matches_gymnasium(sticky):
    needs_atari()
    ours, ref = (
        _ours("ALE/Breakout-v5", sticky, game_wrappers=True),
        _gymnasium_pipeline("ALE/Breakout-v5", sticky, game_wrappers=True),
    )
    try:
        # 600 steps cross 14-18 ends (lives lost, games over) for either stickiness; 1,500 crossed 40-45
        assert _same_trajectories(ours, ref, steps=600, seed=1) >= 6  # over 5 lives: a game over was crossed too
    finally:
        ours.close()
        ref.close()


def test_pong_full_action_space_matches_gymnasium():
    needs_atari()
    ours, ref = _ours("ALE/Pong-v5", 0.0, full=True), _gymnasium_pipeline("ALE/Pong-v5", 0.0, full=True)
    try:
        assert ours.action_space.n == 18
        _same_trajectories(ours, ref, steps=600, seed=2)
    finally:
        ours.close()
        ref.close()


def test_make_env_uses_the_fast_pipeline_and_renders_rgb():
    """make_env's Atari env is this pipeline, frames as the gymnasium one's, and rendering stays RGB."""
    needs_atari()
    cfg = parse_cfg(["--env=atari_breakout", "--env_sticky_actions=0"])
    env = make_env(cfg, render_mode="rgb_array")
    ref = _gymnasium_pipeline("ALE/Breakout-v5", 0.0, game_wrappers=True)
    try:
        assert isinstance(env, FrameStack)
        _same_trajectories(env, ref, steps=300, seed=3)
        frame = env.render()
        assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    finally:
        env.close()
        ref.close()


def test_frame_skip_wants_an_unskipped_env():
    needs_atari()
    register_ale_envs()
    env = gym.make("ALE/Pong-v5", frameskip=4)
    try:
        with pytest.raises(ValueError, match="frameskip=1"):
            AleFrameSkip(env)
    finally:
        env.close()


@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_pickled_env_goes_on_as_the_original(sticky):
    """Serial-mode snapshots pickle the envs: a copy continues the original's trajectory (emulator, sticky-action
    RNG, no-op generator, frame stack, lives), through episode ends and resets."""
    needs_atari()
    cfg = parse_cfg(["--env=atari_breakout", f"--env_sticky_actions={sticky}"])
    env = make_env(cfg)
    try:
        env.reset(seed=5)
        rng = np.random.default_rng(5)
        for _ in range(40):
            env.step(int(rng.integers(4)))
        copy = pickle.loads(pickle.dumps(env))
        ends = 0
        try:
            for i in range(600):
                action = int(rng.integers(4))
                a, b = env.step(action), copy.step(action)
                assert np.array_equal(a[0], b[0]) and a[1:4] == b[1:4] and a[4]["lives"] == b[4]["lives"], f"step {i}"
                if a[2] or a[3]:
                    ends += 1
                    assert np.array_equal(env.reset()[0], copy.reset()[0])
            assert ends >= 2
        finally:
            copy.close()
    finally:
        env.close()
