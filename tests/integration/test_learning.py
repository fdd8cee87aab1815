"""CartPole-v1 learning tests, 2 workers each; every run stops at its target mean reward (over the last 100 episodes,
--stop_at_reward) and must get there within its budget. A random policy scores about 22.

- feed-forward (the classic_control preset as is): 450 within 400k env steps. Steps to 450 on a 2-core machine:
  156k-242k over 19 runs (core engine issue), 211k-235k over 10 runs later; one fresh-clone CI run in ~9 was much
  slower (mean reward 381 at 303k steps), so the budget leaves ~1.7x headroom over the typical run.
- GRU and LSTM cores (--use_rnn=True, --rnn_type=gru/lstm), replay, two learner ranks: these test that a code path
  learns, not how well the preset scores (the benchmark suites measure that), so their target is PATH_TARGET, 300:
  over 13x a random policy, reached well before 450 on the same curves. Steps to 450 measured on a 2-core machine
  with RNN_FLAGS, 15 runs each: GRU 168k-270k (median 216k), LSTM 180k-340k (median 233k), 10-30 s each. With the
  preset's lr 3e-3 instead (6 runs each) several curves collapsed on the way: GRU 147k-351k, LSTM 164k-380k.
  The budgets leave ~1.5x headroom over the slowest run seen to 450, more to 300.
"""

from __future__ import annotations

import math
import time

import pytest

from tests.integration.conftest import progress_samples_trained

BUDGET = 400_000
TARGET_REWARD = 450.0
PATH_TARGET = 300.0
# The preset's 512-wide default core is slow on CPU and its lr 3e-3 makes RNN training unstable on CartPole.
RNN_FLAGS = ["--use_rnn=True", "--rnn_size=64", "--learning_rate=1e-3"]
GRU_BUDGET = 400_000
LSTM_BUDGET = 500_000


# A run that does not learn is retried once in a fresh folder: these runs are multi-process and unseeded, and a
# small fraction of curves collapse on the way (a fresh-clone CI run on 2026-11-23: GRU peaked at 400 at 176k env
# steps, then fell to ~300; the next 4 runs reached 450 at 172k-221k). A regression that stops learning fails both
# attempts; a crash, a stall or a leftover process fails the first.
ATTEMPTS = 2


def learn(train_run, tmp_path, args: list[str], budget: int, timeout: float, target: float = TARGET_REWARD) -> None:
    """Train with `args` for at most `budget` env steps; the best mean reward within the budget must reach the
    target (in one of ATTEMPTS runs). Checks exit code, training progress and leftovers of every run."""
    for attempt in range(1, ATTEMPTS + 1):
        run = train_run(
            ["--num_workers=2", f"--train_for_env_steps={budget}", "--report_interval_sec=1", *args],
            tmp_path / f"attempt{attempt}",
        )
        rc = run.wait(timeout=timeout)
        assert rc == 0, run.describe()
        assert (progress_samples_trained(run) or 0) > 0, run.describe()
        run.assert_no_leftovers()
        curve = [(int(r["env_steps"]), float(r["reward_p0"])) for r in run.progress_rows()]
        within = [(s, r) for s, r in curve if s <= budget and not math.isnan(r)]
        best = max((r for _, r in within), default=float("nan"))
        if best >= target:
            reached = min(s for s, r in within if r >= target)
            elapsed = time.monotonic() - run.started
            print(f"mean reward {target:.0f} reached at {reached} env steps ({elapsed:.0f} s, attempt {attempt})")
            return
        shown = ", ".join(f"{s}:{r:.0f}" for s, r in curve)
        print(f"attempt {attempt}: best mean reward {best:.1f} < {target} within {budget} steps; curve {shown}")
    raise AssertionError(f"no run reached mean reward {target} within {budget} env steps in {ATTEMPTS} attempts")


@pytest.mark.timeout(800)
def test_learning(tmp_path, train_run):
    learn(train_run, tmp_path, [f"--stop_at_reward={TARGET_REWARD}"], BUDGET, timeout=380)


