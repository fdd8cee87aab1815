"""Install hints (issue 33 item 9): one form everywhere, the README's, formatted by config/extras.py:install_hint."""

import ast
import re
from pathlib import Path

import gymnasium as gym
import pytest

from sample_factory.config import parse_cfg
from sample_factory.config.extras import install_hint
from sample_factory.envs.env_utils import make_env

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "sample_factory"
# the helper itself, and the tools that really run pip (a throwaway venv; SF2's wheels into a private folder), not hints
HINT_FREE_EXEMPT = {
    PACKAGE / "config" / "extras.py",
    PACKAGE / "tools" / "throwaway_venv.py",
    PACKAGE / "tools" / "benchmark_sf2.py",
}


def _extras_in_setup() -> set[str]:
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "EXTRAS_REQUIRE" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no EXTRAS_REQUIRE")


def test_install_hint_is_the_readme_form():
    hint = install_hint("atari")
    assert hint == ".venv/bin/pip install -c constraints.txt -e '.[atari]'"
    assert hint in (REPO / "README.md").read_text()
    assert install_hint() == ".venv/bin/pip install -c constraints.txt -e ."
    assert install_hint(packages=("pettingzoo[sisl]",)) == ".venv/bin/pip install -c constraints.txt 'pettingzoo[sisl]'"


def test_every_install_hint_in_the_package_uses_install_hint():
    """No module writes a pip command of its own, and every extra a hint names exists in setup.py."""
    own = [
        f"{p.relative_to(REPO)}:{i}"
        for p in sorted(PACKAGE.rglob("*.py"))
        if p not in HINT_FREE_EXEMPT
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"pip3? install", line)
    ]
    assert not own, f"write install hints with sample_factory.config.extras.install_hint: {own}"
    extras = _extras_in_setup()
    named = {
        node.args[0].value
        for p in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "install_hint"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert named and named <= extras, named - extras


def test_gymnasium_pip_command_is_replaced_by_ours(monkeypatch):
    """MuJoCo's error named two commands (gymnasium's and ours): only ours remains."""

    def missing(*args, **kwargs):
        raise gym.error.DependencyNotInstalled('MuJoCo is not installed, run `pip install "gymnasium[mujoco]"`')

    monkeypatch.setattr(gym, "make", missing)
    with pytest.raises(ValueError) as e:
        make_env(parse_cfg(["--env=mujoco_halfcheetah"]))
    assert str(e.value).count("pip install") == 1 and str(e.value).endswith(install_hint("mujoco")), str(e.value)
