"""Reproducible synchronous runs (runtime/reproducible.py): two multi-process runs of the same command with
--async_rl=False and a --seed end with bit-identical checkpoints and the same progress.csv rows (time columns
aside). The two runs go concurrently: process scheduling differs between them, which is what must not matter."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from sample_factory.experiment.checkpoints import list_checkpoints
from tests.integration.conftest import progress_env_steps

TIME_COLUMNS = ("time_s", "fps_10s")


def final_checkpoints(exp_dir: Path) -> dict[str, dict]:
    """{checkpoint_p<p>/<file name>: the loaded newest checkpoint} per policy."""
    out = {}
    for policy_dir in sorted(exp_dir.glob("checkpoint_p*")):
        ckpts = list_checkpoints(policy_dir)
        assert ckpts, f"no checkpoint in {policy_dir}"
        out[f"{policy_dir.name}/{ckpts[-1].name}"] = torch.load(ckpts[-1], weights_only=False, map_location="cpu")
    return out


def assert_same_run(a, b) -> None:
    """Same final checkpoints (names: policy version and env steps; every model and optimizer tensor) and the same
    progress.csv rows apart from the time columns."""
    ckpt_a, ckpt_b = final_checkpoints(a.exp_dir), final_checkpoints(b.exp_dir)
    assert list(ckpt_a) == list(ckpt_b), f"different final checkpoints: {list(ckpt_a)} vs {list(ckpt_b)}"
    for name, sa in ckpt_a.items():
        sb = ckpt_b[name]
        differing = [k for k in sa["model"] if not torch.equal(sa["model"][k], sb["model"][k])]
        assert not differing, f"{name}: same seed, different weights in {differing}"
        moments = [
            (k, i)
            for k in sa["algo"]["optimizer"]["state"]
            for i, t in sa["algo"]["optimizer"]["state"][k].items()
            if isinstance(t, torch.Tensor) and not torch.equal(t, sb["algo"]["optimizer"]["state"][k][i])
        ]
        assert not moments, f"{name}: different optimizer state {moments}"

    def rows(run) -> list[dict[str, str]]:
        return [{k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in run.progress_rows()]

    lag_a, lag_b = (run.exp_dir / "policy_lag.json" for run in (a, b))
    assert lag_a.exists() == lag_b.exists() and (not lag_a.exists() or lag_a.read_text() == lag_b.read_text())
    rows_a, rows_b = rows(a), rows(b)
    assert len(rows_a) >= 2, rows_a
    assert rows_a == rows_b, f"progress.csv differs:\n{rows_a}\n{rows_b}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "flags",
    [
        ["--train_for_env_steps=16000"],  # 4 iterations of 4,096 samples (the classic_control preset)
        ["--algo=DQN", "--num_envs_per_worker=16", "--train_for_env_steps=6000"],  # 6 iterations of 1,024
        ["--num_policies=2", "--train_for_env_steps=8000"],  # each learner trains on its policy's columns
    ],
    ids=["appo", "dqn", "two_policies"],
)
def test_sync_runs_are_reproducible(tmp_path, train_run, flags):
    common = [*flags, "--async_rl=False", "--num_workers=2", "--seed=3", "--report_interval_sec=0.5"]
    runs = [train_run(common, tmp_path / name) for name in ("a", "b")]
    for run in runs:
        assert run.wait(timeout=240) == 0, run.describe()
        run.assert_no_leftovers()
    assert_same_run(*runs)
    if "--algo=DQN" not in flags:  # sync PPO trains on the current policy's samples only: every lag is 0
        lag = json.loads((runs[0].exp_dir / "policy_lag.json").read_text())
        assert {p: (v["max"], len(v["counts"])) for p, v in lag.items()} == {str(p): (0, 1) for p in range(len(lag))}


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "flags, stop",
    [
        # 8,192 env steps by the budget, resumed with a larger one: nothing in APPO's preset follows the budget
        ([], "budget"),
        # DQN's learning rate (the classic_control_dqn preset's linear_decay) and prioritized replay's beta anneal
        # over --train_for_env_steps: a resume keeps the budget, and the first run stops on Ctrl+C. Learning from
        # the second iteration on: the stop lands with Adam, the target network and the priorities in use
        (["--algo=DQN", "--num_envs_per_worker=16", "--save_replay_buffer=True", "--learning_starts=1000"], "ctrl_c"),
    ],
    ids=["appo", "dqn"],
)
def test_stopped_and_resumed_run_matches_the_uninterrupted_one(tmp_path, train_run, flags, stop):
    """A run stopped and resumed to 16,384 env steps (the actors' envs restored from sync_state/) ends with the same
    checkpoint as 16,384 in one go. Without the saved envs, the resumed run would restart every episode; a Ctrl+C
    that stopped inside an iteration would save weights trained on part of it."""
    # a reward window of 1,000 episodes spans iterations (an iteration of CartPole finishes about 200)
    common = ["--async_rl=False", "--num_workers=2", "--seed=5", "--report_interval_sec=0.2", "--stats_avg=1000"]
    common += flags
    total = [*common, "--train_for_env_steps=16000"]
    full = train_run(total, tmp_path / "full")
    if stop == "budget":
        first = train_run([*common, "--train_for_env_steps=8000"], tmp_path / "resumed")
        assert first.wait(timeout=240) == 0, first.describe()
        stopped_at = 8192
    else:
        first = train_run(total, tmp_path / "resumed")
        # two iterations trained (1,024 env steps each), then Ctrl+C: the run stops after one no learner has begun
        assert first.wait_until(lambda: (progress_env_steps(first) or 0) > 1024, timeout=180), first.describe()
        first.signal(signal.SIGINT)
        assert first.wait(timeout=120) == 130, first.describe()
        assert "stopping after iteration" in first.output, first.describe()
        (stopped,) = final_checkpoints(first.exp_dir)
        assert not stopped.endswith("_16384.pth"), f"the Ctrl+C came too late to test a resume: {stopped}"
        assert "/checkpoint_000000000_" not in stopped, f"stopped before any SGD step: {stopped}"
        stopped_at = int(Path(stopped).stem.split("_")[-1])
    assert sorted(p.name for p in (first.exp_dir / "sync_state").iterdir()) == ["actor_0.pth", "actor_1.pth"]
    second = train_run(total, tmp_path / "resumed")
    for run in (full, second):
        assert run.wait(timeout=240) == 0, run.describe()
        run.assert_no_leftovers()
    assert "resumed from" in second.output and "envs start afresh" not in second.output, second.describe()
    ckpt_full, ckpt_resumed = final_checkpoints(full.exp_dir), final_checkpoints(second.exp_dir)
    assert list(ckpt_full) == list(ckpt_resumed), f"{list(ckpt_full)} vs {list(ckpt_resumed)}"
    assert list(ckpt_full)[0].endswith("_16384.pth"), list(ckpt_full)
    (a,), (b,) = ckpt_full.values(), ckpt_resumed.values()
    differing = [k for k in a["model"] if not torch.equal(a["model"][k], b["model"][k])]
    assert not differing, f"the resumed run ended with other weights in {differing}"
    if "target" in a["algo"]:  # DQN: its target network and replay bookkeeping too
        assert all(torch.equal(a["algo"]["target"][k], b["algo"]["target"][k]) for k in a["algo"]["target"])
        assert a["algo"]["counters"] == b["algo"]["counters"]

    # The reward window went on from the checkpoint's episodes (episode_windows.json), so the rows after the resume
    # match too. The stop adds a row that the uninterrupted run may not have (rows come at report times).
    def rows(run) -> dict[str, dict[str, str]]:
        return {r["env_steps"]: {k: v for k, v in r.items() if k not in TIME_COLUMNS} for r in run.progress_rows()}

    rows_full, rows_resumed = rows(full), rows(second)
    after = [s for s in rows_full if int(s) > stopped_at and s in rows_resumed]
    assert after, f"no row past the resume in both runs:\n{rows_full}\n{rows_resumed}"
    assert [rows_full[s] for s in after] == [rows_resumed[s] for s in after], f"{rows_full}\n{rows_resumed}"
