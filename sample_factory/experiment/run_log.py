"""The runner's log: what a run prints, also kept in <experiment>/sf_log.txt."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


class RunLog:
    """The runner's lines: to stdout, and to <experiment>/sf_log.txt once the folder exists (appended on resume, as
    Sample Factory does). A stdout whose reader went away (a closed pipe, a killed `tee`, a launcher that died) must
    not stop a run: its lines then go to the file only."""

    def __init__(self) -> None:
        self.file: Any = None
        self.stdout_ok = True

    def __call__(self, msg: str, console: bool = True) -> None:
        """`console=False`: the file only (details a reader of the console does not need each time)."""
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        if console and self.stdout_ok:
            try:
                print(line, flush=True)
            except BrokenPipeError:
                self.stdout_ok = False
                # fd 1 to /dev/null: later writes, and the interpreter's flush at exit, no longer raise
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.close(devnull)
        if self.file is not None:
            try:
                self.file.write(line + "\n")
                self.file.flush()
            except OSError as e:  # a full disk must not turn every line of the run's shutdown into an error
                file, self.file = self.file, None
                try:
                    file.close()
                except OSError:
                    pass
                self(f"WARNING: cannot write {file.name} ({e.strerror or e}): the log goes to the console only")

    def open(self, path: Path) -> None:
        self.close()
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run, closed in close()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


log = RunLog()
