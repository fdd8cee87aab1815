"""The built-in env families (Atari via ale-py, MuJoCo via gymnasium) created through make_env, and the Atari
episodic-life wrapper. Each family is skipped, naming its extra, when its package is not installed.
Multi-process training smoke runs of the same envs are in tests/integration/test_env_smoke.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from sample_factory.config import parse_cfg
from sample_factory.envs.atari import EpisodicLife, FireReset
from sample_factory.envs.atari_frames import AleFrameSkip
from sample_factory.envs.env_utils import make_env

NOOP = 0
# Breakout with the paddle never moving loses a life within ~30 agent steps; the cap only stops a broken wrapper
# from looping forever.
MAX_STEPS = 2_000


def needs_atari() -> None:
    pytest.importorskip("ale_py", reason="Atari needs the [atari] extra: pip install -e .[atari]")
    pytest.importorskip("cv2", reason="Atari needs the [atari] extra (opencv-python-headless): pip install -e .[atari]")


def needs_mujoco() -> None:
    pytest.importorskip("mujoco", reason="MuJoCo needs the [mujoco] extra: pip install -e .[mujoco]")


def wrappers_of(env: gym.Env) -> list[type]:
    found = []
    while isinstance(env, gym.Wrapper):
        found.append(type(env))
        env = env.env
    return found


def check_steps(env: gym.Env, n: int = 20) -> None:
    """Reset and step with random actions; every observation must belong to the observation space."""
    env.action_space.seed(0)
    obs, info = env.reset(seed=0)
    assert isinstance(info, dict)
    assert env.observation_space.contains(obs), (obs.shape, obs.dtype)
    for _ in range(n):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs), (obs.shape, obs.dtype)
        assert np.isfinite(float(reward))
        assert isinstance(terminated, bool | np.bool_) and isinstance(truncated, bool | np.bool_)
        if terminated or truncated:
            obs, info = env.reset()


# ---- Atari -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, ale_id",
    [
        ("atari_beamrider", "ALE/BeamRider-v5"),  # Sample Factory's spelling
        ("atari_beam_rider", "ALE/BeamRider-v5"),
        ("atari_spaceinvaders", "ALE/SpaceInvaders-v5"),
        ("atari_space_invaders", "ALE/SpaceInvaders-v5"),
        ("atari_pong", "ALE/Pong-v5"),
    ],
)
def test_atari_names_with_and_without_underscores(name: str, ale_id: str):
    needs_atari()
    from sample_factory.envs.atari import atari_env_id

    assert atari_env_id(name) == ale_id


@pytest.mark.parametrize("name, n_actions", [("atari_pong", 6), ("ALE/Breakout-v5", 4)])
def test_atari_make_reset_step(name: str, n_actions: int):
    needs_atari()
    env = make_env(parse_cfg([f"--env={name}"]))
    try:
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        assert space.shape == (4, 84, 84) and space.dtype == np.uint8
        assert env.action_space == gym.spaces.Discrete(n_actions)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        check_steps(env)
        # Training builds: life wrapper below the fire wrapper, so FIRE is pressed after every lost life.
        found = wrappers_of(env)
        assert EpisodicLife in found and FireReset in found
        assert found.index(FireReset) < found.index(EpisodicLife)
    finally:
        env.close()


@pytest.mark.parametrize("name, n_actions", [("BreakoutNoFrameskip-v4", 4), ("PongNoFrameskip-v4", 6)])
def test_cleanrl_and_sb3_atari_ids_are_made_with_v4_semantics(name: str, n_actions: int):
    """CleanRL's default id and SB3's: the atari preset and pipeline, no sticky actions, a lost life ends a training
    episode and evaluation plays whole games, 4 frames per agent step (issue 53: they were unknown envs)."""
    needs_atari()
    from sample_factory.envs.env_utils import frames_per_env_step, unknown_env_message

    assert unknown_env_message(name) is None
    cfg = parse_cfg([f"--env={name}"])
    assert cfg.preset == "atari" and cfg.env_sticky_actions == 0.0 and frames_per_env_step(cfg) == 4
    env = make_env(cfg)
    try:
        assert env.observation_space.shape == (4, 84, 84) and env.action_space == gym.spaces.Discrete(n_actions)
        assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
        assert EpisodicLife in wrappers_of(env) and FireReset in wrappers_of(env)
        check_steps(env)
    finally:
        env.close()
    cfg.evaluation_run = True
    env = make_env(cfg)
    try:
        assert EpisodicLife not in wrappers_of(env)
    finally:
        env.close()
    assert parse_cfg([f"--env={name}", "--algo=DQN"]).preset == "atari_dqn"


def breakout(*flags: str, evaluation_run: bool = False) -> gym.Env:
    """Breakout without sticky actions, so FIRE on reset always launches the ball and NOOPs always lose lives."""
    cfg = parse_cfg(["--env=ALE/Breakout-v5", "--env_sticky_actions=0", *flags])
    if evaluation_run:
        cfg.evaluation_run = True
    return make_env(cfg)


def noop_until_end(env: gym.Env) -> tuple[bool, bool, dict, int]:
    for t in range(1, MAX_STEPS + 1):
        _, _, terminated, truncated, info = env.step(NOOP)
        if terminated or truncated:
            return terminated, truncated, info, t
    raise AssertionError(f"no episode end within {MAX_STEPS} NOOP steps")


def test_episodic_life_life_loss_ends_episode_not_game():
    needs_atari()
    env = breakout()
    try:
        ale = env.unwrapped.ale
        env.reset(seed=0)
        assert ale.lives() == 5
        terminated, truncated, info, _ = noop_until_end(env)
        assert terminated and not truncated
        assert info["game_over"] is False
        assert ale.lives() == 4
        frame_before = ale.getEpisodeFrameNumber()

        obs, _ = env.reset()
        # Same game: lives stay, the frame counter keeps running (a new game would start near 0).
        assert ale.lives() == 4
        assert ale.getEpisodeFrameNumber() > frame_before
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        # The ball was launched again (FIRE after the lost life): with NOOPs only, the next life is lost too.
        terminated, _, info, _ = noop_until_end(env)
        assert terminated and info["game_over"] is False and ale.lives() == 3
    finally:
        env.close()


def test_episodic_life_real_game_over_resets_game():
    needs_atari()
    env = breakout()
    try:
        ale = env.unwrapped.ale
        env.reset(seed=0)
        flags = []
        for _ in range(10):  # 5 lives; the bound only stops a broken wrapper
            terminated, truncated, info, _ = noop_until_end(env)
            flags.append(info["game_over"])
            if info["game_over"]:
                break
            env.reset()
        assert flags == [False] * 4 + [True], flags  # 5 lives: 4 life losses, then the real game over
        assert terminated and ale.game_over()
        frame_at_end = ale.getEpisodeFrameNumber()

        env.reset()
        assert ale.lives() == 5
        assert ale.getEpisodeFrameNumber() < frame_at_end  # a new game
    finally:
        env.close()


def play_random_game(env: gym.Env, seed: int) -> tuple[float, list[dict]]:
    """Random actions until the real game over; returns the summed rewards and the info of every episode end."""
    env.action_space.seed(seed)
    env.reset(seed=seed)
    total, ends = 0.0, []
    for _ in range(MAX_STEPS * 5):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        total += float(reward)
        if terminated or truncated:
            ends.append(info)
            if info.get("game_over", True):
                return total, ends
            env.reset()
    raise AssertionError("no game over within the step cap")


def test_episodic_life_keeps_the_game_score_exact():
    """Every raw ALE reward of the game reaches the learner, including those of the NOOP/FIRE steps made inside
    reset() (carried over to the next step)."""
    needs_atari()
    env = breakout()
    try:
        raw = []

        class CountingALE:
            """The emulator, with every frame's reward recorded (at reset by AtariEnv, in steps by AleFrameSkip)."""

            def __init__(self, ale):
                self.inner = ale

            def act(self, *args):
                reward = self.inner.act(*args)
                raw.append(float(reward))
                return reward

            def __getattr__(self, name):
                return getattr(self.inner, name)

        counting = CountingALE(env.unwrapped.ale)
        env.unwrapped.ale = counting
        w = env
        while w is not env.unwrapped:
            if isinstance(w, AleFrameSkip):
                w.ale = counting
            w = w.env
        total, ends = play_random_game(env, seed=3)
        assert [e["game_over"] for e in ends] == [False] * 4 + [True]
        assert total == sum(raw) and total > 0
    finally:
        env.close()


