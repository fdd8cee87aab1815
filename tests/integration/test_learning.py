"""CartPole-v1 learning tests, 2 workers each, target mean reward 450 (over the last 100 episodes).

- feed-forward (the classic_control preset as is): within 400k env steps. Steps to 450 on a 2-core machine: 156k-242k
  over 19 runs (core engine issue), 211k-235k over 10 runs later; one fresh-clone CI run in ~9 was much slower
  (mean reward 381 at 303k steps), so the budget leaves ~1.7x headroom over the typical run.
- GRU and LSTM cores (--use_rnn=True, --rnn_type=gru/lstm): the preset plus RNN_FLAGS; the run stops at the target
  (--stop_at_reward) and must get there within its budget. Steps to 450 measured on a 2-core machine with these
  flags, 15 runs each: GRU 168k-270k (median 216k), LSTM 180k-340k (median 233k), 10-30 s each. With the
  preset's lr 3e-3 instead (6 runs each) several curves collapsed on the way: GRU 147k-351k, LSTM 164k-380k.
  The budgets leave ~1.5x headroom over the slowest run seen.
"""

from __future__ import annotations

import math
import time

import pytest

from tests.integration.conftest import progress_samples_trained

BUDGET = 400_000
TARGET_REWARD = 450.0
# The preset's 512-wide default core is slow on CPU and its lr 3e-3 makes RNN training unstable on CartPole.
RNN_FLAGS = ["--use_rnn=True", "--rnn_size=64", "--learning_rate=1e-3"]
GRU_BUDGET = 400_000
LSTM_BUDGET = 500_000


def learn(train_run, tmp_path, args: list[str], budget: int, timeout: float) -> None:
    """Train with `args` for at most `budget` env steps; the best mean reward within the budget must reach the
    target. Checks exit code, training progress and leftovers too."""
    run = train_run(["--num_workers=2", f"--train_for_env_steps={budget}", "--report_interval_sec=1", *args], tmp_path)
    rc = run.wait(timeout=timeout)
    assert rc == 0, run.describe()
    assert (progress_samples_trained(run) or 0) > 0, run.describe()

    curve = [(int(r["env_steps"]), float(r["reward_p0"])) for r in run.progress_rows()]
    within = [(s, r) for s, r in curve if s <= budget and not math.isnan(r)]
    best = max((r for _, r in within), default=float("nan"))
    shown = ", ".join(f"{s}:{r:.0f}" for s, r in curve)
    assert best >= TARGET_REWARD, f"best mean reward {best:.1f} < {TARGET_REWARD} within {budget} steps; curve {shown}"
    reached = min(s for s, r in within if r >= TARGET_REWARD)
    print(f"mean reward {TARGET_REWARD:.0f} reached at {reached} env steps ({time.monotonic() - run.started:.0f} s)")
    run.assert_no_leftovers()


@pytest.mark.timeout(400)
def test_learning(tmp_path, train_run):
    learn(train_run, tmp_path / "td", [], BUDGET, timeout=380)


@pytest.mark.timeout(300)
def test_learning_gru(tmp_path, train_run):
    learn(
        train_run,
        tmp_path / "td",
        [*RNN_FLAGS, "--rnn_type=gru", f"--stop_at_reward={TARGET_REWARD}"],
        GRU_BUDGET,
        timeout=280,
    )


@pytest.mark.timeout(300)
def test_learning_lstm(tmp_path, train_run):
    learn(
        train_run,
        tmp_path / "td",
        [*RNN_FLAGS, "--rnn_type=lstm", f"--stop_at_reward={TARGET_REWARD}"],
        LSTM_BUDGET,
        timeout=280,
    )
