"""The CUDA paths, end to end: policy workers and learners on the GPU, in separate processes and in serial mode.

Skipped without a CUDA GPU (CI has none); run on a GPU machine with `pytest tests/integration/test_cuda.py`.
What each test checks is what only a GPU run can break: tensors crossing between shared CPU memory and the
device (rollouts in, actions and weights out), checkpoints written from GPU tensors and loaded on a CPU-only
machine, several CUDA processes (one per policy worker and learner) at once.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from tests.integration.conftest import progress_samples_trained
from tests.integration.test_learning import BUDGET, RNN_FLAGS, TARGET_REWARD, learn
from tests.policy_helpers import assert_cpu_and_cuda_agree

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.timeout(800)
def test_learning_on_gpu(tmp_path, train_run):
    """CartPole reaches the CPU tests' target within the same budget with policy worker and learner on CUDA."""
    learn(train_run, tmp_path, ["--device=gpu"], BUDGET, timeout=380)


@pytest.mark.timeout(600)
def test_rnn_learning_on_gpu(tmp_path, train_run):
    learn(
        train_run,
        tmp_path,
        ["--device=gpu", *RNN_FLAGS, "--rnn_type=gru", f"--stop_at_reward={TARGET_REWARD}"],
        BUDGET,
        timeout=280,
    )


def _short_run(train_run, tmp_path, args: list[str], env_id: str = "CartPole-v1", steps: int = 40_000):
    run = train_run(
        ["--device=gpu", f"--train_for_env_steps={steps}", "--report_interval_sec=1", *args], tmp_path, env_id=env_id
    )
    rc = run.wait(timeout=240)
    assert rc == 0, run.describe()
    assert (progress_samples_trained(run) or 0) > 0, run.describe()
    run.assert_no_leftovers()
    return run


@pytest.mark.timeout(300)
def test_gpu_checkpoint_loads_on_cpu(tmp_path, train_run):
    """A checkpoint trained on the GPU gives the same greedy actions on the CPU (map_location on load)."""
    run = _short_run(train_run, tmp_path, ["--num_workers=2", "--use_rnn=True", "--rnn_size=32"])
    assert run.checkpoints(), run.describe()
    assert_cpu_and_cuda_agree("x", tmp_path, batch=64)


@pytest.mark.timeout(300)
def test_serial_mode_on_gpu(tmp_path, train_run):
    _short_run(train_run, tmp_path, ["--serial_mode=True", "--num_workers=1", "--seed=1"], steps=20_000)


@pytest.mark.timeout(400)
def test_two_policies_with_pbt_on_gpu(tmp_path, train_run):
    """Two learners and two policy workers, each its own CUDA context, with PBT exchanging weights."""
    _short_run(
        train_run,
        tmp_path,
        ["--num_workers=2", "--num_policies=2", "--with_pbt=True", "--pbt_period_env_steps=10000"],
        steps=60_000,
    )


@pytest.mark.timeout(400)
@pytest.mark.skipif(importlib.util.find_spec("ale_py") is None, reason="needs ale-py (the [atari] extra)")
def test_atari_conv_net_on_gpu(tmp_path, train_run):
    """The Atari preset (uint8 frames, conv encoder) on CUDA: frames cross to the device as uint8."""
    _short_run(train_run, tmp_path, ["--num_workers=2", "--num_envs_per_worker=4"], env_id="atari_pong", steps=20_000)


@pytest.mark.timeout(400)
def test_resume_on_gpu_and_on_cpu(tmp_path, train_run):
    """A GPU run's checkpoint resumes on the GPU (its RNG states were mapped to CUDA on load: a real bug once) and
    on the CPU."""
    args = ["--num_workers=2", "--report_interval_sec=1"]
    for i, (device, steps) in enumerate((("gpu", 30_000), ("gpu", 60_000), ("cpu", 90_000))):
        run = train_run([*args, f"--device={device}", f"--train_for_env_steps={steps}"], tmp_path)
        assert run.wait(timeout=200) == 0, run.describe()
        run.assert_no_leftovers()
        assert (progress_samples_trained(run) or 0) > 0, run.describe()
        assert i == 0 or "resuming" in run.output, run.describe()


