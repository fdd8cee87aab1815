"""sample_factory: asynchronous PPO (APPO) and Ape-X DQN training. Importing the package imports nothing else, so
train.py and enjoy.py can tell a missing install from a bug before the first dependency is imported."""

from __future__ import annotations

import sys
from pathlib import Path


def missing_dependency(error: ModuleNotFoundError, script: str) -> str | None:
    """The line to exit with when `script` (train.py, enjoy.py) runs under a Python without the project's
    dependencies (`python3 train.py` outside the virtualenv); None when the missing module is ours (a bug to show)."""
    if not error.name or error.name.split(".")[0] == "sample_factory":
        return None
    venv = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python"
    how = f"run .venv/bin/python {script}" if venv.exists() else f"run make venv, then .venv/bin/python {script}"
    return f"{script}: error: {error.name} is not installed for {sys.executable}: {how}"
