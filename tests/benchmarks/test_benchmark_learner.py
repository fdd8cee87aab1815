"""The training-step benchmark runs every variant and prints a ratio for each."""

from __future__ import annotations

import json
import re

import pytest
import torch

from benchmarks import benchmark_learner, learner_loop


def test_prints_every_variant(capsys):
    assert benchmark_learner.main(["--batch=4", "--rounds=1"]) == 0
    out = capsys.readouterr().out
    for name in benchmark_learner.VARIANTS:
        assert re.search(rf"{name}\s+median\s+[\d.]+ ms .* speed-up [\d.]+x", out), out
    assert "speed-up 1.00x" in out  # the NCHW fp32 baseline


def test_compile_adds_compiled_variants_and_inference(capsys, monkeypatch):
    # aot_eager: the same dynamo + autograd path as inductor, without a C++ build (that is covered by
    # tests/integration/test_torch_compile.py)
    real = benchmark_learner.compile_encoders
    monkeypatch.setattr(
        benchmark_learner, "compile_encoders", lambda model, log, **kw: real(model, log, backend="aot_eager", **kw)
    )
    assert benchmark_learner.main(["--batch=4", "--rounds=1", "--compile", "--inference_batches=2,3"]) == 0
    out = capsys.readouterr().out
    for name in benchmark_learner.COMPILED_VARIANTS:
        assert re.search(rf"{name}\s+median\s+[\d.]+ ms .* speed-up [\d.]+x", out), out
    for batch in (2, 3):
        assert re.search(rf"batch\s+{batch}: fp32 .* \(1.00x\)\s+bf16 .* compiled\s+[\d.]+ ms \([\d.]+x\)", out), out
    assert "running it eagerly" not in out


