"""Evaluation during training (--eval_every_env_steps): a multi-process CartPole run evaluates its checkpoints with
enjoy.py in a separate process, writes eval/eval_<env steps>.json and logs eval/reward_mean to TensorBoard."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import pytest

from sample_factory.tools.plot import read_scalars
from tests.policy_helpers import Run

REPO_ROOT = Path(__file__).resolve().parents[2]
EVALUATED = re.compile(r"evaluation at (\d+) env steps: reward (-?[\d.]+) \+- ([\d.]+) over (\d+) episodes")


@pytest.mark.timeout(120)
def test_periodic_evaluation(tmp_path):
    args = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=pe", "--num_workers=2", "--device=cpu"]
    args += ["--eval_every_env_steps=50000", "--eval_episodes=3", "--train_for_seconds=90", "--report_interval_sec=1"]
    run = Run(args)
    proc, lines = run.proc, run.lines
    try:
        # The first evaluation starts at 50000 env steps and takes a few seconds; then stop the run (SIGINT: a
        # clean stop that closes the TensorBoard writers, so the scalar is on disk).
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline and not EVALUATED.search("\n".join(lines)):
            time.sleep(0.2)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0, "\n".join(lines)
    finally:
        run.kill()
    out = "\n".join(lines)
    logged = [(int(s), float(r), int(n)) for s, r, _, n in EVALUATED.findall(out)]
    assert logged, out
    assert "periodic evaluation failed" not in out, out

    exp = tmp_path / "pe"
    files = sorted(exp.glob("eval/eval_*.json"))
    assert files, out
    by_steps = {int(f.stem.split("_")[1]): json.loads(f.read_text()) for f in files}
    for steps, reward, episodes in logged:
        res = by_steps[steps]
        assert steps > 0  # the checkpoint's env steps (trained samples: a little behind the 50000 collected)
        assert res["episodes"] == episodes == 3 and len(res["rewards"]) == 3
        assert res["reward_mean"] == pytest.approx(reward, abs=0.005)

    scalars = read_scalars(exp / ".summary" / "0")
    assert "eval/reward_mean" in scalars, sorted(scalars)
    written = dict(scalars["eval/reward_mean"])
    for steps, _, _ in logged:
        assert written[steps] == pytest.approx(by_steps[steps]["reward_mean"], rel=1e-5)
    assert "eval/episode_length" in scalars
