"""Checkpoint files of one policy: atomic writes (temp file, fsync, rename), newest-N retention, loading."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from sample_factory.config import Config

_NAME = re.compile(r"^checkpoint_(\d+)_(\d+)\.pth$")


class CheckpointError(RuntimeError):
    """Checkpoints cannot be read or written; the message says which and what to do (shown without traceback)."""

    user_facing = True


def checkpoint_dir(cfg: Config, policy_id: int) -> Path:
    return Path(cfg.train_dir) / cfg.experiment / f"checkpoint_p{policy_id}"


def list_checkpoints(directory: Path) -> list[Path]:
    """Oldest first, by policy version then env steps (the numbers in the name)."""
    found = [(tuple(map(int, m.groups())), p) for p in directory.glob("checkpoint_*.pth") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


_BEST = re.compile(r"^best_(\d+)_(\d+)_(.+)\.pth$")


def _atomic_save(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: readers see the old file set or the complete new file
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CheckpointError(f"could not write checkpoint {path}: {e.strerror or e}") from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_checkpoint(directory: Path, state: dict, version: int, env_steps: int, keep: int) -> Path:
    path = directory / f"checkpoint_{version:09d}_{env_steps}.pth"
    _atomic_save(path, state)
    for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        if old != path:
            old.unlink(missing_ok=True)
    return path


def save_best_checkpoint(directory: Path, state: dict, version: int, env_steps: int, metric: float) -> Path:
    """The single best checkpoint so far (by the run's --save_best_metric); the previous best is removed."""
    path = directory / f"best_{version:09d}_{env_steps}_{metric:.4f}.pth"
    previous = list_best_checkpoints(directory)
    _atomic_save(path, state)
    for old in previous:
        if old != path:
            old.unlink(missing_ok=True)
    return path


def save_milestone(directory: Path, state: dict, version: int, env_steps: int) -> Path:
    """Milestones are kept forever, outside the newest-N rotation."""
    path = directory / "milestones" / f"checkpoint_{version:09d}_{env_steps}.pth"
    _atomic_save(path, state)
    return path


def list_best_checkpoints(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("best_*.pth") if _BEST.match(p.name))


def best_metric_of(path: Path) -> float:
    return float(_BEST.match(path.name).group(3))


def load_policy_checkpoint(
    cfg: Config, policy_id: int, map_location: Any = "cpu", quiet: bool = False
) -> tuple[dict, Path] | None:
    """The checkpoint a run starts from: the latest one, or for an evaluation with --load_checkpoint_kind=best the
    best one. An evaluation without a checkpoint is an error; a training run without one starts fresh."""
    directory = checkpoint_dir(cfg, policy_id)
    evaluating = cfg.evaluation_run
    if evaluating and cfg.load_checkpoint_kind == "best":
        best = list_best_checkpoints(directory)
        if not best:
            raise FileNotFoundError(f"no best checkpoint (best_*.pth) in {directory}")
        return torch.load(best[-1], map_location=map_location, weights_only=False), best[-1]
    loaded = load_latest_checkpoint(directory, map_location=map_location, quiet=quiet)
    if loaded is None and evaluating:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    return loaded


def load_latest_checkpoint(directory: Path, map_location: Any = "cpu", quiet: bool = False) -> tuple[dict, Path] | None:
    """The newest checkpoint that loads; unreadable newer files are reported and skipped, never ignored silently."""
    errors = []
    for path in reversed(list_checkpoints(directory)):
        try:
            return torch.load(path, map_location=map_location, weights_only=False), path
        except Exception as e:
            errors.append(f"{path.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            if not quiet:
                print(
                    f"[sample_factory] checkpoint {path} failed to load ({type(e).__name__}), trying the previous one"
                )
    if errors:
        raise CheckpointError(
            f"no checkpoint could be loaded from {directory} ({'; '.join(errors)}); move the broken files away to "
            f"resume from older ones, or start over with --restart_behavior=restart"
        )
    return None
