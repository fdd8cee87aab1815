"""VizDoom through vizdoom's own gymnasium envs (the [vizdoom] extra), made fit for this framework:

- observations: a Dict of "screen", uint8 [3, 72, 128] channels-first (rendered at 256x144, 16:9 so nothing is
  stretched, then averaged over 2x2 blocks), and "gamevariables", float32 [k], when the scenario has any; other
  buffers (depth, labels, automap, audio, notifications) are dropped and switched off in the engine;
- frame skip `cfg.env_frameskip`: vizdoom repeats the action for that many tics and sums the rewards;
- actions: Discrete (one button at a time, or none) for the scenario names and `Vizdoom<Scenario>-v1`,
  MultiDiscrete([2] * buttons) for the `-MultiBinary` and full-game ids, and a Tuple (buttons, Box of deltas)
  for scenarios with delta buttons (deathmatch), where vizdoom itself has a Dict;
- episodes that hit the scenario's time limit are truncated, not terminated (vizdoom flags both), so their value is
  bootstrapped; the final observation is the last frame seen (vizdoom would return a black one);
- headless: the game window is never shown; render_mode "rgb_array" gives the 256x144 RGB frame.

Names: `doom_basic`, `doom_health_gathering`, ... (DOOM_ENVS) or any `Vizdoom*-v*` id vizdoom registers.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import re
import shutil
import subprocess
import tempfile
from typing import Any

import gymnasium as gym
import numpy as np
import psutil

from sample_factory.config import Config
from sample_factory.config.extras import install_hint

# Our short names -> vizdoom's gymnasium ids (one button pressed at a time: Discrete actions).
DOOM_ENVS = {
    "doom_basic": "VizdoomBasic-v1",
    "doom_health_gathering": "VizdoomHealthGathering-v1",
    "doom_health_gathering_supreme": "VizdoomHealthGatheringSupreme-v1",
    "doom_defend_the_center": "VizdoomDefendCenter-v1",
    "doom_defend_the_line": "VizdoomDefendLine-v1",
    "doom_my_way_home": "VizdoomMyWayHome-v1",
    "doom_deadly_corridor": "VizdoomDeadlyCorridor-v1",
    "doom_take_cover": "VizdoomTakeCover-v1",
    "doom_predict_position": "VizdoomPredictPosition-v1",
    "doom_deathmatch": "VizdoomDeathmatch-v1",
}

# Observation size (fixed, see the module docstring) and the engine resolution it is averaged down from.
SCREEN_WIDTH = 128
SCREEN_HEIGHT = 72
RENDER_RESOLUTION = "RES_256X144"

_VIZDOOM_ID = re.compile(r"Vizdoom[A-Za-z0-9_-]*-v\d+")


def doom_env_id(name: str) -> str | None:
    """vizdoom's gymnasium id for a doom_* name or a Vizdoom*-v* id, None for other envs (no import of vizdoom)."""
    if name in DOOM_ENVS:
        return DOOM_ENVS[name]
    if _VIZDOOM_ID.fullmatch(name):
        return name
    return None


