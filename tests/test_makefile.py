"""`make train`: CartPole's env, experiment and stop condition only when TRAIN_ARGS names no env (issue 33 item 3)."""

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from sample_factory.config import parse_cfg

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def train_argv(train_args: str, extras: str = "") -> list[str]:
    """The train.py arguments `make train` would run (make -n: print, run nothing; -o: skip the install step)."""
    stamp = "/nonexistent/.venv/.installed-train" + (f"-{extras}" if extras else "")
    cmd = ["make", "-n", "-o", stamp, "train", "VENV=/nonexistent/.venv", f"TRAIN_ARGS={train_args}"]
    if extras:
        cmd.append(f"EXTRAS={extras}")
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    lines = [line for line in out.splitlines() if " train.py" in line]
    assert len(lines) == 1, out
    argv = shlex.split(lines[0])
    assert argv[1] == "train.py", argv
    return argv[2:]


def test_make_train_defaults_to_cartpole_until_solved():
    argv = train_argv("--num_workers=2")
    cfg = parse_cfg(argv)
    assert (cfg.env, cfg.experiment, cfg.stop_at_reward, cfg.num_workers) == ("CartPole-v1", "cartpole", 475.0, 2)


@pytest.mark.parametrize("env_args", ["--env=atari_pong --experiment=pong", "--env atari_pong --experiment pong"])
def test_make_train_with_an_env_drops_the_cartpole_defaults(env_args):
    """The README's example: the Pong run must not be saved with CartPole's --stop_at_reward=475."""
    argv = train_argv(env_args, extras="atari")
    assert not any(a.startswith(("--stop_at_reward", "--env=CartPole")) or a == "CartPole-v1" for a in argv), argv
    cfg = parse_cfg(argv)
    assert (cfg.env, cfg.experiment, cfg.train_dir) == ("atari_pong", "pong", "./train_dir")
    assert cfg.stop_at_reward == parse_cfg(["--env=atari_pong"]).stop_at_reward  # the option's own default


def test_make_train_env_prefixed_flags_are_not_an_env():
    """--env_frameskip and the like do not name an env: CartPole stays."""
    cfg = parse_cfg(train_argv("--env_frameskip=2"))
    assert (cfg.env, cfg.stop_at_reward) == ("CartPole-v1", 475.0)


def _dry_run(target: str) -> list[str]:
    cmd = ["make", "-n", "-o", "/nonexistent/.venv/.installed", target, "VENV=/nonexistent/.venv"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    return out.replace("\\\n", " ").splitlines()


def test_make_check_is_lint_and_the_unit_tier_and_make_test_runs_everything():
    """Two tiers (docs/testing.md): `make check` = lint (ruff, mypy) + `pytest --unit`; `make test` = the same lint +
    every test but the slow ones, as CI runs it."""
    check, test = _dry_run("check"), _dry_run("test")
    for lines in (check, test):
        assert any(line.endswith("-m mypy") for line in lines), lines
        assert any("ruff check" in line for line in lines), lines
    (unit,) = [line for line in check if "-m pytest tests" in line]
    assert " --unit " in unit, unit
    (full,) = [line for line in test if "-m pytest tests" in line]
    assert "--unit" not in full and '-m "not slow"' in full, full
