"""The training-step benchmark runs every variant and prints a ratio for each."""

from __future__ import annotations

import re

from sample_factory.tools import benchmark_learner


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


def test_mlp_times_each_cpu_fast_path_and_restores_them(capsys):
    from sample_factory.algo import returns
    from sample_factory.model import activations

    before = (activations.FAST_TANH_MIN_ELEMENTS, returns.NUMPY_LOOP)
    assert benchmark_learner.main(["--mlp", "--rounds=1"]) == 0
    out = capsys.readouterr().out
    for name in ("torch ops", "fast tanh", "numpy returns loop", "fused Adam", "all \\(the default\\)"):
        assert re.search(rf"{name}\s+median\s+[\d.]+ ms \(\s*[\d,]+ samples/s\)\s+speed-up [\d.]+x", out), out
    assert (activations.FAST_TANH_MIN_ELEMENTS, returns.NUMPY_LOOP) == before
