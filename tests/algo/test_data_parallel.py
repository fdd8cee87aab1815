"""Data-parallel learner groups (algo/data_parallel.py): 2 ranks on the CPU (gloo), each training on its share of
every batch, reach the weights of one learner trained on the whole batch with the same seed."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
import torch

from sample_factory.algo.appo import APPOAlgorithm
from sample_factory.runtime.placement import free_port
from tests.algo import appo_fixture

TIMEOUT = 120.0


def rows_of(batch: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    return {k: rows_of(v, lo, hi) if isinstance(v, dict) else v[lo:hi].clone() for k, v in batch.items()}


def run_ranks(target: Any, world: int, *args: Any) -> None:
    """Run target(rank, world, port, *args) in `world` spawned processes; fail (and kill them) past TIMEOUT."""
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, world, port, *args), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(TIMEOUT)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)


def _appo_rank(rank: int, world: int, port: int, name: str, extra: tuple[str, ...], out: str) -> None:
    from sample_factory.algo.data_parallel import init_group, leave_group

    torch.set_num_threads(1)
    dp = init_group(rank, world, port, "gloo", TIMEOUT)

    def make(cfg, model, device):
        algo = APPOAlgorithm(cfg, model, device)
        algo.dp = dp
        return algo

    real_make_batch = appo_fixture.make_batch

    def share_of_batch(*args):  # this rank's rows of the scenario's global batch
        batch = real_make_batch(*args)
        dp.set_rows(batch["is_first"].shape[0])
        return rows_of(batch, dp.lo, dp.hi)

    appo_fixture.make_batch = share_of_batch
    try:
        result = appo_fixture.run_scenario(name, make, extra)
    finally:
        appo_fixture.make_batch = real_make_batch
        leave_group()
    if rank == 0:
        torch.save(result, out)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "name, extra",
    [
        ("gru_vtrace_normalized", ()),  # GRU, V-trace, both normalizers, lag and other-policy masks
        ("gaussian_gae_unclipped", ("--num_batches_per_epoch=6",)),  # GAE, MLP; 2-row minibatches: empty shares
        ("action_mask_raw_advantages", ("--max_grad_norm=0.05",)),  # clipping at the global gradient norm
    ],
)
def test_two_appo_ranks_match_one_learner_on_the_whole_batch(tmp_path: Path, name: str, extra: tuple[str, ...]):
    reference = appo_fixture.run_scenario(name, APPOAlgorithm, extra)
    out = tmp_path / "rank0.pt"
    run_ranks(_appo_rank, 2, name, extra, str(out))
    result = torch.load(out, weights_only=False)
    assert result["version"] == reference["version"]
    for k, v in reference["model"].items():
        torch.testing.assert_close(result["model"][k], v, rtol=1e-4, atol=1e-5, msg=k)
    ref_moments = reference["algo"]["optimizer"]["state"]
    for i, state in result["algo"]["optimizer"]["state"].items():
        torch.testing.assert_close(state["exp_avg"], ref_moments[i]["exp_avg"], rtol=1e-4, atol=1e-6)
    # the reported sample counts are the whole batch's
    for got, want in zip(result["stats"], reference["stats"], strict=True):
        assert (got["samples"], got["dropped_samples"]) == (want["samples"], want["dropped_samples"])


DQN_FLAGS = (
    "--batch_size=32",
    "--training_intensity=2",
    "--learning_starts=100",
    "--target_network_update_freq=64",
    "--normalize_input=True",
    "--max_grad_norm=1",
)
DQN_ITERATIONS = 4


def _dqn_train(dp: Any, flags: tuple[str, ...]) -> dict[str, Any]:
    from tests.algo.test_dqn import fake_batch, make_algo

    algo = make_algo(*flags)
    if dp is not None:
        algo.dp = dp
    version, stats = 0, []
    for i in range(DQN_ITERATIONS):
        batch = fake_batch(M=4, seed=i) if dp is None or dp.rank == 0 else None  # the replay is rank 0's
        algo.update_learning_rate(100 * i)
        s, version = algo.train(batch, version, 0)
        stats.append(s)
    priorities = None if algo.replay is None else algo.replay.state_dict()
    return {
        "version": version,
        "model": algo.model.state_dict(),
        "target": algo.target.state_dict(),
        "stats": stats,
        "replay": priorities,
    }


def _dqn_rank(rank: int, world: int, port: int, flags: tuple[str, ...], out: str) -> None:
    from sample_factory.algo.data_parallel import init_group, leave_group

    torch.set_num_threads(1)
    dp = init_group(rank, world, port, "gloo", TIMEOUT)
    try:
        result = _dqn_train(dp, flags)
    finally:
        leave_group()
    if rank == 0:
        torch.save(result, out)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("replayer", ["prioritized", "one_time"])
def test_two_dqn_ranks_match_one_learner(tmp_path: Path, replayer: str):
    flags = (*DQN_FLAGS, f"--exp_replayer={replayer}")
    reference = _dqn_train(None, flags)
    assert reference["version"] > 4 * (replayer == "prioritized")  # several SGD steps and target updates
    out = tmp_path / "rank0.pt"
    run_ranks(_dqn_rank, 2, flags, str(out))
    result = torch.load(out, weights_only=False)
    assert result["version"] == reference["version"]
    for part in ("model", "target"):
        for k, v in reference[part].items():
            torch.testing.assert_close(result[part][k], v, rtol=1e-4, atol=1e-5, msg=f"{part} {k}")
    assert result["stats"][-1]["target_updates"] == reference["stats"][-1]["target_updates"]
    if replayer == "prioritized":  # priorities updated once, from the whole minibatch's |TD errors|
        ref, got = reference["replay"], result["replay"]
        for k, v in ref.items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                torch.testing.assert_close(got[k], v, rtol=1e-4, atol=1e-5, msg=k)
