"""The episode windows (the last --stats_avg episodes' rewards, lengths and extra statistics) saved beside each
checkpoint, so a resumed run's mean reward, --stop_at_reward and best checkpoint go on from the episodes that led to
the checkpoint instead of from an empty window (a resumed Pong run otherwise reports the mean of its first few
episodes, and a frames-to-score count would start over)."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any

WINDOWS_FILE = "episode_windows.json"  # in checkpoint_p<N>/: {env frames of a checkpoint: its policy's window}
KEEP = 8  # windows kept per file: the newest checkpoints' (a resume takes the newest checkpoint)
HISTORY = 256  # window changes remembered per policy: the tracker runs ahead of the learner's checkpoints


class WindowHistory:
    """One policy's window as it was at each env-frame count where it changed, so the window as of a checkpoint's
    env frames can be written after the tracker has counted past them (the actors run ahead of the learner)."""

    def __init__(self) -> None:
        self.changes: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(maxlen=HISTORY)

    def record(self, env_frames: int, window: dict[str, Any]) -> None:
        self.changes.append((env_frames, window))

    def at(self, env_frames: int) -> dict[str, Any] | None:
        """The window after the last change at or before `env_frames`; empty before any change; None when that change
        is older than the history keeps."""
        before = [w for s, w in self.changes if s <= env_frames]
        if before:
            return before[-1]
        if len(self.changes) < (self.changes.maxlen or 0):
            return {"episodes": [], "stats": {}}
        return None


def checkpoint_env_frames(path: str | Path) -> int | None:
    """The env frames in a checkpoint's name (checkpoint_<version>_<env frames>.pth)."""
    parts = Path(path).stem.split("_")
    return int(parts[-1]) if len(parts) == 3 and parts[-1].isdigit() else None


def save_window(ckpt_dir: Path, env_frames: int, window: dict[str, Any]) -> None:
    """Add the window of the checkpoint at `env_frames` to ckpt_dir's file (the oldest dropped past KEEP)."""
    windows = load_windows(ckpt_dir)
    windows[str(env_frames)] = window
    newest = sorted(windows, key=int)[-KEEP:]
    path = ckpt_dir / WINDOWS_FILE
    tmp = ckpt_dir / f".{WINDOWS_FILE}.tmp"
    try:
        tmp.write_text(json.dumps({k: windows[k] for k in newest}) + "\n")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a part-written file on a full disk
        raise


def load_windows(ckpt_dir: Path) -> dict[str, dict[str, Any]]:
    """{env frames: window} from ckpt_dir's file; {} when it is missing or unreadable (a run from before the file
    existed, or a part-written one): its resume starts with an empty window."""
    try:
        data = json.loads((ckpt_dir / WINDOWS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
