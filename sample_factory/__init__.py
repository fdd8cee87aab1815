"""Sample Factory: asynchronous PPO/APPO and Ape-X DQN on one machine (or a Ray cluster).

The user API, importable from the top: register an env (`register_env`), an encoder (`register_encoder`) and
callbacks (`Callbacks`, `register_callbacks`), train (`train_main`, what train.py runs; `parse_cfg` and `Config` for
the flags as an object) and load a trained policy (`load_policy`, `Policy`). Each name is imported when first used,
so `import sample_factory` stays cheap (no torch) and the launcher and the checks before start stay fast."""

from __future__ import annotations

import importlib
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
