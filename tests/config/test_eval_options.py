"""The evaluation options that need parsing beyond their type: --eval_env_overrides (name=value pairs of env options)
and --eval_policies (all, or policy indices), checked when the command line is parsed."""

from __future__ import annotations

import pytest

from sample_factory.config import ConfigError, overridable_env_options, parse_cfg, parse_env_overrides
from sample_factory.config import parse_eval_policies as policies

BASE = ["--env=SomeCustomEnv-v0", "--num_workers=2"]


def test_overrides_parse_to_typed_values_in_order():
    assert parse_env_overrides(None) == {} and parse_env_overrides("") == {} and parse_env_overrides(" , ") == {}
    got = parse_env_overrides(" env_sticky_actions = 0 ,env_frameskip=4,seed=7,env=tests.x:Y-v0 ")
    assert got == {"env_sticky_actions": 0.0, "env_frameskip": 4, "seed": 7, "env": "tests.x:Y-v0"}
    assert [type(v) for v in got.values()] == [float, int, int, str]
    assert list(got) == ["env_sticky_actions", "env_frameskip", "seed", "env"]


def test_overridable_options_are_the_env_options():
    allowed = overridable_env_options()
    assert {"env", "seed", "env_frameskip", "env_framestack", "env_sticky_actions"} <= set(allowed)
    assert not {"env_episodic_life", "env_backend", "env_seed_offset", "learning_rate"} & set(allowed)


@pytest.mark.parametrize(
    "text, message",
    [
        ("env_stiky_actions=0", "unknown option 'env_stiky_actions' (did you mean env_sticky_actions?)"),
        ("zzzz=1", "unknown option 'zzzz' (allowed: env, seed, env_frameskip"),
        ("learning_rate=0.1", "learning_rate is not an env option (allowed: env, seed, env_frameskip"),
        ("env_episodic_life=True", "env_episodic_life cannot be overridden for evaluation: evaluation always plays"),
        ("env_frameskip", "'env_frameskip' is not name=value"),
        ("=3", "'=3' is not name=value"),
        ("env_frameskip=four", "env_frameskip='four' is not a valid int"),
        ("env_sticky_actions=", "env_sticky_actions='' is not a valid float"),
        ("seed=1,seed=2", "seed is given twice"),
    ],
)
def test_bad_overrides_are_one_line_errors(text, message):
    with pytest.raises(ConfigError) as e:
        parse_env_overrides(text)
    assert str(e.value).startswith("--eval_env_overrides: ") and message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_eval_policies():
    assert policies("all", 3) == [0, 1, 2] and policies(" ALL ", 1) == [0]
    assert policies("2,0", 3) == [0, 2] and policies("1", 2) == [1]
    for text, message in [
        ("1,3", "--eval_policies: no policy 3 (--num_policies=3: 0..2)"),
        ("-1", "--eval_policies: no policy -1"),
        ("", "--eval_policies is empty"),
        ("first", "--eval_policies must be all or policy indices like 0,2, got 'first'"),
        ("0,0", "--eval_policies names a policy twice"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            policies(text, 3)


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--eval_env_overrides=env_frameskip=x", "--eval_env_overrides: env_frameskip='x' is not a valid int"),
        ("--eval_env_overrides=gamma=0.9", "--eval_env_overrides: gamma is not an env option"),
        ("--eval_policies=1", "--eval_policies: no policy 1 (--num_policies=1: 0..0)"),
    ],
)
def test_checked_at_parse_time(capsys, flag, message):
    with pytest.raises(SystemExit) as exc:
        parse_cfg([*BASE, flag])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"train.py: error: {message}"), lines


def test_good_values_are_kept_as_typed():
    cfg = parse_cfg([*BASE, "--eval_env_overrides=env_sticky_actions=0", "--eval_policies=all"])
    assert cfg.eval_env_overrides == "env_sticky_actions=0" and cfg.eval_policies == "all"
    assert cfg.env_sticky_actions == 0.25  # training keeps its own value
