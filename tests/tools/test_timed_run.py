"""tools/timed_run.py: the command of a timed run (a checkout's train.py, or the installed package's
`python -m sample_factory.train` when there is no checkout) and what is read back from its output."""

from __future__ import annotations

import subprocess
import sys

from sample_factory.tools import timed_run

OUTPUT = """\
[2026] FPS 10s/60s/300s: 1234.5/1200.0/1100.0
[2026] samples collected/trained: 5000/4096
[2026] policy 0: reward 21.5, episodes 10
  env_step (avg of 2): 3.1 s
done: 8000 env steps in 6.5 s, 1230 FPS overall
"""


def _fake_run(calls):
    def run(cmd, **kwargs):
        calls.append((cmd, kwargs))
        return subprocess.CompletedProcess(cmd, 0, stdout=OUTPUT, stderr="")

    return run


def test_a_checkouts_train_py_runs_with_its_code_first(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("")
    calls = []
    monkeypatch.setattr(timed_run.subprocess, "run", _fake_run(calls))
    result, summary = timed_run.run_train(["--env=CartPole-v1"], 5.0, repo=tmp_path)
    ((cmd, kwargs),) = calls
    assert cmd[:2] == [sys.executable, str(tmp_path / "train.py")] and "--env=CartPole-v1" in cmd
    assert "--train_for_seconds=5.0" in cmd and kwargs["cwd"] == tmp_path
    assert kwargs["env"]["PYTHONPATH"].split(":")[0] == str(tmp_path)
    assert result == {
        "rc": 0,
        "stderr_tail": [],
        "env_steps": 8000,
        "unit": "env steps",
        "seconds": 6.5,
        "fps": 1230,
        "fps10": 1234.5,
        "samples_trained": 4096,
        "reward": 21.5,
    }
    assert summary == ["  env_step (avg of 2): 3.1 s", "done: 8000 env steps in 6.5 s, 1230 FPS overall"]


def test_without_a_checkout_the_installed_package_trains(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(timed_run.subprocess, "run", _fake_run(calls))
    timed_run.run_train([], 5.0, repo=tmp_path / "no_checkout")
    ((cmd, kwargs),) = calls
    assert cmd[:3] == [sys.executable, "-m", "sample_factory.train"] and kwargs["cwd"] is None
