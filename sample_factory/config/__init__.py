"""Configuration: every option declared once, in typed groups (options.py and options_<concept>.py), the typed config
components take (cfg.py: every group merged), env-family presets as tables (presets.py) and the choice of a run's
preset (env_defaults.py), parsing (parse.py) and checks (checks.py), and the generated reference (reference.py)."""

from sample_factory.config.cfg import Config, reproducible
from sample_factory.config.checks import (
    MAX_EXPERIMENT_NAME,
    experiment_name_problem,
    finalize_cfg,
    overridable_env_options,
    parse_env_overrides,
    parse_eval_policies,
)
from sample_factory.config.env_defaults import preset_name_for_env
from sample_factory.config.options import OPTIONS, ConfigError, Option, all_options, int_list, str2bool
from sample_factory.config.parse import build_parser, parse_cfg, strip_flags, suggest_flag, typed_flags
from sample_factory.config.presets import PRESETS

__all__ = [
    "OPTIONS",
    "PRESETS",
    "MAX_EXPERIMENT_NAME",
    "Config",
    "ConfigError",
    "Option",
    "all_options",
    "build_parser",
    "experiment_name_problem",
    "finalize_cfg",
    "int_list",
    "overridable_env_options",
    "parse_cfg",
    "parse_env_overrides",
    "parse_eval_policies",
    "preset_name_for_env",
    "reproducible",
    "str2bool",
    "strip_flags",
    "suggest_flag",
    "typed_flags",
]