class ScriptedLives(gym.Env):
    """A stand-in for the ALE env: `lives` and `rewards` give the value after each step (index = step count)."""

    observation_space = gym.spaces.Box(0, 255, (1,), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, lives: list[int], rewards: list[float], game_over_at: int):
        self.script_lives, self.script_rewards, self.game_over_at = lives, rewards, game_over_at
        self.t = 0
        self.actions: list[int] = []
        self.resets = 0
        self.ale = self

    def lives(self) -> int:
        return self.script_lives[self.t]

    def get_action_meanings(self) -> list[str]:
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def reset(self, *, seed=None, options=None):
        self.t, self.resets = 0, self.resets + 1
        return np.zeros(1, np.uint8), {}

    def step(self, action):
        self.t += 1
        self.actions.append(int(action))
        return np.zeros(1, np.uint8), self.script_rewards[self.t], self.t == self.game_over_at, False, {}


def test_episodic_life_carries_rewards_of_reset_steps():
    # ALE step 1: FIRE in the first reset, +5; 2: agent, +1; 3: agent, life lost; 4: NOOP in reset, +2;
    # 5: FIRE in reset, +3; 6: agent, +4; 7: agent, game over.
    inner = ScriptedLives(lives=[3, 3, 3, 2, 2, 2, 2, 0], rewards=[0, 5, 1, 0, 2, 3, 4, 0], game_over_at=7)
    env = FireReset(EpisodicLife(inner))
    env.reset()
    assert inner.actions == [1]  # FIRE after the first reset
    assert env.step(2)[1] == 1.0 + 5.0  # the FIRE step's reward is carried over
    inner.actions.clear()
    _, reward, terminated, _, info = env.step(2)
    assert terminated and info["game_over"] is False and reward == 0.0
    env.reset()
    assert inner.resets == 1 and inner.actions == [2, 0, 1]  # no real reset: NOOP, then FIRE
    assert env.step(2)[1] == 4.0 + 2.0 + 3.0
    _, _, terminated, _, info = env.step(2)
    assert terminated and info["game_over"] is True
    env.reset()
    assert inner.resets == 2


