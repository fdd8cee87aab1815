"""MinAtar (the [minatar] extra): Young & Tian's miniature Atari games on a 10x10 grid, one binary channel per kind
of object, under the gymnasium ids the package defines: `MinAtar/<Game>-v1` (the game's minimal action set) and
`MinAtar/<Game>-v0` (all 6 actions), Game one of Asterix, Breakout, Freeway, Seaquest, SpaceInvaders.

- observations: bool [C, 10, 10], channels first as the conv encoders take them (MinAtar's own state is [10, 10, C]);
  bool, not uint8, so the encoder does not scale the 0/1 planes by 1/255;
- as in the MinAtar paper and the package's defaults: sticky actions with probability 0.1 (the previous action is
  repeated), difficulty ramping on, no frame skip (one step is one frame), no step limit besides the games' own
  (Freeway ends after 2,500 steps); --max_episode_steps adds one.

The package's gymnasium ids are not registered under gymnasium 1.x (it no longer loads plugin entry points), and its
`minatar.Environment` imports matplotlib, seaborn, pandas and scipy for its GUI (1.3 s in every worker process).
This env therefore drives the package's game classes (minatar/environments/<game>.py, numpy only) itself and
applies the sticky actions as `minatar.Environment.act` does.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from sample_factory.config import Config
from sample_factory.config.extras import install_hint

# Our (and the package's) game names -> MinAtar's module names
GAMES = {
    "Asterix": "asterix",
    "Breakout": "breakout",
    "Freeway": "freeway",
    "Seaquest": "seaquest",
    "SpaceInvaders": "space_invaders",
}
ENV_IDS = tuple(f"MinAtar/{game}-v{v}" for game in GAMES for v in (1, 0))
STICKY_ACTION_PROB = 0.1  # MinAtar's default and its paper's
_ID = re.compile(r"MinAtar/(\w+)-v([01])")

# render_mode="rgb_array": black for an empty cell, then one RGB colour per channel (up to Seaquest's 10)
_PALETTE = np.array(
    [
        [0, 0, 0],
        [230, 230, 230],
        [230, 60, 60],
        [60, 200, 60],
        [70, 110, 240],
        [240, 200, 40],
        [200, 80, 220],
        [40, 210, 210],
        [240, 140, 40],
        [150, 150, 150],
        [120, 200, 120],
    ],
    dtype=np.uint8,
)
RENDER_SCALE = 16  # pixels per grid cell in rendered frames


def is_minatar_id(name: str) -> bool:
    return name.startswith("MinAtar/")


def parse_minatar_id(name: str) -> tuple[str, bool] | None:
    """`MinAtar/<Game>-v1|v0` -> (MinAtar's module name, minimal action set), None for any other name."""
    m = _ID.fullmatch(name)
    if m is None or m.group(1) not in GAMES:
        return None
    return GAMES[m.group(1)], m.group(2) == "1"


@functools.cache
def _game_class(module_name: str) -> type:
    """The package's game class, loaded from its file without running `minatar/__init__.py` (which imports the GUI's
    plotting packages). ImportError when the package is not installed."""
    spec = importlib.util.find_spec("minatar")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("minatar")
    path = Path(next(iter(spec.submodule_search_locations))) / "environments" / f"{module_name}.py"
    game_spec = importlib.util.spec_from_file_location(f"_sf_minatar_{module_name}", path)
    if game_spec is None or game_spec.loader is None or not path.is_file():
        raise ImportError(f"minatar.environments.{module_name}")
    module = importlib.util.module_from_spec(game_spec)
    game_spec.loader.exec_module(module)
    return module.Env


class MinAtarEnv(gym.Env):
    """One MinAtar game: bool [C, 10, 10] observations, Discrete actions (the minimal set or all 6)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, game: str, minimal_actions: bool = True, render_mode: str | None = None):
        self.game_module = game
        self.game = _game_class(game)(ramping=True)
        self.actions = list(self.game.minimal_action_set()) if minimal_actions else list(range(6))
        h, w, c = self.game.state_shape()
        self.observation_space = gym.spaces.Box(0, 1, (c, h, w), dtype=bool)
        self.action_space = gym.spaces.Discrete(len(self.actions))
        self.render_mode = render_mode
        self.last_action = 0  # MinAtar's index (0: no-op), repeated by a sticky step

    def __getstate__(self) -> dict[str, Any]:
        # serial-mode snapshots pickle the envs: the game class lives in no importable module (see _game_class), so
        # the game travels as its attributes (numpy arrays, lists, its RandomState)
        state = self.__dict__.copy()
        state["game"] = self.game.__dict__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        cls = _game_class(state["game_module"])
        game: Any = object.__new__(cls)
        game.__dict__.update(state["game"])
        self.__dict__.update({**state, "game": game})

    def _obs(self) -> np.ndarray:
        return np.ascontiguousarray(self.game.state().transpose(2, 0, 1))  # [10, 10, C] -> [C, 10, 10]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        # the game draws from its own RandomState (spawns, the ball's start, sticky actions here): seeded from
        # gymnasium's generator at every reset, so reset(seed=s) replays the same games
        self.game.random = np.random.RandomState(int(self.np_random.integers(2**31)))
        self.game.reset()
        self.last_action = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict]:
        a = self.actions[int(action)]
        if self.game.random.rand() < STICKY_ACTION_PROB:
            a = self.last_action
        self.last_action = a
        reward, terminal = self.game.act(a)
        return self._obs(), float(reward), bool(terminal), False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        state = self.game.state()  # [10, 10, C]
        # the highest channel set in a cell decides its colour, as in MinAtar's own display; 0: empty (black)
        top = np.amax(state * np.arange(1, state.shape[-1] + 1), axis=-1)  # [10, 10]
        frame = _PALETTE[top]  # [10, 10, 3]
        return frame.repeat(RENDER_SCALE, 0).repeat(RENDER_SCALE, 1)


def make_minatar_env(cfg: Config, name: str, render_mode: str | None = None) -> gym.Env:
    """The MinAtar game `name` (a MinAtar/<Game>-v1|v0 id); --max_episode_steps caps its episodes."""
    parsed = parse_minatar_id(name)
    if parsed is None:
        raise ValueError(unknown_minatar_message(name))
    try:
        env: gym.Env = MinAtarEnv(*parsed, render_mode=render_mode)
    except ImportError:
        raise ValueError(f"env {name!r} needs an optional package: {install_hint('minatar')}") from None
    return gym.wrappers.TimeLimit(env, cfg.max_episode_steps) if cfg.max_episode_steps else env


def unknown_minatar_message(name: str) -> str:
    import difflib

    close = difflib.get_close_matches(name, ENV_IDS, n=3, cutoff=0.6)
    return f"unknown env {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