def downscale_screen(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    """[H, W, C] uint8 -> [C, height, width] uint8: the rounded mean of each block when H, W are multiples of the
    size (the default 2x2 case), nearest pixel otherwise."""
    h, w, c = frame.shape
    fy, fx = h // height, w // width
    if (fy * height, fx * width) != (h, w):
        rows = np.arange(height) * h // height
        cols = np.arange(width) * w // width
        return np.ascontiguousarray(frame[rows][:, cols].transpose(2, 0, 1))
    # Channels-first first, so that the block sums below add whole contiguous rows: ~3x faster than reducing the
    # interleaved RGB array. Sums in uint16: 255 * 256 fits, so blocks up to 16x16.
    planar = np.ascontiguousarray(frame.transpose(2, 0, 1))
    if fy == fx == 1:
        return planar
    blocks = planar.reshape(c, height, fy, w)
    rows = blocks[:, :, 0].astype(np.uint16) if fy == 1 else np.add(blocks[:, :, 0], blocks[:, :, 1], dtype=np.uint16)
    for i in range(2, fy):
        rows += blocks[:, :, i]
    pairs = rows.reshape(c, height, width, fx)
    total = pairs[..., 0].copy() if fx == 1 else pairs[..., 0] + pairs[..., 1]
    for j in range(2, fx):
        total += pairs[..., j]
    n = fy * fx
    total += n // 2
    total //= n
    return total.astype(np.uint8)


# Run by `sh` next to each engine: blocks on a pipe whose only writer is our process, so EOF means our process is
# gone without closing the env (a hung worker SIGKILLed by the supervisor). vizdoom's engine would then wait for
# its controller forever, keeping its memory and its /dev/shm files: stop it and remove them, and our config dir.
_WATCHDOG_SH = (
    'read _; kill -TERM "$1" 2>/dev/null; i=0; '
    'while kill -0 "$1" 2>/dev/null && [ "$i" -lt 30 ]; do sleep 0.1; i=$((i + 1)); done; '
    'kill -KILL "$1" 2>/dev/null; '
    'rm -f "/dev/shm/ViZDoomSM$2" "/dev/shm/ViZDoomMQCtr$2" "/dev/shm/ViZDoomMQDoom$2"; rm -rf "$3"'
)


class EngineWatchdog:
    """Cleans up after one vizdoom engine process if ours dies without env.close() (see _WATCHDOG_SH)."""

    def __init__(self, engine_pid: int, instance_id: str, config_dir: str):
        self.proc = subprocess.Popen(
            ["sh", "-c", _WATCHDOG_SH, "sf_doom_watchdog", str(engine_pid), instance_id, config_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def disarm(self) -> None:
        """The env closed its game normally: stop the watchdog without letting it act (the engine pid is free)."""
        self.proc.kill()
        self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()


# One per process that makes doom envs, run by `sh` like the watchdog: it acts when our process dies without its
# normal exit (a crash, SIGKILL), also in the middle of DoomGame.init(), where no engine watchdog is armed yet.
# First it stops our engines, found by their -config path under our config root ($1): an engine that was starting
# has no watchdog and would wait for its dead controller forever (it inherited the component's multiprocessing
# fds, so the fork server and resource tracker lived on with it: a CI run that exited 0 left all four). Then it
# removes their /dev/shm files, and the ViZDoom files that no process maps any more (a CI actor segfaulted in
# DoomGame.init() after the controller had made its message queues, before any engine ran), checked twice a
# second apart so that another controller's file between its creation and its mmap is never taken; then our
# config dirs.
_SWEEPER_SH = (
    "read _; pids=; ids=; "
    "for d in /proc/[0-9]*; do "
    '[ "$(cat "$d/comm" 2>/dev/null)" = vizdoom ] || continue; '
    'a=$(tr "\\0" "\\n" < "$d/cmdline" 2>/dev/null); '
    'case "$a" in *"$1/"*) ;; *) continue ;; esac; '
    'pids="$pids ${d#/proc/}"; ids="$ids $(printf "%s\\n" "$a" | sed -n "/^+viz_instance_id$/{n;p;}")"; '
    "done; "
    'running() { for p in $pids; do grep -qs "^State:[[:space:]]*[^Z[:space:]]" "/proc/$p/status" && return 0; '
    "done; return 1; }; "
    'for p in $pids; do kill -TERM "$p" 2>/dev/null; done; i=0; '
    'while running && [ "$i" -lt 30 ]; do sleep 0.1; i=$((i + 1)); done; '
    'for p in $pids; do kill -KILL "$p" 2>/dev/null; done; '
    'for id in $ids; do rm -f "/dev/shm/ViZDoomSM$id" "/dev/shm/ViZDoomMQCtr$id" "/dev/shm/ViZDoomMQDoom$id"; done; '
    "sleep 1; "
    'unmapped() { for f in "$@"; do [ -e "$f" ] && ! grep -qsF "$f" /proc/[0-9]*/maps && echo "$f"; done; }; '
    "c=$(unmapped /dev/shm/ViZDoom*); "
    '[ -n "$c" ] && sleep 1 && for f in $(unmapped $c); do rm -f "$f"; done; '
    'rm -rf "$1"'
)
_sweeper: tuple[int, subprocess.Popen, str] | None = None  # (owner pid, sweeper, config root) for this process


def _config_root() -> str:
    """This process's parent dir of the envs' config dirs, with a sweeper armed for it (see _SWEEPER_SH)."""
    global _sweeper
    if _sweeper is None or _sweeper[0] != os.getpid():  # a forked child has its own sweeper
        root = tempfile.mkdtemp(prefix=f"sf_vizdoom_{os.getpid()}_")
        proc = subprocess.Popen(
            ["sh", "-c", _SWEEPER_SH, "sf_doom_sweeper", root],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _sweeper = (os.getpid(), proc, root)
        atexit.register(_disarm_sweeper)
        multiprocessing.util.Finalize(None, _disarm_sweeper, exitpriority=0)  # also where atexit never runs
    return _sweeper[2]


def _disarm_sweeper() -> None:
    """A normal exit (every env closed by then): stop the sweeper without letting it act, and remove the root."""
    global _sweeper
    if _sweeper is None or _sweeper[0] != os.getpid():
        return
    _, proc, root = _sweeper
    _sweeper = None
    proc.kill()
    proc.wait()
    if proc.stdin is not None:
        proc.stdin.close()
    shutil.rmtree(root, ignore_errors=True)


def stop_engine(engine: psutil.Process, instance_id: str, grace_s: float = 3.0) -> None:
    """After DoomGame.close(): an engine still running is given `grace_s`, then killed, and its /dev/shm files go.
    A run stopped while its envs were starting once left engines that ignored SIGTERM, with their files."""
    try:
        if engine.is_running():  # psutil compares the create time: never a process that took over the pid
            try:
                engine.wait(timeout=grace_s)  # our child: this also reaps it
            except psutil.TimeoutExpired:
                engine.kill()
                engine.wait(timeout=5)
    except psutil.Error:
        pass
    for prefix in ("ViZDoomSM", "ViZDoomMQCtr", "ViZDoomMQDoom"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"/dev/shm/{prefix}{instance_id}")


def _new_engine(known_pids: set[int]) -> tuple[int, str] | None:
    """(pid, vizdoom instance id) of the engine process our DoomGame.init() just started, None if not found."""
    for child in psutil.Process().children():
        if child.pid in known_pids:
            continue
        try:
            if child.name() != "vizdoom":
                continue
            cmdline = child.cmdline()
        except psutil.Error:
            continue
        if "+viz_instance_id" in cmdline[:-1]:
            return child.pid, cmdline[cmdline.index("+viz_instance_id") + 1]
    return None


class DoomEnv(gym.Wrapper):
    """Observations: screen resized and channels-first plus the game variables. Time-limit ends are truncations
    only. Owns the engine's lifetime: its config dir and a watchdog for the case our process is killed."""

    def __init__(self, env: gym.Env, config_dir: str, height: int = SCREEN_HEIGHT, width: int = SCREEN_WIDTH):
        super().__init__(env)
        inner = env.observation_space
        assert isinstance(inner, gym.spaces.Dict), "vizdoom's observations are a Dict"
        screen = inner["screen"]
        assert isinstance(screen, gym.spaces.Box)
        channels = screen.shape[2]  # 3 for RGB24, 1 for GRAY8 configs
        self.size = (height, width)
        spaces: dict[str, gym.Space] = {"screen": gym.spaces.Box(0, 255, (channels, height, width), np.uint8)}
        self.gamevariables = "gamevariables" in inner.spaces
        if self.gamevariables:
            spaces["gamevariables"] = inner["gamevariables"]
        self.observation_space = gym.spaces.Dict(spaces)
        self.last_obs: dict[str, np.ndarray] | None = None
        self.config_dir = config_dir
        self.watchdog: EngineWatchdog | None = None
        self.engine: tuple[psutil.Process, str] | None = None  # the running engine process and its instance id

    @property
    def _vizdoom(self) -> Any:
        """vizdoom's gymnasium env (untyped): its `game` (the engine) and `state`."""
        return self.env.unwrapped

    def _convert(self, obs: dict[str, Any]) -> dict[str, np.ndarray]:
        out = {"screen": downscale_screen(obs["screen"], *self.size)}
        if self.gamevariables:
            out["gamevariables"] = np.asarray(obs["gamevariables"], dtype=np.float32)
        return out

    def reset(self, **kwargs: Any) -> tuple[dict[str, np.ndarray], dict]:
        game = self._vizdoom.game
        # vizdoom starts its engine process on the first reset (and again if it stopped): watch the new one.
        starting = not game.is_running()
        known = {p.pid for p in psutil.Process().children()} if starting else set()
        obs, info = self.env.reset(**kwargs)
        if starting:
            if self.watchdog is not None:
                self.watchdog.disarm()
                self.watchdog = None
            self.engine = None
            engine = _new_engine(known)
            if engine is not None:
                self.watchdog = EngineWatchdog(*engine, self.config_dir)
                with contextlib.suppress(psutil.Error):
                    self.engine = (psutil.Process(engine[0]), engine[1])
        self.last_obs = self._convert(obs)
        return self.last_obs, info

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if truncated and not self._vizdoom.game.is_player_dead():
            # vizdoom reports a timeout as terminated and truncated; only the latter is true for the agent.
            terminated = False
        if (terminated or truncated) and self._vizdoom.state is None and self.last_obs is not None:
            # The engine has no frame after the episode ends; the last one seen beats black for bootstrapping.
            obs = {k: v.copy() for k, v in self.last_obs.items()}
        else:
            obs = self._convert(obs)
        self.last_obs = obs
        return obs, float(reward), bool(terminated), bool(truncated), info

    def close(self) -> None:
        # DoomGame.close() stops the engine and removes its /dev/shm files; closing twice is harmless.
        super().close()
        if self.watchdog is not None:
            self.watchdog.disarm()
            self.watchdog = None
        if self.engine is not None:
            stop_engine(*self.engine)
            self.engine = None
        shutil.rmtree(self.config_dir, ignore_errors=True)


class DoomAction(gym.ActionWrapper):
    """vizdoom's Dict(binary, continuous) action becomes Tuple(binary, continuous); every action is cast to what
    vizdoom's strict `action_space.contains` check accepts (our buffers hold int64 or float32 rows)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        inner = env.action_space
        self.dict_keys: tuple[str, ...] | None = None
        if isinstance(inner, gym.spaces.Dict):
            self.dict_keys = tuple(inner.spaces)
            self.action_space = gym.spaces.Tuple([inner[k] for k in self.dict_keys])
            self.parts = [inner[k] for k in self.dict_keys]
        else:
            self.parts = [inner]

    @staticmethod
    def _cast(space: gym.Space, a: Any) -> Any:
        if isinstance(space, gym.spaces.Discrete):
            return int(a)
        return np.asarray(a, dtype=space.dtype).reshape(space.shape)

    def action(self, action: Any) -> Any:
        if self.dict_keys is None:
            return self._cast(self.parts[0], action)
        return {k: self._cast(sp, a) for k, sp, a in zip(self.dict_keys, self.parts, action)}


def make_doom_env(cfg: Config, env_id: str, render_mode: str | None = None) -> gym.Env:
    """A vizdoom env (env_id: a Vizdoom*-v* id or one of our doom_* names) wrapped as described in the module
    docstring; cfg.env_frameskip tics per step."""
    env_id = doom_env_id(env_id) or env_id
    # pygame (a vizdoom dependency) prints a banner on import unless told not to.
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import vizdoom
        import vizdoom.gymnasium_wrapper  # noqa: F401  (registers the Vizdoom* ids)
    except ImportError:
        raise ValueError(f"env {env_id!r} needs an optional package: {install_hint('vizdoom')}") from None
    if env_id not in gym.registry:
        import difflib

        known = [k for k in gym.registry if k.startswith("Vizdoom")]
        close = difflib.get_close_matches(env_id, known + list(DOOM_ENVS), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(DOOM_ENVS)}"
        raise ValueError(f"unknown VizDoom env {env_id!r}{hint}")
    frame_skip = int(cfg.env_frameskip)
    if frame_skip < 1:
        raise ValueError(f"--env_frameskip must be at least 1, got {frame_skip}")
    # The engine writes its own config file, by default ./_vizdoom.ini in the working directory: keep it in a
    # private temporary dir instead, removed on close (or by the watchdog or the sweeper).
    config_dir = tempfile.mkdtemp(prefix="env_", dir=_config_root())
    try:
        env = gym.make(
            env_id,
            frame_skip=frame_skip,
            render_mode=render_mode,
            # MultiDiscrete([2] * n) rather than MultiBinary: our framework has no MultiBinary actions.
            use_multi_binary_action_space=False,
            # The rest goes to DoomGame.set_config, after the scenario's .cfg file.
            window_visible=False,
            screen_resolution=getattr(vizdoom.ScreenResolution, RENDER_RESOLUTION),
            depth_buffer_enabled=False,
            labels_buffer_enabled=False,
            automap_buffer_enabled=False,
            audio_buffer_enabled=False,
            notifications_buffer_enabled=False,
            doom_config_path=os.path.join(config_dir, "_vizdoom.ini"),
        )
    except BaseException:
        shutil.rmtree(config_dir, ignore_errors=True)
        raise
    return DoomAction(DoomEnv(env, config_dir))
