"""The DQN step's before/after tool trains the old and the new step side by side and sees whether their math
differs."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from benchmarks import dqn_step_ab

pytestmark = [
    pytest.mark.process,  # `git show`
    pytest.mark.skipif(
        shutil.which("git") is None or not (dqn_step_ab.ROOT / ".git").exists(), reason="needs a git checkout"
    ),
]


def test_the_same_step_is_bit_identical_and_timed(capsys, monkeypatch):
    monkeypatch.setattr(dqn_step_ab, "dqn_now", dqn_step_ab.old_dqn("HEAD"))  # HEAD against itself, whatever is edited
    assert dqn_step_ab.main(["--old=HEAD", "--env=CartPole-v1", "--iterations=1"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert r["identical_weights"] and r["identical_stats"] and r["identical_priorities"], r
    assert r["sgd_steps"] > 0 and r["new_over_old"] > 0 and r["sample_new_over_old"] > 0, r


def test_a_changed_target_is_seen(monkeypatch):
    """A step whose double-Q target moves by a float's last bits no longer matches the old one."""
    from sample_factory.algo import dqn

    real = dqn.double_q_target
    monkeypatch.setattr(dqn, "double_q_target", lambda *a: torch.nextafter(real(*a), torch.tensor(float("inf"))))
    r = dqn_step_ab.compare("HEAD", "CartPole-v1", 1)
    assert not r["identical_weights"] and not r["identical_stats"], r