@pytest.mark.timeout(600)
def test_learning_gru(tmp_path, train_run):
    learn(
        train_run,
        tmp_path,
        [*RNN_FLAGS, "--rnn_type=gru", f"--stop_at_reward={PATH_TARGET}"],
        GRU_BUDGET,
        timeout=280,
        target=PATH_TARGET,
    )


@pytest.mark.timeout(600)
def test_learning_lstm(tmp_path, train_run):
    learn(
        train_run,
        tmp_path,
        [*RNN_FLAGS, "--rnn_type=lstm", f"--stop_at_reward={PATH_TARGET}"],
        LSTM_BUDGET,
        timeout=280,
        target=PATH_TARGET,
    )


# Ape-X DQN with the classic_control_dqn preset; the reported return is the least-exploring third of the agents'
# (epsilon <= 0.006), as RLlib reports Ape-X. Target 475 over the last 100 episodes; the run stops there. The preset's
# tuning run reached it at 347k env steps (128 s, 2 shared cores); its lr decays over the budget. Its runs have a long
# tail: 2026-11-24, of 8 runs with this budget 7 reached 475 at 221k-540k env steps (median 369k) and one did not
# (a collapse, 417 at 700k); two fresh-clone CI runs with a budget of 500k needed a second attempt, then failed both
# (peaks 431 and 460). With 700k and 2 attempts, one failure in 8 per run makes a spurious failure about 1 in 60; a
# regression that stops DQN from learning fails both.
# Solving CartPole-v1 (475) is a claim about the preset's quality, which the classic benchmark suite with --algo=DQN
# also measures (docs/results.md, benchmarks/results/dqn/classic.md): that test is marked slow (`make test-slow`), and
# `make test` keeps the same path (multi-process Ape-X DQN with the preset and its budget) with DQN_PATH_TARGET, 200
# (9x a random policy): reached at 86k, 110k and 133k env steps in three runs on 2 loaded cores (2026-11-26),
# against 221k-540k for 475; the budget stays the preset's (its lr decays over it).
DQN_TARGET = 475.0
DQN_PATH_TARGET = 200.0
DQN_BUDGET = 700_000


def learn_dqn(train_run, tmp_path, target: float) -> None:
    """The preset's Ape-X DQN run, stopped at `target`, which it must reach within the preset's budget."""
    learn(train_run, tmp_path, ["--algo=DQN", f"--stop_at_reward={target}"], DQN_BUDGET, timeout=420, target=target)


@pytest.mark.timeout(900)
def test_dqn_learns(tmp_path, train_run):
    learn_dqn(train_run, tmp_path, DQN_PATH_TARGET)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_learning_dqn(tmp_path, train_run):
    learn_dqn(train_run, tmp_path, DQN_TARGET)


@pytest.mark.timeout(800)
def test_learning_appo_with_replay(tmp_path, train_run):
    """IMPALA-style replay: each batch of 128 fresh trajectories gets 64 replayed ones from the last 512."""
    learn(
        train_run,
        tmp_path,
        ["--replay_proportion=0.5", "--replay_buffer_num_slots=512", f"--stop_at_reward={PATH_TARGET}"],
        BUDGET,
        timeout=380,
        target=PATH_TARGET,
    )


# Data-parallel learner group: 2 learner ranks on the CPU (gloo) train one policy, rank 0 publishing. Measured
# 2026-11-26 on the 2-core machine: 475 at 166k and 170k env steps (29 s, 26 s); the test asks for PATH_TARGET.


@pytest.mark.timeout(700)
def test_learning_with_two_learner_ranks(tmp_path, train_run):
    learn(
        train_run,
        tmp_path,
        ["--learners_per_policy=2", "--device=cpu", f"--stop_at_reward={PATH_TARGET}"],
        BUDGET,
        timeout=300,
        target=PATH_TARGET,
    )
