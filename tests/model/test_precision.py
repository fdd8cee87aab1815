import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.model import precision
from sample_factory.model.actor_critic import ActorCritic

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
DISCRETE = gym.spaces.Discrete(6)


def _cfg(*flags):
    cfg = parse_cfg(["--env=atari_pong", "--device=cpu", *flags])
    cfg.device = "cpu"
    return cfg


def _fixed_timings(monkeypatch, train: tuple[float, float], infer: tuple[float, float]) -> None:
    """Replace the timers: (fp32, bf16) seconds for the training pass and for inference."""
    monkeypatch.setattr(precision, "reduced_precision_dtype", lambda p, d: torch.bfloat16)  # native bf16
    monkeypatch.setattr(precision, "time_training_pass", lambda m, s, d: train[d is not None])
    monkeypatch.setattr(precision, "time_inference", lambda m, s, rows, d: infer[d is not None])


@pytest.mark.parametrize(
    "train, infer, expected",
    [
        ((0.030, 0.044), (0.0020, 0.0025), ("fp32", "fp32")),  # the Intel Xeon of 2026-11-24
        ((0.066, 0.030), (0.0020, 0.0013), ("bf16", "bf16")),  # the AMD EPYC of 2026-11-23
        ((0.030, 0.029), (0.0020, 0.0010), ("fp32", "bf16")),  # a tie stays fp32
    ],
)
def test_auto_takes_what_times_faster(monkeypatch, train, infer, expected):
    _fixed_timings(monkeypatch, train, infer)
    cfg, lines = _cfg(), []
    assert (cfg.learner_precision, cfg.inference_precision) == ("auto", "auto")  # the atari preset
    precision.resolve_auto_precision(cfg, None, FRAMES, lines.append)
    assert (cfg.learner_precision, cfg.inference_precision) == expected
    assert len(lines) == 1 and f"--learner_precision={expected[0]}" in lines[0]
    assert f"--inference_precision={expected[1]}" in lines[0] and "inference of 8" in lines[0]


def test_nothing_is_timed_unless_needed(monkeypatch):
    def fail(*args):
        raise AssertionError("timed")

    monkeypatch.setattr(precision, "time_training_pass", fail)
    monkeypatch.setattr(precision, "time_inference", fail)
    lines = []
    # explicit choices are kept
    cfg = _cfg("--learner_precision=bf16", "--inference_precision=fp32")
    precision.resolve_auto_precision(cfg, None, FRAMES, lines.append)
    assert (cfg.learner_precision, cfg.inference_precision) == ("bf16", "fp32")
    # a GPU keeps auto (bf16 where the GPU supports it, decided in the learner and policy workers)
    cfg = _cfg()
    cfg.device = "gpu"
    precision.resolve_auto_precision(cfg, None, FRAMES, lines.append)
    assert (cfg.learner_precision, cfg.inference_precision) == ("auto", "auto")
    # a CPU without native bf16: fp32
    monkeypatch.setattr(precision, "reduced_precision_dtype", lambda p, d: None)
    cfg = _cfg()
    precision.resolve_auto_precision(cfg, None, FRAMES, lines.append)
    assert (cfg.learner_precision, cfg.inference_precision) == ("fp32", "fp32")
    assert lines == []


def test_timing_the_real_model_leaves_it_untouched():
    cfg = _cfg()
    torch.manual_seed(0)
    model = ActorCritic(cfg, FRAMES, DISCRETE)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    threads = torch.get_num_threads()
    lines = []
    precision.resolve_auto_precision(cfg, model, FRAMES, lines.append)
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert len(lines) == 1 and "fp32" in lines[0] and "bf16" in lines[0]
    assert cfg.learner_precision in ("fp32", "bf16") and cfg.inference_precision in ("fp32", "bf16")
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) and after[k].dtype == before[k].dtype for k in before)
    assert all(p.grad is None for p in model.parameters())
    assert torch.get_num_threads() == threads
    for dtype in (None, torch.bfloat16):
        assert precision.time_training_pass(model, FRAMES, dtype, repeats=1) > 0
        assert precision.time_inference(model, FRAMES, 4, dtype, repeats=1) > 0


def test_serial_mode_takes_fp32_untimed(monkeypatch):
    """Serial mode promises the same weights for a seed: a timed choice would flip with the CPU's load."""
    _fixed_timings(monkeypatch, (0.066, 0.030), (0.0020, 0.0013))  # bf16 would be timed faster

    def fail(*args):
        raise AssertionError("timed")

    monkeypatch.setattr(precision, "time_training_pass", fail)
    monkeypatch.setattr(precision, "time_inference", fail)
    cfg, lines = _cfg("--serial_mode=True"), []
    precision.resolve_auto_precision(cfg, None, FRAMES, lines.append)
    assert (cfg.learner_precision, cfg.inference_precision) == ("fp32", "fp32")
