"""A callback that fills the file system of the checkpoints after the first one is written (the full-disk test in
test_checkpoint_safety.py mounts a tiny tmpfs as the checkpoint folder)."""

from __future__ import annotations

from pathlib import Path

from sample_factory.experiment.callbacks import Callbacks


class FillDisk(Callbacks):
    def __init__(self) -> None:
        self.filled = False

    def on_checkpoint(self, policy_id: int, path: str, kind: str) -> None:
        if self.filled:
            return
        self.filled = True
        from tests.experiment.test_checkpoint_safety import fill

        fill(Path(path).parent)
