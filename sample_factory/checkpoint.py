"""Checkpoint files of one policy: atomic writes (temp file, fsync, rename), newest-N retention, loading."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

_NAME = re.compile(r"^checkpoint_(\d+)_(\d+)\.pth$")


def checkpoint_dir(cfg: Any, policy_id: int) -> Path:
    return Path(cfg.train_dir) / cfg.experiment / f"checkpoint_p{policy_id}"


def list_checkpoints(directory: Path) -> list[Path]:
    """Oldest first, by policy version then env steps (the numbers in the name)."""
    found = [(tuple(map(int, m.groups())), p) for p in directory.glob("checkpoint_*.pth") if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def save_checkpoint(directory: Path, state: dict, version: int, env_steps: int, keep: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"checkpoint_{version:09d}_{env_steps}.pth"
    tmp = directory / f".{path.name}.tmp"
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic: readers see the old file set or the complete new file
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def load_latest_checkpoint(directory: Path, map_location: Any = "cpu") -> tuple[dict, Path] | None:
    """The newest checkpoint that loads; unreadable newer files are reported and skipped, never ignored silently."""
    errors = []
    for path in reversed(list_checkpoints(directory)):
        try:
            return torch.load(path, map_location=map_location, weights_only=False), path
        except Exception as e:
            errors.append(f"{path}: {type(e).__name__}: {e}")
            print(f"[sample_factory] checkpoint {path} failed to load ({type(e).__name__}), trying the previous one")
    if errors:
        raise RuntimeError("no checkpoint could be loaded: " + "; ".join(errors))
    return None
