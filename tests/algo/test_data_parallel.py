"""Data-parallel learner groups (algo/data_parallel.py): 2 ranks on the CPU (gloo), each training on its share of
every batch, reach the weights of one learner trained on the whole batch with the same seed. One pair of rank
processes runs every scenario (process start and torch import dominate on a small machine)."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest
import torch

from sample_factory.algo.appo import APPOAlgorithm
from tests.algo import appo_fixture

TIMEOUT = 240.0

APPO_CASES = {
    # GRU, V-trace, both normalizers, lag and other-policy masks; the proximal policy of each rank's own rows
    "gru_vtrace_normalized": ("--decoupled_ppo=True",),
    "gaussian_gae_unclipped": ("--num_batches_per_epoch=6",),  # GAE, MLP; 2-row minibatches: empty shares
    "action_mask_raw_advantages": ("--max_grad_norm=0.05",),  # clipping at the global gradient norm
}
DQN_FLAGS = (
    "--batch_size=32",
    "--training_intensity=2",
    "--learning_starts=100",
    "--target_network_update_freq=64",
    "--normalize_input=True",
    "--max_grad_norm=1",
)
DQN_CASES = {replayer: (*DQN_FLAGS, f"--exp_replayer={replayer}") for replayer in ("prioritized", "one_time")}
DQN_ITERATIONS = 4


def rows_of(batch: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    return {k: rows_of(v, lo, hi) if isinstance(v, dict) else v[lo:hi].clone() for k, v in batch.items()}


def run_ranks(target: Any, world: int, store: str, *args: Any) -> None:
    """Run target(rank, world, store, *args) in `world` spawned processes (`store`: the group's rendezvous file);
    fail (and kill them) past TIMEOUT."""
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=target, args=(r, world, store, *args), daemon=True) for r in range(world)]
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


def appo_scenario(name: str, dp: Any) -> dict[str, Any]:
    """appo_fixture's scenario; with `dp`, trained on this rank's rows of each global batch."""
    if dp is None:
        return appo_fixture.run_scenario(name, APPOAlgorithm, APPO_CASES[name])

    def make(cfg, model, device):
        algo = APPOAlgorithm(cfg, model, device)
        algo.dp = dp
        return algo

    real_make_batch = appo_fixture.make_batch

    def share_of_batch(*args):
        batch = real_make_batch(*args)
        dp.set_rows(batch["is_first"].shape[0])
        return rows_of(batch, dp.lo, dp.hi)

    appo_fixture.make_batch = share_of_batch
    try:
        return appo_fixture.run_scenario(name, make, APPO_CASES[name])
    finally:
        appo_fixture.make_batch = real_make_batch


def dqn_scenario(name: str, dp: Any) -> dict[str, Any]:
    """DQN_ITERATIONS iterations of tests/algo/test_dqn.py's algorithm; with `dp` the batches go to rank 0 only."""
    from tests.algo.test_dqn import fake_batch, make_algo

    algo = make_algo(*DQN_CASES[name])
    if dp is not None:  # (one learner: the algorithm's own SingleRank)
        algo.dp = dp
    version, stats = 0, []
    for i in range(DQN_ITERATIONS):
        batch = fake_batch(M=4, seed=i) if dp is None or dp.rank == 0 else None  # the replay is rank 0's
        algo.update_learning_rate(100 * i)
        s, version = algo.train(batch, version, 0)
        stats.append(s)
    return {
        "version": version,
        "model": algo.model.state_dict(),
        "target": algo.target.state_dict(),
        "stats": stats,
        "replay": None if algo.replay is None else algo.replay.state_dict(),
    }


def listening_addresses() -> list[str]:
    """The addresses this process accepts TCP connections on."""
    import psutil

    return sorted({c.laddr.ip for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN})


def _rank(rank: int, world: int, store: str, out: str) -> None:
    from sample_factory.algo.data_parallel import init_group, leave_group

    torch.set_num_threads(1)
    dp = init_group(rank, world, store, "gloo", TIMEOUT)
    try:
        results: dict[Any, Any] = {"listening": listening_addresses()}
        results.update({("appo", n): appo_scenario(n, dp) for n in APPO_CASES})
        results.update({("dqn", n): dqn_scenario(n, dp) for n in DQN_CASES})
    finally:
        leave_group()
    if rank == 0:
        torch.save(results, out)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> dict[tuple[str, str], dict[str, Any]]:
    """Rank 0's results of every scenario, trained by 2 gloo ranks."""
    folder = tmp_path_factory.mktemp("ranks")
    run_ranks(_rank, 2, str(folder / "store"), str(folder / "rank0.pt"))
    return torch.load(folder / "rank0.pt", weights_only=False)


@pytest.mark.timeout(400)
def test_the_group_listens_on_loopback_only(two_ranks):
    """Rank 0 hosted a TCP rendezvous store on every interface (IPv4 and IPv6) for the whole run, unauthenticated,
    and ranks >= 1 unpickle what the group broadcasts. The store is a file now, and gloo's pairs use loopback."""
    listening = two_ranks["listening"]
    assert listening and all(ip in ("127.0.0.1", "::1") for ip in listening), listening


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], what: str) -> None:
    for k, v in want.items():
        torch.testing.assert_close(got[k], v, rtol=1e-4, atol=1e-5, msg=f"{what} {k}")


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", list(APPO_CASES))
def test_two_appo_ranks_match_one_learner_on_the_whole_batch(two_ranks, name: str):
    reference, result = appo_scenario(name, None), two_ranks["appo", name]
    assert result["version"] == reference["version"]
    assert_same_weights(result["model"], reference["model"], "model")
    ref_moments = reference["algo"]["optimizer"]["state"]
    for i, state in result["algo"]["optimizer"]["state"].items():
        torch.testing.assert_close(state["exp_avg"], ref_moments[i]["exp_avg"], rtol=1e-4, atol=1e-6)
    # the reported sample counts are the whole batch's
    for got, want in zip(result["stats"], reference["stats"], strict=True):
        assert (got["samples"], got["dropped_samples"]) == (want["samples"], want["dropped_samples"])


@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", list(DQN_CASES))
def test_two_dqn_ranks_match_one_learner(two_ranks, name: str):
    reference, result = dqn_scenario(name, None), two_ranks["dqn", name]
    assert reference["version"] > 4 * (name == "prioritized")  # several SGD steps and target updates
    assert result["version"] == reference["version"]
    assert_same_weights(result["model"], reference["model"], "model")
    assert_same_weights(result["target"], reference["target"], "target")
    assert result["stats"][-1]["target_updates"] == reference["stats"][-1]["target_updates"]
    if name == "prioritized":  # priorities updated once, from the whole minibatch's |TD errors|
        for k, v in reference["replay"].items():
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                torch.testing.assert_close(result["replay"][k], v, rtol=1e-4, atol=1e-5, msg=k)
