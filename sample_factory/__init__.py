"""Sample Factory: asynchronous PPO/APPO and Ape-X DQN on one machine (or a Ray cluster).

The user API, importable from the top: register an env (`register_env`), an encoder (`register_encoder`) and
callbacks (`Callbacks`, `register_callbacks`), train (`train_main`, what train.py runs; `parse_cfg` and `Config` for
the flags as an object) and load a trained policy (`load_policy`, `Policy`). Each name is imported when first used,
so `import sample_factory` stays cheap (no torch) and imports no dependency: train.py and enjoy.py can tell a
missing install (`missing_dependency`) from a bug."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sample_factory.config import Config, parse_cfg
    from sample_factory.envs.env_utils import register_env
    from sample_factory.evaluation.policy_api import Policy, load_policy
    from sample_factory.experiment.callbacks import Callbacks, register_callbacks
    from sample_factory.model.encoders import register_encoder
    from sample_factory.train import main as train_main

# exported name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    "Config": ("sample_factory.config", "Config"),
    "parse_cfg": ("sample_factory.config", "parse_cfg"),
    "register_env": ("sample_factory.envs.env_utils", "register_env"),
    "register_encoder": ("sample_factory.model.encoders", "register_encoder"),
    "Callbacks": ("sample_factory.experiment.callbacks", "Callbacks"),
    "register_callbacks": ("sample_factory.experiment.callbacks", "register_callbacks"),
    "train_main": ("sample_factory.train", "main"),
    "load_policy": ("sample_factory.evaluation.policy_api", "load_policy"),
    "Policy": ("sample_factory.evaluation.policy_api", "Policy"),
}

__all__ = [
    "Callbacks",
    "Config",
    "Policy",
    "load_policy",
    "parse_cfg",
    "register_callbacks",
    "register_encoder",
    "register_env",
    "train_main",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'sample_factory' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def missing_dependency(error: ModuleNotFoundError, script: str) -> str | None:
    """The line to exit with when `script` (train.py, enjoy.py) runs under a Python without the project's
    dependencies (`python3 train.py` outside the virtualenv); None when the missing module is ours (a bug to show)."""
    if not error.name or error.name.split(".")[0] == "sample_factory":
        return None
    venv = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python"
    how = f"run .venv/bin/python {script}" if venv.exists() else f"run make venv, then .venv/bin/python {script}"
    return f"{script}: error: {error.name} is not installed for {sys.executable}: {how}"
