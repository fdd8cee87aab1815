"""MinAtar envs (sample_factory/envs/minatar.py). Tests that run a game skip when the [minatar] extra is missing."""

from __future__ import annotations

import csv
import math
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.config.extras import install_hint
from sample_factory.envs import minatar
from sample_factory.envs.env_utils import make_env, unknown_env_message
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runner import Runner

# MinAtar's minimal action sets (its games' minimal_action_set) and channels
ACTIONS = {"Asterix": 5, "Breakout": 3, "Freeway": 3, "Seaquest": 6, "SpaceInvaders": 4}
CHANNELS = {"Asterix": 4, "Breakout": 4, "Freeway": 7, "Seaquest": 10, "SpaceInvaders": 6}


def _need_minatar():
    return pytest.importorskip("minatar", reason="MinAtar tests need the [minatar] extra: pip install -e .[minatar]")


def _cfg(env: str = "MinAtar/Breakout-v1", *extra: str):
    return parse_cfg([f"--env={env}", "--num_workers=1", *extra])


def test_ids_users_know_are_ours_and_typos_get_the_closest():
    assert len(minatar.ENV_IDS) == 10
    assert all(unknown_env_message(i) is None for i in minatar.ENV_IDS)
    assert minatar.parse_minatar_id("MinAtar/SpaceInvaders-v1") == ("space_invaders", True)
    assert minatar.parse_minatar_id("MinAtar/SpaceInvaders-v0") == ("space_invaders", False)
    assert minatar.parse_minatar_id("MinAtar/Pong-v1") is None
    assert "did you mean MinAtar/Breakout-v1" in unknown_env_message("MinAtar/Breakuot-v1")
    assert unknown_env_message("MinAtar/Breakout-v2").startswith("unknown env 'MinAtar/Breakout-v2'")


@pytest.mark.parametrize("game", list(ACTIONS))
def test_every_game_steps_with_channels_first_bool_grids(game):
    _need_minatar()
    for version, actions in (("v1", ACTIONS[game]), ("v0", 6)):
        env = make_env(_cfg(f"MinAtar/{game}-{version}"), render_mode="rgb_array")
        assert env.observation_space == gym.spaces.Box(0, 1, (CHANNELS[game], 10, 10), bool)
        assert env.action_space == gym.spaces.Discrete(actions)
        obs, _ = env.reset(seed=0)
        assert obs in env.observation_space and obs.any()
        for i in range(50):
            obs, reward, terminated, truncated, _ = env.step(i % actions)
            assert obs in env.observation_space and isinstance(reward, float) and not truncated
            if terminated:
                env.reset()
        frame = env.render()
        assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8 and frame.any()


def test_games_play_as_the_package_plays_them(monkeypatch):
    """Our env drives MinAtar's game classes itself (minatar.Environment imports its GUI's plotting packages): the
    same seed and actions give the package's own states, transposed to [C, H, W]."""
    _need_minatar()
    from minatar import Environment

    monkeypatch.setattr(minatar, "STICKY_ACTION_PROB", 0.0)
    ours = minatar.MinAtarEnv("seaquest", minimal_actions=False)
    ours.reset(seed=0)
    ours.game.random = np.random.RandomState(5)
    ours.game.reset()
    theirs = Environment("seaquest", sticky_action_prob=0.0)
    theirs.seed(5)
    theirs.reset()
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = int(rng.integers(6))
        obs, reward, terminated, _, _ = ours.step(a)
        their_reward, their_terminal = theirs.act(a)
        assert np.array_equal(obs, theirs.state().transpose(2, 0, 1))
        assert (reward, terminated) == (float(their_reward), bool(their_terminal))
        if terminated:
            break


def test_sticky_actions_repeat_the_previous_action_at_the_papers_rate():
    _need_minatar()
    env = minatar.MinAtarEnv("breakout")
    env.reset(seed=1)
    intended = np.arange(4000) % 2 + 1  # left, right, left, ... (Breakout's minimal set: MinAtar's 1 and 3)
    done = []
    for a in intended:
        env.step(a)
        done.append(env.actions.index(env.last_action))
    # a sticky step repeats the previous action, which differs from the intended one unless that step was sticky
    # too: mismatches m = p (1 - m), m = p / (1 + p)
    mismatched = np.mean(np.array(done) != intended)
    assert abs(mismatched - 0.1 / 1.1) < 0.02, mismatched