@pytest.mark.parametrize("flags, evaluation_run", [((), True), (("--env_episodic_life=False",), False)])
def test_no_episodic_life_in_evaluation_or_when_off(flags: tuple[str, ...], evaluation_run: bool):
    needs_atari()
    env = breakout(*flags, evaluation_run=evaluation_run)
    try:
        assert EpisodicLife not in wrappers_of(env)
        _, ends = play_random_game(env, seed=3)
        assert len(ends) == 1 and "game_over" not in ends[0]  # one episode: the whole game
        assert env.unwrapped.ale.game_over()
    finally:
        env.close()


def test_env_group_reports_whole_games():
    """The env group's side of the contract: life-loss ends (game_over False) are training episode ends (dones)
    but not finished episodes; the one finished episode is the whole game."""
    needs_atari()
    from sample_factory.envs.env_group import EnvGroup

    group = EnvGroup([breakout()], seeds=[0])
    try:
        group.reset()
        finished, dones, steps = [], 0, 0
        while not finished and steps < MAX_STEPS:
            finished = group.step(np.zeros(1, dtype=np.int64))
            dones += int(group.dones[0])
            steps += 1
        assert dones == 5, dones  # 4 life losses + the game over, each a training episode end
        assert len(finished) == 1 and finished[0][1] == steps, (finished, steps)
    finally:
        group.close()


# ---- MuJoCo ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mujoco_halfcheetah", "HalfCheetah-v5"])
def test_mujoco_make_reset_step(name: str):
    needs_mujoco()
    env = make_env(parse_cfg([f"--env={name}"]))
    try:
        assert env.spec is not None and env.spec.id == "HalfCheetah-v5"
        obs_space, act_space = env.observation_space, env.action_space
        assert isinstance(obs_space, gym.spaces.Box) and obs_space.shape == (17,)
        assert np.issubdtype(obs_space.dtype, np.floating)
        assert isinstance(act_space, gym.spaces.Box) and act_space.shape == (6,)
        np.testing.assert_array_equal(act_space.low, -1.0)
        np.testing.assert_array_equal(act_space.high, 1.0)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (17,) and np.isfinite(obs).all()
        check_steps(env)
    finally:
        env.close()


def test_ale_banner_is_not_printed():
    """ALE's banner came once per process that created an env (3 times in a 2-worker run): none now. It is written
    by ALE's C++ side to the process's stderr, so the check runs in a subprocess."""
    needs_atari()
    import subprocess
    import sys

    code = (
        "from sample_factory.config import parse_cfg\n"
        "from sample_factory.envs.env_utils import make_env\n"
        "for _ in range(2):\n"
        "    env = make_env(parse_cfg(['--env=atari_pong']))\n"
        "    env.reset(seed=0)\n"
        "    env.close()\n"
        "print('ok')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
    assert "A.L.E" not in p.stdout + p.stderr and "Stella" not in p.stdout + p.stderr, p.stderr
