"""Checkpoint files of one policy: atomic writes (temp file, fsync, rename), newest-N retention, loading.

Loading never runs code from a file: torch.load(weights_only=True) builds only tensors, plain Python values and
containers, which is all a checkpoint holds (replay buffers included); a file that asks for anything else is
refused (UnsafeCheckpointError), never unpickled.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sample_factory.config import Config
from sample_factory.experiment.folder import UNSAFE_ON_RESUME, experiment_dir, fsync_dir

_NAME = re.compile(r"^checkpoint_(\d+)_(\d+)\.pth$")


class CheckpointError(RuntimeError):
    """Checkpoints cannot be read or written; the message says which and what to do (shown without traceback)."""

    user_facing = True


class UnsafeCheckpointError(CheckpointError):
    """The file asks the unpickler for a class or function outside what checkpoints hold: it may be crafted to run
    code, so it is refused instead of skipped (an older checkpoint is not resumed from behind the user's back)."""


# What the weights-only unpickler says when a file asks for more than tensors and plain values.
_UNSAFE = re.compile(r"GLOBAL (\S+)|allowlisted|unrecognized function")


def load_checkpoint_file(path: Path, map_location: Any = "cpu", mmap: bool = False) -> dict:
    """One checkpoint file, loaded with weights_only=True. A file that needs more is refused with UnsafeCheckpointError
    (one line naming what it asked for); an unreadable one raises as torch does (truncated, not a checkpoint).
    `mmap`: tensors are mapped, read from disk only where used (the runner needs the weights, not the replay
    buffer that may be most of the file)."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = _UNSAFE.search(str(e))
        if found is None:  # not a torch zip file at all (garbage, a raw pickle): unreadable, nothing was run
            raise CheckpointError(f"{path} is not a checkpoint file") from None
        what = found.group(1) or "an object outside tensors and plain values"
        raise UnsafeCheckpointError(
            f"refused to load {path}: it is not a plain checkpoint (unpickling it would call {what}, which can run "
            f"any code); delete it unless you made it yourself"
        ) from None


def checkpoint_dir(cfg: Config, policy_id: int) -> Path:
    return experiment_dir(cfg) / f"checkpoint_p{policy_id}"


def list_checkpoints(directory: Path) -> list[Path]:
    """Oldest first, by policy version then env frames (the numbers in the name)."""
    found = [(tuple(map(int, m.groups())), p) for p in directory.glob("checkpoint_*.pth") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def checkpoint_env_frames(path: str | Path) -> int:
    """The env frames in a checkpoint's name (checkpoint_<version>_<env frames>.pth)."""
    return int(Path(path).stem.split("_")[2])


_BEST = re.compile(r"^best_(\d+)_(\d+)_(.+)\.pth$")


def _write_failure(e: BaseException) -> str | None:
    """Why a write failed, if `e` is a failed write: an OSError, or torch's RuntimeError from its zip writer, which
    carries the OSError (ENOSPC on a full disk) only as its context. None for any other error."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError):
            return seen.strerror or str(seen)
        seen = seen.__cause__ or seen.__context__
    if isinstance(e, RuntimeError) and ("PytorchStreamWriter" in str(e) or "inline_container" in str(e)):
        return f"the write failed ({str(e).splitlines()[0]})"
    return None


def _atomic_save(path: Path, state: dict) -> None:
    tmp = path.parent / f".{path.name}.tmp"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: readers see the old file set or the complete new file
        fsync_dir(path.parent)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        why = _write_failure(e) if isinstance(e, Exception) else None
        if why is None:
            raise
        raise CheckpointError(f"could not write checkpoint {path}: {why}; the previous checkpoints are kept") from e


def remove_partial_writes(directory: Path) -> list[Path]:
    """Remove the temp files of checkpoints whose write never finished (a run killed while saving; with a replay
    buffer they hold gigabytes). Only for the run that holds the experiment lock: no one else writes there."""
    removed = []
    for tmp in [*directory.glob(".*.pth.tmp"), *directory.glob("milestones/.*.pth.tmp")]:
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:
            pass
    return removed


def save_checkpoint(directory: Path, state: dict, version: int, env_frames: int, keep: int) -> Path:
    path = directory / f"checkpoint_{version:09d}_{env_frames}.pth"
    _atomic_save(path, state)
    for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        if old != path:
            old.unlink(missing_ok=True)
    return path


def save_best_checkpoint(directory: Path, state: dict, version: int, env_frames: int, metric: float) -> Path:
    """The single best checkpoint so far (by the run's --save_best_metric); the previous best is removed."""
    path = directory / f"best_{version:09d}_{env_frames}_{metric:.4f}.pth"
    previous = list_best_checkpoints(directory)
    _atomic_save(path, state)
    for old in previous:
        if old != path:
            old.unlink(missing_ok=True)
    return path


def save_milestone(directory: Path, state: dict, version: int, env_frames: int) -> Path:
    """Milestones are kept forever, outside the newest-N rotation."""
    path = directory / "milestones" / f"checkpoint_{version:09d}_{env_frames}.pth"
    _atomic_save(path, state)
    return path


def list_best_checkpoints(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("best_*.pth") if _BEST.match(p.name))


def best_metric_of(path: Path) -> float:
    m = _BEST.match(path.name)
    if m is None:
        raise ValueError(f"{path.name} is not the name of a best checkpoint")
    return float(m.group(3))


# Where the model's parameters differ from a checkpoint's, the flags among these that changed are named.
_SHAPERS = ("env_", "encoder_", "rnn_", "use_rnn", "nonlinearity", "actor_critic_share_weights", "adaptive_stddev")


def check_model_fits(cfg: Config, model: torch.nn.Module, state: dict, path: Path, resuming: bool = True) -> None:
    """Refuse, with one line naming the flag, a checkpoint this run's model cannot continue from: counters that are
    not counts, a flag that never changes on resume (folder.UNSAFE_ON_RESUME; `resuming` only) that differs from
    the one the checkpoint was trained with, or a model whose parameter names or shapes differ from the
    checkpoint's. Called before any component starts."""
    for key in ("policy_version", "env_steps"):  # "env_steps" holds env frames
        value = state.get(key)
        if type(value) is not int or value < 0:  # the learner names its next checkpoint after them
            raise CheckpointError(f"{path}: {key} is {value!r}, not a count: not a checkpoint of this project")
    saved_cfg = state.get("cfg")
    trained: dict[str, Any] = saved_cfg if isinstance(saved_cfg, dict) else {}
    now = vars(cfg)
    for key in UNSAFE_ON_RESUME if resuming else ():
        if key in trained and key in now and trained[key] != now[key]:
            raise CheckpointError(
                f"{path} was trained with --{key}={trained[key]!r}, this run has --{key}={now[key]!r}: it cannot "
                f"change on resume; use the checkpoint's value, another --experiment or --restart_behavior=restart"
            )
    saved = state.get("model")
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path} holds no model weights ('model'); move it aside to resume from an older one")
    ours = model.state_dict()
    why = next(
        (
            f"{name} has shape {tuple(saved[name].shape)} in the checkpoint, {tuple(ours[name].shape)} here"
            for name in ours
            if name in saved and hasattr(saved[name], "shape") and saved[name].shape != ours[name].shape
        ),
        None,
    )
    missing, extra = sorted(set(ours) - set(saved)), sorted(set(saved) - set(ours))
    if why is None and (missing or extra):
        why = f"parameter {(missing or extra)[0]} is {'missing from' if missing else 'only in'} the checkpoint"
    if why is None:
        return
    changed = [k for k in sorted(now) if k.startswith(_SHAPERS) and k in trained and trained[k] != now[k]]
    flags = ", ".join(f"--{k}={now[k]!r} (trained with {trained[k]!r})" for k in changed) or "flags of this run"
    raise CheckpointError(
        f"{path} does not fit the model of {flags}: {why}; the model's flags cannot change on resume: use the "
        f"checkpoint's values, another --experiment or --restart_behavior=restart"
    )


def newest_checkpoint_since(cfg: Config, policy_id: int, started: float) -> Path | None:
    """The policy's newest checkpoint on disk written at or after `started` (time.time()): what a run wrote, even
    where the learner was killed right after saving or its report was lost. None: none, or a file was removed while
    listing (--keep_checkpoints)."""
    try:
        ours = [c for c in list_checkpoints(checkpoint_dir(cfg, policy_id)) if c.stat().st_mtime >= started]
    except OSError:
        return None
    return ours[-1] if ours else None


def load_policy_checkpoint(
    cfg: Config,
    policy_id: int,
    map_location: Any = "cpu",
    quiet: bool = False,
    log: Callable[[str], None] | None = None,
    mmap: bool = False,
) -> tuple[dict, Path] | None:
    """The checkpoint a run starts from: the latest one, or for an evaluation with --load_checkpoint_kind=best the
    best one. An evaluation without a checkpoint is an error; a training run without one starts fresh. A training
    run (which holds the experiment lock) moves broken newer files aside, so that they never count towards
    --keep_checkpoints. `log`: where its lines go (the run's log, so sf_log.txt keeps them too)."""
    directory = checkpoint_dir(cfg, policy_id)
    evaluating = cfg.evaluation_run
    if evaluating and cfg.load_checkpoint_kind == "best":
        best = list_best_checkpoints(directory)
        if not best:
            raise FileNotFoundError(f"no best checkpoint (best_*.pth) in {directory}")
        return load_checkpoint_file(best[-1], map_location, mmap), best[-1]
    loaded = load_latest_checkpoint(directory, map_location, quiet, set_aside=not evaluating, log=log, mmap=mmap)
    if loaded is None and evaluating:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    return loaded


# Errors of reading a file that say nothing about its contents: an I/O error, no permission, no memory, a busy or
# stale network file system. (A truncated file gives EINVAL, EOFError or the zip reader's RuntimeError.)
_TRANSIENT_ERRNOS = {
    errno.EIO,
    errno.EACCES,
    errno.EPERM,
    errno.ENOMEM,
    errno.EAGAIN,
    errno.EBUSY,
    errno.EMFILE,
    errno.ENFILE,
    errno.ESTALE,
    errno.ETIMEDOUT,
    errno.EINTR,
}


def _transient_read_error(e: BaseException) -> str | None:
    """Why loading failed, if it failed for a reason that may pass (MemoryError, an OSError above, also as the
    cause or context of torch's own error); None where the file itself is unreadable."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, MemoryError):
            return "out of memory (MemoryError)"
        if isinstance(seen, OSError) and seen.errno in _TRANSIENT_ERRNOS:
            return f"{type(seen).__name__}: {seen.strerror or seen}"
        seen = seen.__cause__ or seen.__context__
    return None


def _print(line: str) -> None:
    print(f"[sample_factory] {line}")


def load_latest_checkpoint(
    directory: Path,
    map_location: Any = "cpu",
    quiet: bool = False,
    set_aside: bool = False,
    log: Callable[[str], None] | None = None,
    mmap: bool = False,
) -> tuple[dict, Path] | None:
    """The newest checkpoint that loads; unreadable newer files are reported and skipped, never ignored silently.
    With `set_aside` (only the run that owns the folder) they are renamed to <name>.corrupt once an older one
    loaded: rotation would otherwise keep them as the newest and delete the good file. A file that would run code
    is refused (UnsafeCheckpointError), not skipped. `log`: where its lines go (default: stdout)."""
    log = log or _print
    errors, broken = [], []
    for path in reversed(list_checkpoints(directory)):
        try:
            state = load_checkpoint_file(path, map_location, mmap)
        except UnsafeCheckpointError:
            raise
        except Exception as e:
            if (why := _transient_read_error(e)) is not None:  # the file may be fine: stop, move nothing
                raise CheckpointError(
                    f"could not read checkpoint {path}: {why}; it is left as it is and the run did not start (an "
                    f"older checkpoint is not used behind your back): fix the cause and run the same command again"
                ) from None
            errors.append(f"{path.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            if not quiet:
                log(f"checkpoint {path} failed to load ({type(e).__name__}), trying the previous one")
            if not isinstance(e, FileNotFoundError):  # a file rotated away meanwhile is not broken
                broken.append(path)
            continue
        for bad in broken if set_aside else ():
            aside = bad.with_name(bad.name + ".corrupt")
            os.replace(bad, aside)
            log(f"moved the unreadable checkpoint {bad.name} aside to {aside.name}")
        return state, path
    if errors:
        raise CheckpointError(
            f"no checkpoint could be loaded from {directory} ({'; '.join(errors)}); move the broken files away to "
            f"resume from older ones, or start over with --restart_behavior=restart"
        )
    return None