def test_transfers_to_and_from_the_gpu_keep_values_and_order():
    """PinnedStaging's ring and DeferredReads on a CUDA device: values arrive intact through reused pinned buffers,
    and reads come back in order once they have landed."""
    from sample_factory.algo.transfer import DeferredReads, PinnedStaging

    dev = torch.device("cuda")
    staging, reads = PinnedStaging(dev, depth=2), DeferredReads(dev)
    for i in range(5):
        batch = {"obs": {"obs": torch.full((3, 4), float(i))}, "a": torch.arange(3) + i}
        out = staging.to_device(batch)
        assert out["obs"]["obs"].device.type == "cuda" and float(out["obs"]["obs"].sum()) == 12.0 * i
        assert torch.equal(out["a"].cpu(), torch.arange(3) + i)
        reads.put(i, out["a"] * 2)
    got = reads.ready() + reads.drain()
    assert [tag for tag, _ in got] == list(range(5))
    assert all(torch.equal(x, (torch.arange(3) + i) * 2) for i, x in got)


def test_a_replay_buffer_on_the_gpu_samples_what_one_in_host_memory_does():
    """--replay_buffer_device: frames stored on the GPU and gathered there give the same minibatches (indices,
    stacks, bootstrap stacks, weights) as the host buffer, also after a save and a load into each other."""
    from sample_factory.algo.replay import ReplayBuffer, nstep_targets
    from tests.algo.test_replay import frame_stack_rollouts

    M, T, k = 4, 8, 4
    obs, is_first = frame_stack_rollouts(M, T, k, {(0, 2), (1, 6), (3, 0)})
    shapes = {"obs": ((k, 3, 3), torch.uint8), "vec": ((2,), torch.float32)}
    batch = {"obs": obs, "vec": torch.randn(M, T + 1, 2)}
    z = torch.zeros(M, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(M, T), z, z, torch.zeros(M, T), 0.9, 3)
    bufs = [
        ReplayBuffer(2 * M * T, T, shapes, (), torch.int64, True, seed=3, stacked={"obs": k}, device=d)
        for d in ("cpu", "cuda")
    ]
    for buf in bufs:
        buf.add(batch, torch.zeros(M, T, dtype=torch.int64), targets, ~z, torch.rand(M, T, generator=None), is_first)
        buf.tree.set(np.arange(M * T), np.linspace(0.1, 1.0, M * T))  # the same priorities in both
    for _ in range(3):
        a, b = (buf.sample(16, 0.5) for buf in bufs)
        assert b.obs["obs"].is_cuda and b.next_obs["vec"].is_cuda
        assert torch.equal(a.indices, b.indices) and torch.equal(a.weights, b.weights)
        for key in ("obs", "vec"):
            assert torch.equal(a.obs[key], b.obs[key].cpu()) and torch.equal(a.next_obs[key], b.next_obs[key].cpu())
    bufs[0].load_state_dict({**bufs[1].state_dict()})  # GPU state into the host buffer and back
    bufs[1].load_state_dict({**bufs[0].state_dict()})
    a, b = (buf.sample(16) for buf in bufs)
    assert torch.equal(a.obs["obs"], b.obs["obs"].cpu()) and bufs[0].frames["obs"].device.type == "cpu"


@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_learner_loop_on_gpu_reads_back_once_per_iteration(algo):
    from benchmarks import learner_loop

    r = learner_loop.measure(algo, "CartPole-v1", torch.device("cuda"), 2)
    assert r["sgd_steps"] >= 8 and 0 < r["host_syncs_per_sgd_step"] <= 0.25, r