def test_seeded_resets_replay_the_same_games_and_envs_pickle():
    """reset(seed=s) replays the same game; serial-mode snapshots pickle the envs mid-game."""
    _need_minatar()

    def play(env, n=200):
        return [env.step(i % 3)[:3] for i in range(n)]

    a, b = make_env(_cfg()), make_env(_cfg())
    a.reset(seed=3)
    b.reset(seed=3)
    first, second = play(a), play(b)
    assert all(np.array_equal(x[0], y[0]) and x[1:] == y[1:] for x, y in zip(first, second, strict=True))
    c = pickle.loads(pickle.dumps(a))
    assert all(np.array_equal(x[0], y[0]) and x[1:] == y[1:] for x, y in zip(play(a), play(c), strict=True))


def test_max_episode_steps_caps_the_episodes():
    _need_minatar()
    env = make_env(_cfg("MinAtar/Freeway-v1", "--max_episode_steps=20"))
    env.reset(seed=0)
    truncated = [env.step(0)[3] for _ in range(20)]
    assert truncated == [False] * 19 + [True]


def test_a_missing_package_names_our_extra(monkeypatch):
    real = minatar.importlib.util.find_spec
    monkeypatch.setattr(minatar.importlib.util, "find_spec", lambda n: None if n == "minatar" else real(n))
    minatar._game_class.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"needs an optional package: ") as e:
            make_env(_cfg())
        assert str(e.value).endswith(install_hint("minatar"))
    finally:
        minatar._game_class.cache_clear()


def test_presets_use_the_minatar_papers_network():
    appo, dqn = _cfg(), _cfg("MinAtar/Asterix-v1", "--algo=DQN")
    for cfg in (appo, dqn):
        assert cfg.encoder_conv_architecture == "convnet_minatar" and cfg.encoder_mlp_layers == [128]
        assert not cfg.use_rnn
    # the paper's DQN (minibatches of 32, target copied every 1,000, replay of 100k, one-step targets) at the Nature
    # DQN's replay ratio, one minibatch per 4 sampled transitions
    assert (dqn.batch_size, dqn.training_intensity, dqn.target_network_update_freq) == (32, 8.0, 1000)
    assert dqn.n_step == 1
    assert (dqn.replay_buffer_capacity, dqn.learning_starts) == (100_000, 5_000)
    assert appo.learning_rate == 2.5e-4 and appo.batch_size == 256
    m = ActorCritic(dqn, gym.spaces.Box(0, 1, (4, 10, 10), bool), gym.spaces.Discrete(5))
    enc = m.towers[0].encoder
    convs = [c for c in enc.convs.modules() if isinstance(c, torch.nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [(4, 16, (3, 3), (1, 1))]
    assert enc.out_size == 128 and enc.mlp[0].in_features == 16 * 8 * 8
    params, values, _ = m.forward_step(torch.rand(2, 4, 10, 10) < 0.2, None)
    assert params.shape == (2, 5) and torch.isfinite(values).all()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_trains_a_few_iterations(tmp_path, algo):
    _need_minatar()
    argv = ["--env=MinAtar/Breakout-v1", f"--algo={algo}", "--serial_mode=True", "--num_workers=1"]
    argv += ["--num_envs_per_worker=8", "--train_for_env_steps=3000", f"--train_dir={tmp_path}", "--experiment=x"]
    if algo == "DQN":
        argv += ["--learning_starts=1000", "--training_intensity=4"]
    runner = Runner(parse_cfg(argv))
    assert runner.run() == 0
    with open(tmp_path / "x" / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert int(rows[-1]["env_steps"]) >= 3000
    assert any(not math.isnan(float(r["reward_p0"])) for r in rows)  # episodes ended and were reported
    # the checkpoint's name carries the policy version: the number of SGD steps taken
    versions = [int(c.name.split("_")[1]) for c in (tmp_path / "x" / "checkpoint_p0").glob("checkpoint_*.pth")]
    assert versions and max(versions) > 0
