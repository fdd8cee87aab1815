"""Reproducible synchronous runs (runtime/reproducible.py): two multi-process runs of the same command with
--async_rl=False and a --seed end with bit-identical checkpoints and the same progress.csv rows (time columns
aside). The two runs go concurrently: process scheduling differs between them, which is what must not matter."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sample_factory.experiment.checkpoints import list_checkpoints

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