def test_inference_times_fp32_against_bf16(capsys):
    assert benchmark_learner.main(["--batch=4", "--rounds=1", "--inference", "--inference_batches=2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"batch\s+2: fp32\s+[\d.]+ ms \(1.00x\)\s+bf16\s+[\d.]+ ms \([\d.]+x\)$", out, re.M), out
    assert "compiled" not in out.split("inference")[1]


def test_inference_times_the_whole_step_eager_against_the_bucket_path(capsys):
    assert benchmark_learner.main(["--batch=2", "--rounds=1", "--inference", "--inference_batches=2,9"]) == 0
    out = capsys.readouterr().out
    for algo in ("APPO", "DQN"):
        step = out.split(f"({algo} act, host -> cpu -> host), eager / padded:")[1]
        for batch in (2, 9):
            assert re.search(rf"batch\s+{batch}: eager\s+[\d.]+ ms\s+padded\s+[\d.]+ ms\s+speed-up [\d.]+x", step), out


def test_a_failed_graph_capture_is_reported_and_the_benchmark_goes_on(capsys, monkeypatch):
    """Graphs "captured" on a CPU fail: the failure is printed, the step is timed eagerly, nothing raises."""
    from benchmarks import benchmark_inference

    monkeypatch.setattr(benchmark_inference, "compared_mode", lambda device: "graphs")
    assert benchmark_learner.main(["--batch=2", "--rounds=1", "--inference", "--inference_batches=2"]) == 0
    out = capsys.readouterr().out
    assert out.count("graphs: FAILED, eager instead") == 2, out  # APPO and DQN
    assert re.search(r"note: CUDA graph capturing batch size 2 of the inference step failed .*inferring eagerly", out)
    assert re.search(r"batch\s+2: eager\s+[\d.]+ ms\s+graphs\s+[\d.]+ ms", out), out


def test_a_variant_that_raises_is_left_out(capsys, monkeypatch):
    from sample_factory.workers.batched_inference import BatchedInference

    real = BatchedInference.run

    def run(self, n, deterministic):
        if self.mode != "eager":
            raise RuntimeError("CUDA out of memory")
        return real(self, n, deterministic)

    monkeypatch.setattr(BatchedInference, "run", run)
    assert benchmark_learner.main(["--batch=2", "--rounds=1", "--inference", "--inference_batches=2"]) == 0
    out = capsys.readouterr().out
    assert "batch 2: padded failed (RuntimeError: CUDA out of memory)" in out
    assert re.search(r"batch\s+2: eager\s+[\d.]+ ms\s+speed-up n/a", out), out


def test_mlp_times_each_cpu_fast_path_and_restores_them(capsys):
    from sample_factory.algo import returns
    from sample_factory.model import activations

    before = (activations.FAST_TANH_MIN_ELEMENTS, returns.NUMPY_LOOP)
    assert benchmark_learner.main(["--mlp", "--rounds=1"]) == 0
    out = capsys.readouterr().out
    for name in ("torch ops", "fast tanh", "numpy returns loop", "fused Adam", "all \\(the default\\)"):
        assert re.search(rf"{name}\s+median\s+[\d.]+ ms \(\s*[\d,]+ samples/s\)\s+speed-up [\d.]+x", out), out
    assert (activations.FAST_TANH_MIN_ELEMENTS, returns.NUMPY_LOOP) == before


@pytest.mark.parametrize(
    "algo, env, flags",
    [
        ("APPO", "CartPole-v1", ""),
        ("DQN", "CartPole-v1", ""),
        ("APPO", "Pendulum-v1", ""),
        ("APPO", "CartPole-v1", "--lr_schedule=kl_adaptive"),  # the rate steered on the device after every step
    ],
)
def test_learner_loop_reads_back_once_per_iteration(algo, env, flags, capsys):
    """The real training loop (CartPole's preset: 8 SGD steps an iteration for APPO, 64 for DQN) makes at most one
    host read-back per iteration: at most 0.25 per SGD step (issue 31's bound). A `float(loss)` per step, a boolean
    mask indexed on the device, or a `.tolist()` per step would each break it. Pendulum's preset adds Gaussian
    actions and both normalizers (the returns normalizer's `x.var()` read the mean back on every step: 1.03 per
    step). The last line is the JSON result."""
    argv = ["--loop", f"--algo={algo}", f"--env={env}", "--iterations=2", f"--train_flags={flags}"]
    assert benchmark_learner.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("device", "algo", "sgd_steps", "host_syncs_per_sgd_step", "loop_ms_per_sgd_step"):
        assert key in result
    assert result["algo"] == algo and result["device"] == "cpu"
    assert result["sgd_steps"] >= 8 and result["isolated_ms_per_sgd_step"] > 0
    assert 0 < result["host_syncs_per_sgd_step"] <= 0.25, result


@pytest.mark.parametrize(
    "env, flags",
    [
        ("CartPole-v1", ""),
        ("MinAtar/Breakout-v1", "--training_intensity=2"),  # bool grids, the minatar_dqn conv net
        # Atari stacks stored as frames and rebuilt per minibatch (replay.py's rebuild_stacks)
        ("atari_pong", "--batch_size=32 --num_batches_per_epoch=1 --training_intensity=4"),
    ],
)
def test_dqn_learner_loop_reads_back_exactly_once_per_iteration(env, flags, capsys):
    """DQN's loop (replay sampling, three forward passes, priority updates) has one host read an iteration, its
    statistics: priorities come back through deferred reads, and the replay's host bookkeeping (which transitions
    of a rollout are valid) is done in numpy, where a boolean index of a tensor would count as a sync."""
    argv = ["--loop", "--algo=DQN", f"--env={env}", "--iterations=2", f"--train_flags={flags}"]
    assert benchmark_learner.main(argv) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["sgd_steps"] >= 2 * result["iterations"], result
    assert result["host_syncs"] == result["iterations"], result
    parts = result["breakdown_ms"]  # one SGD step's parts, printed above the JSON line too
    for part in ("sample: sum tree", "online forward on s (graph)", "target forward on s'", "on cat([s, s'])"):
        assert any(part in name for name in parts), parts
    assert parts["whole sgd_step"] > 0 and min(parts.values()) >= 0, parts


def test_sync_count_sees_a_read_back_per_step(monkeypatch):
    """The counter is not blind: an APPO loop that reads the loss back after every step counts >= 1 per step."""
    from sample_factory.algo.appo import APPOAlgorithm

    step = APPOAlgorithm.device_step

    def reading_step(self, loss, optimizer, has_data=None):
        float(loss.detach())
        return step(self, loss, optimizer, has_data)

    monkeypatch.setattr(APPOAlgorithm, "device_step", reading_step)
    result = learner_loop.measure("APPO", "CartPole-v1", torch.device("cpu"), 1)
    assert result["host_syncs_per_sgd_step"] >= 1.0


def test_learner_loop_batches_of_minatar_are_bool_grids():
    """--env=MinAtar/...: the minatar_dqn preset's model on bool [4, 10, 10] grids, as the env gives them."""
    from sample_factory.config import parse_cfg

    obs_space, action_space = learner_loop.spaces_for("MinAtar/Breakout-v1")
    assert obs_space.shape == (4, 10, 10) and obs_space.dtype == bool and action_space.n == 3
    cfg = parse_cfg(["--env=MinAtar/Breakout-v1", "--algo=DQN"])
    obs = learner_loop.make_batch(cfg, obs_space, action_space, rows=2, seed=0)["obs"]["obs"]
    assert obs.dtype == torch.bool and obs.shape == (2, cfg.rollout + 1, 4, 10, 10) and 0 < obs.float().mean() < 0.5
