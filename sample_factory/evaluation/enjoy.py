"""`python enjoy.py --env=... --experiment=... --train_dir=...`: evaluate a trained policy.

The experiment's cfg.json is the base; flags typed now override it. Evaluation flags (the "Evaluation (enjoy.py)"
group of config/options.py) always come from this command line or their defaults, never from cfg.json;
--eval_env_overrides (env options as name=value pairs) applies last.

Single process (the default, and whenever --num_workers is not typed here): the policy is loaded with
`policy_api.load_policy` (--load_checkpoint_kind latest|best) and plays --max_num_episodes episodes in one env
(recurrent state carried across steps, reset at episode ends; --eval_deterministic takes the most likely action).
It renders on screen unless --no_render (falling back to headless, with a one-line notice, when the env cannot),
or records mp4 files with --save_video.

Parallel (--num_workers=N typed, N > 1): the training machinery evaluates instead (actor workers step the envs,
policy workers act, the learner only loads the checkpoint; see `Runner` with `cfg.evaluation_run`).

Both print each episode's reward and length, the mean +- std, and write a JSON summary to --eval_results_file
(default <experiment>/eval_results.json). Problems (no experiment, no checkpoint, ...) are one line on stderr,
"enjoy: error: ...", and exit code 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from sample_factory.config import (
    OPTIONS,
    Config,
    build_parser,
    finalize_cfg,
    overridable_env_options,
    parse_env_overrides,
    suggest_flag,
    typed_flags,
)
from sample_factory.config.checks import run_name
from sample_factory.config.extras import install_hint
from sample_factory.config.options import EVAL_GROUPS
from sample_factory.config.parse import normalize_flags
from sample_factory.envs.env_group import EnvGroup, env_num_agents
from sample_factory.envs.env_utils import make_env
from sample_factory.evaluation.policy_api import State, load_policy
from sample_factory.experiment.checkpoints import checkpoint_dir, list_best_checkpoints, list_checkpoints
from sample_factory.experiment.folder import experiment_dir
from sample_factory.runner import Runner
from sample_factory.runtime.device import torch_device
from sample_factory.runtime.messages import Report

EVAL_FLAGS = {opt.name for group in EVAL_GROUPS for opt in OPTIONS[group]}
# What --help lists: the options enjoy reads. Other (training) options are still accepted: typed, they override
# the experiment's cfg.json like these.
ENJOY_HELP_OPTIONS = {
    "eval_epsilon",
    "experiment",
    "train_dir",
    "device",
    "num_workers",
    "num_envs_per_worker",
    "worker_num_splits",
    "policy_workers_per_policy",
    "env_backend",
    *EVAL_FLAGS,
    *overridable_env_options(),
}
ENJOY_DESCRIPTION = (
    "Evaluate a trained policy: the experiment's cfg.json gives every training option; the options below, typed, "
    "override it (evaluation options always come from this command line or their defaults). Other training options "
    "are accepted too but not listed (python train.py --help)."
)


class EnjoyError(RuntimeError):
    """A problem the user can fix; shown as one line."""


def notice(msg: str) -> None:
    print(f"enjoy: {msg}", flush=True)


# ---- configuration -----------------------------------------------------------------------------------------
def load_experiment_cfg(argv: Sequence[str]) -> Config:
    """Parser defaults <- the experiment's cfg.json (except evaluation flags) <- flags typed now <-
    --eval_env_overrides. `cfg.cli_flags` lists the flags typed on this command line."""
    argv = normalize_flags(argv)
    parser = build_parser(
        prog="enjoy.py",
        listed=ENJOY_HELP_OPTIONS,
        usage="enjoy.py --env=ENV --experiment=NAME [--train_dir=DIR] [--option=value ...]",
        description=ENJOY_DESCRIPTION,
    )
    unknown = suggest_flag(argv)
    if unknown:
        parser.error(unknown)
    cfg = parser.parse_args(argv)
    typed = typed_flags(argv)
    if cfg.experiment is None:  # train.py's name for a run that named none: the same flags find it
        if not cfg.env:
            raise EnjoyError("--experiment is required (or the --env and --seed of a run that named none)")
        cfg.experiment = run_name(cfg)
    path = Path(cfg.train_dir) / cfg.experiment / "cfg.json"
    if not path.exists():
        raise EnjoyError(f"no experiment at {path.parent} (cfg.json not found)")
    try:
        saved = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise EnjoyError(f"{path} is corrupted ({e})") from None
    saved = {k: v for k, v in saved.items() if k not in EVAL_FLAGS}
    # The overrides come last: they are what the evaluation is asked to play (e.g. no sticky actions).
    merged = {**vars(cfg), **saved, **typed, **parse_env_overrides(cfg.eval_env_overrides)}
    # Where the experiment was found now, not where it was trained (the folder may have been moved since).
    merged["train_dir"], merged["experiment"] = cfg.train_dir, cfg.experiment
    merged["device"] = typed.get("device", "cpu")
    merged["cli_flags"] = sorted(typed)
    merged["command_line"] = " ".join(argv)
    merged["evaluation_run"] = True  # env wrappers for training only (Atari episodic life) stay off
    cfg = Config.from_dict(merged)
    if not 0 <= cfg.policy_index < cfg.num_policies:
        raise EnjoyError(f"--policy_index={cfg.policy_index}: the experiment has {cfg.num_policies} policies")
    return finalize_cfg(cfg)


def is_parallel(cfg: Config) -> bool:
    return "num_workers" in cfg.cli_flags and (cfg.num_workers or 1) > 1


def check_checkpoint_exists(cfg: Config) -> None:
    """Fail fast, in one line, before any env or process is started."""
    d = checkpoint_dir(cfg, cfg.policy_index)
    if cfg.load_checkpoint_kind == "best":
        if not list_best_checkpoints(d):
            raise EnjoyError(
                f"no best checkpoint (best_*.pth) in {d}: this run saved none (see --save_best_after); "
                f"use --load_checkpoint_kind=latest"
            )
    elif not list_checkpoints(d):
        raise EnjoyError(f"no checkpoint in {d}: the run has not saved one yet")


# ---- envs with rendering -----------------------------------------------------------------------------------
def make_env_with_render_mode(cfg: Config, render_mode: str) -> gym.Env:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium warns about a mode the env lacks; the caller checks it
        return make_env(cfg, render_mode=render_mode)


def _no_display() -> str | None:
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display (DISPLAY is not set)"
    return None


def _offscreen_sdl() -> None:
    """pygame-drawn envs (gymnasium's classic control and Box2D) draw rgb_array frames through SDL, whose video init
    probes for a display and, on a headless machine, prints `error: XDG_RUNTIME_DIR is invalid or not set`. Frames
    for a video need neither a display nor sound: SDL's dummy drivers. Variables the user set win."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def open_eval_env(cfg: Config) -> tuple[gym.Env, str | None, Any]:
    """(env, the render mode really used, the first observation). human -> headless fallback with a notice;
    rgb_array (for --save_video) must work, else a one-line error."""
    wanted = "rgb_array" if cfg.save_video else None if cfg.no_render else "human"
    if cfg.save_video and not cfg.no_render:
        notice("--save_video renders off-screen into the video; no window is shown")
    if wanted == "human" and (why := _no_display()):
        notice(f"{why}: evaluating headless (pass --no_render=True to skip this check)")
        wanted = None
    if wanted == "rgb_array":
        _offscreen_sdl()
    if wanted is not None:
        env = None
        try:
            env = make_env_with_render_mode(cfg, wanted)
            if getattr(env, "render_mode", None) != wanted:
                modes = env.metadata.get("render_modes", [])
                raise EnjoyError(f"env {cfg.env} has no {wanted!r} render mode (it has {modes})")
            obs, _ = env.reset(seed=cfg.seed)  # human: the window opens here
            if wanted == "rgb_array":
                frame = env.render()
                shape: tuple[int, ...] = getattr(frame, "shape", ())
                if not (len(shape) == 2 or (len(shape) == 3 and shape[2] in (3, 4))):
                    raise EnjoyError(f"render() returned {type(frame).__name__} {shape}, not an image")
            return env, wanted, obs
        except Exception as e:  # a missing renderer (pygame), no display, no such mode, ...
            if env is not None:
                try:
                    env.close()
                except Exception:
                    pass
            if wanted == "rgb_array":
                raise EnjoyError(f"--save_video: env {cfg.env} cannot render frames: {_first_line(e)}") from None
            # A headless env that fails too raises its own error below.
            notice(f"cannot render on screen ({_first_line(e)}): evaluating headless")
    env = make_env(cfg)
    obs, _ = env.reset(seed=cfg.seed)
    return env, None, obs


# ---- video ---------------------------------------------------------------------------------------------------
def render_frame(env: gym.Env) -> np.ndarray:
    """The frame of an env opened with render_mode="rgb_array" (open_eval_env has checked it returns an image)."""
    return np.asarray(env.render())


def _video_frame(frame: np.ndarray) -> np.ndarray:
    """HxWx3 uint8 with even H and W (libx264 with yuv420p needs even sizes; the last row/column is repeated)."""
    f = np.asarray(frame)
    if f.dtype != np.uint8:
        f = np.clip(f, 0, 255).astype(np.uint8)
    if f.ndim == 2:
        f = np.repeat(f[:, :, None], 3, axis=2)
    elif f.shape[2] == 4:
        f = f[:, :, :3]
    pad = ((0, f.shape[0] % 2), (0, f.shape[1] % 2), (0, 0))
    return np.pad(f, pad, mode="edge") if any(p[1] for p in pad[:2]) else f


class _Mp4:
    """One mp4 file, created at its first frame; at most `max_frames` frames."""

    def __init__(self, imageio: Any, path: Path, max_frames: int, fps: float):
        self._imageio, self.path, self.max_frames, self.fps = imageio, path, max_frames, fps
        self.writer: Any = None  # imageio's writer, opened at the first frame
        self.frames = 0

    @property
    def full(self) -> bool:
        return self.frames >= self.max_frames

    def add(self, frame: np.ndarray) -> None:
        if self.full:
            return
        if self.writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = self._imageio.get_writer(
                self.path,
                format="FFMPEG",
                mode="I",
                fps=self.fps,
                codec="libx264",
                pixelformat="yuv420p",
                macro_block_size=1,
                ffmpeg_log_level="error",
            )
        self.writer.append_data(frame)
        self.frames += 1

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class VideoRecorder:
    """Streams frames into the experiment folder: `<base>.mp4` holds every episode of the evaluation (Sample
    Factory 2's `replay.mp4` with the default name), and with `per_episode` each episode also goes to
    `<base>_ep<N>.mp4` (N from 1); at most `max_frames` frames per file. An episode's video holds the frame after
    reset and one after every step: episode length + 1 frames (fewer when capped)."""

    def __init__(self, directory: Path, base: str, per_episode: bool, max_frames: int, fps: float):
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401  (the bundled ffmpeg binary)
        except ImportError:
            raise EnjoyError(f"--save_video needs imageio and imageio-ffmpeg: {install_hint('video')}") from None
        base = base[:-4] if base.endswith(".mp4") else base
        self._new = lambda name: _Mp4(imageio, directory / name, max_frames, fps)
        self.base, self.per_episode = base, per_episode
        self.episode = 1
        self.files = [self._new(f"{base}.mp4")]
        if per_episode:
            self.files.append(self._new(f"{base}_ep1.mp4"))

    @property
    def paths(self) -> list[Path]:
        """The files written so far: the whole evaluation first, then the episodes."""
        return [f.path for f in self.files if f.frames]

    @property
    def wants_frame(self) -> bool:
        return not self.files[0].full or (self.per_episode and not self.files[-1].full)

    def add(self, frame: np.ndarray) -> None:
        frame = _video_frame(frame)
        self.files[0].add(frame)
        if self.per_episode:
            self.files[-1].add(frame)

    def end_episode(self) -> None:
        self.episode += 1
        if self.per_episode:
            self.files[-1].close()
            self.files.append(self._new(f"{self.base}_ep{self.episode}.mp4"))

    def close(self) -> None:
        for f in self.files:
            f.close()


# ---- evaluation ----------------------------------------------------------------------------------------------
def evaluate_single(cfg: Config) -> tuple[list[tuple[float, int]], dict]:
    """Episodes [(return, length)] and the checkpoint info, evaluated in this process."""
    if cfg.seed is not None:
        torch.manual_seed(cfg.seed)  # sampled actions are reproducible too
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one observation at a time: more threads only add overhead
    try:
        return _play(cfg)
    finally:
        torch.set_num_threads(threads)


def _action_kind(cfg: Config) -> str:
    """How the evaluated policy acts, as the log line says it."""
    if cfg.algo == "DQN" and not cfg.eval_deterministic:
        return f"epsilon-greedy (--eval_epsilon={cfg.eval_epsilon})"
    return "deterministic" if cfg.eval_deterministic else "sampled"


def _play(cfg: Config) -> tuple[list[tuple[float, int]], dict]:
    env, render_mode, obs = open_eval_env(cfg)
    video = None
    try:
        # The spaces of the env evaluated on; a checkpoint that does not fit them fails to load.
        policy = load_policy(
            experiment_dir(cfg),
            device=torch_device(cfg.device),
            checkpoint=cfg.load_checkpoint_kind,
            policy_id=cfg.policy_index,
            obs_space=env.observation_space,
            action_space=env.action_space,
            eval_epsilon=cfg.eval_epsilon,
        )
        info = {
            "checkpoint": str(policy.checkpoint_path),
            "checkpoint_policy_version": policy.policy_version,
            "checkpoint_env_steps": policy.env_steps,
        }
        print(
            f"loaded {policy.checkpoint_path} (policy version {policy.policy_version}, {policy.env_steps} env steps)"
            f", {_action_kind(cfg)} actions"
            + (f", env overrides {cfg.eval_env_overrides}" if cfg.eval_env_overrides else ""),
            flush=True,
        )
        if render_mode == "rgb_array":
            fps = cfg.fps if cfg.fps > 0 else float(env.metadata.get("render_fps") or 30)
            video = VideoRecorder(
                experiment_dir(cfg), cfg.video_name, cfg.video_per_episode, int(cfg.video_frames), fps
            )
            video.add(render_frame(env))
        frame_period = 1.0 / cfg.fps if render_mode == "human" and cfg.fps > 0 else 0.0
        next_frame = time.monotonic() + frame_period
        if env_num_agents(env) > 1:
            return _play_multi_agent(cfg, env, policy, video, frame_period), info
        episodes: list[tuple[float, int]] = []
        state: State = policy.initial_state()
        ret, length, frames = 0.0, 0, 0
        try:
            while len(episodes) < cfg.max_num_episodes and frames < cfg.max_num_frames:
                action, state = policy.act(obs, state, deterministic=cfg.eval_deterministic)
                obs, reward, term, trunc, _ = env.step(action)
                ret, length, frames = ret + float(reward), length + 1, frames + 1
                if frame_period:
                    time.sleep(max(0.0, next_frame - time.monotonic()))
                    next_frame = max(next_frame + frame_period, time.monotonic())
                if video is not None and video.wants_frame:
                    video.add(render_frame(env))
                if term or trunc:
                    episodes.append((ret, length))
                    print(f"episode {len(episodes)}: reward {ret:.2f}, length {length}", flush=True)
                    ret, length = 0.0, 0
                    if video is not None:
                        video.end_episode()
                    if len(episodes) >= cfg.max_num_episodes or frames >= cfg.max_num_frames:
                        break
                    obs, _ = env.reset()
                    state = policy.initial_state()
                    if video is not None and video.wants_frame:
                        video.add(render_frame(env))
        except KeyboardInterrupt:
            notice(f"interrupted after {len(episodes)} finished episodes")
    finally:
        if video is not None:
            video.close()
            for p in video.paths:
                print(f"video: {p}")
        env.close()
    return episodes, info


def _play_multi_agent(cfg: Config, env: gym.Env, policy: Any, video: Any, frame_period: float) -> list:
    """A multi-agent env, every agent controlled by the policy: one env group column per agent (as in training);
    an episode is reported per agent. The env was reset with --seed by open_eval_env; the group resets it again with
    the same seed, so the first episode is the same."""
    group = EnvGroup([env], [cfg.seed], action_bounds=policy.action_bounds)
    group.reset()
    state = policy.initial_state(group.n)
    episodes: list[tuple[float, int]] = []
    frames = 0
    next_frame = time.monotonic() + frame_period
    try:
        while len(episodes) < cfg.max_num_episodes and frames < cfg.max_num_frames:
            actions, state = policy.act_rows(group.obs, state, deterministic=cfg.eval_deterministic)
            for ret, length in group.step(actions):
                episodes.append((ret, length))
                print(f"episode {len(episodes)}: reward {ret:.2f}, length {length}", flush=True)
            state = policy.reset_state(state, group.first)
            frames += 1
            if frame_period:
                time.sleep(max(0.0, next_frame - time.monotonic()))
                next_frame = max(next_frame + frame_period, time.monotonic())
            if video is not None:
                if group.env_reset[0]:
                    video.end_episode()
                if video.wants_frame:
                    video.add(render_frame(env))
    except KeyboardInterrupt:
        notice(f"interrupted after {len(episodes)} finished episodes")
    return episodes[: cfg.max_num_episodes]


class EvalRunner(Runner):
    """A Runner (with cfg.evaluation_run) that also remembers which checkpoint the learner loaded."""

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        self.loaded: dict = {}

    def _on_resumed(self, report: Report) -> None:
        if report.index == self.cfg.policy_index:
            self.loaded = dict(report.payload)
        super()._on_resumed(report)


def evaluate_parallel(cfg: Config) -> tuple[list[tuple[float, int]], dict]:
    """Through the runner: --num_workers actor processes x --num_envs_per_worker envs, policy workers acting
    (the mode when --eval_deterministic), a learner that only loads the checkpoint."""
    if cfg.save_video:
        raise EnjoyError("--save_video works in single-process evaluation only (leave out --num_workers)")
    if not cfg.no_render:
        notice("parallel evaluation is headless")
    cfg.evaluation_run = True
    cfg.sampler_only = True
    cfg.serial_mode = False  # a serial runner would write serial_state.pth into the experiment at the end
    cfg.decorrelate_envs_on_one_worker = False
    cfg.train_for_env_steps = 10**18  # the runner stops at --max_num_episodes / --max_num_frames
    cfg.train_for_seconds = 1e18
    cfg.stop_at_reward = None
    # Nothing may be written into the experiment: no periodic / best / milestone checkpoints, no nested evals.
    cfg.save_every_sec = 10**9
    cfg.save_best_after = float("inf")
    cfg.save_milestones_sec = -1
    cfg.eval_every_env_steps = -1
    runner = EvalRunner(cfg)
    rc = runner.run()
    if rc != 0:
        raise EnjoyError("parallel evaluation failed (see the log above)")
    # The first episodes to finish: with many envs running at once they are biased toward short episodes
    # (a long episode is still running when the short ones have finished and the count is reached).
    # With several policies every one plays (envs pass between them as in training); the chosen one's episodes count.
    episodes = runner.parts.progress.all_episodes[cfg.policy_index][: cfg.max_num_episodes]
    for i, (ret, length) in enumerate(episodes, 1):
        print(f"episode {i}: reward {ret:.2f}, length {length}")
    loaded = runner.loaded
    info = {
        "checkpoint": loaded.get("path"),
        "checkpoint_policy_version": loaded.get("version"),
        "checkpoint_env_steps": loaded.get("env_steps"),
    }
    return episodes, info


# ---- results -------------------------------------------------------------------------------------------------
def summarize(episodes: list[tuple[float, int]], cfg: Config, info: dict) -> dict:
    rewards = [float(r) for r, _ in episodes]
    lengths = [int(n) for _, n in episodes]

    def stat(values: list, fn) -> float | None:
        return float(fn(values)) if values else None  # JSON has no NaN: null when no episode finished

    return {
        "episodes": len(episodes),
        "reward_mean": stat(rewards, np.mean),
        "reward_std": stat(rewards, np.std),
        "length_mean": stat(lengths, np.mean),
        "length_std": stat(lengths, np.std),
        "rewards": rewards,
        "lengths": lengths,
        **info,
        "policy_index": cfg.policy_index,
        "deterministic": bool(cfg.eval_deterministic),
        "env_overrides": parse_env_overrides(cfg.eval_env_overrides),
        "load_checkpoint_kind": cfg.load_checkpoint_kind,
        "num_workers": cfg.num_workers if is_parallel(cfg) else 1,
    }


def write_results(results: dict, cfg: Config) -> Path:
    path = Path(cfg.eval_results_file) if cfg.eval_results_file else experiment_dir(cfg) / "eval_results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(results, indent=2) + "\n")
    os.replace(tmp, path)  # a reader (the periodic evaluator) never sees half a file
    return path


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_experiment_cfg(argv)
        check_checkpoint_exists(cfg)
        episodes, info = evaluate_parallel(cfg) if is_parallel(cfg) else evaluate_single(cfg)
    except (EnjoyError, FileNotFoundError, ValueError, RuntimeError, OSError) as e:
        if os.environ.get("SF_DEBUG"):
            raise
        print(f"enjoy: error: {_first_line(e)}", file=sys.stderr)
        return 1
    results = summarize(episodes, cfg, info)
    path = write_results(results, cfg)
    if not episodes:
        msg = f"no episode finished within --max_num_frames={int(cfg.max_num_frames)}"
        print(f"enjoy: error: {msg}", file=sys.stderr)
        print(f"results: {path}")
        return 1
    print(
        f"{results['episodes']} episodes: reward {results['reward_mean']:.2f} +- {results['reward_std']:.2f}, "
        f"length {results['length_mean']:.1f} +- {results['length_std']:.1f}"
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
