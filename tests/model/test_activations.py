import pytest
import torch

from sample_factory.model import activations
from sample_factory.model.activations import FAST_TANH_MIN_ELEMENTS, Tanh, tanh


def _large(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(FAST_TANH_MIN_ELEMENTS // 64 + 3, 64, generator=g) * 3  # past the threshold, saturating too


@pytest.fixture
def identity(monkeypatch):
    """The sigmoid identity forced on, whatever this CPU's timing chose."""
    monkeypatch.setattr(activations, "USE_IDENTITY", True)


def test_fast_path_matches_torch_tanh_and_its_gradient(identity):
    x = _large()
    x_ref = x.clone().requires_grad_(True)
    x.requires_grad_(True)
    y = tanh(x)
    assert y.grad_fn is not None and "TanhFromSigmoid" in type(y.grad_fn).__name__  # the fast path was taken
    y_ref = torch.tanh(x_ref)
    assert (y - y_ref).abs().max().item() <= 3e-7
    grad_out = torch.randn_like(y)
    y.backward(grad_out)
    y_ref.backward(grad_out)
    assert torch.allclose(x.grad, x_ref.grad, atol=2e-6, rtol=0)


def test_saturation_and_non_finite_inputs(identity):
    x = _large()
    x[0, :4] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0])
    x[1, :2] = torch.tensor([1e4, -1e4])
    y = tanh(x)
    assert y[0, 0].item() == 1.0 and y[0, 1].item() == -1.0 and torch.isnan(y[0, 2]) and y[0, 3].item() == 0.0
    assert y[1, 0].item() == 1.0 and y[1, 1].item() == -1.0
    assert y[torch.isfinite(y)].abs().max().item() <= 1.0


@pytest.mark.parametrize(
    "x",
    [torch.randn(8, 64), _large().double(), _large().bfloat16()],
    ids=["small float32", "float64", "bfloat16"],
)
def test_other_inputs_use_torch_tanh_exactly(x):
    assert torch.equal(tanh(x), torch.tanh(x))


def test_inference_mode_and_module(identity, monkeypatch):
    x = _large()
    with torch.inference_mode():
        y = Tanh()(x)
    assert not y.requires_grad and (y - torch.tanh(x)).abs().max().item() <= 3e-7
    assert not torch.equal(y, torch.tanh(x))  # the identity was used (it rounds differently somewhere)
    with torch.no_grad():
        assert Tanh()(x.clone().requires_grad_(True)).grad_fn is None
    monkeypatch.setattr(activations, "FAST_TANH_MIN_ELEMENTS", 10**12)  # the switch benchmarks use
    assert torch.equal(Tanh()(x), torch.tanh(x))


def test_tanh_encoders_use_it():
    import gymnasium as gym
    import numpy as np

    from sample_factory.model.encoders import MlpEncoder

    enc = MlpEncoder(gym.spaces.Box(-1, 1, (4,), np.float32), [64, 64], "tanh")
    assert sum(isinstance(m, Tanh) for m in enc.modules()) == 2
    assert not any(isinstance(m, torch.nn.Tanh) for m in enc.modules())


def test_the_faster_path_is_timed_once_per_process(monkeypatch):
    calls = []

    def timed(torch_s: float, identity_s: float):
        def time_both():
            calls.append(1)
            return torch_s, identity_s

        return time_both

    x = _large()
    # torch's kernel 4x slower (the AMD EPYC): the identity, decided at the first large tensor, then kept
    monkeypatch.setattr(activations, "USE_IDENTITY", None)
    monkeypatch.setattr(activations, "time_both", timed(172e-6, 40e-6))
    small = torch.randn(8, 8)
    assert torch.equal(tanh(small), torch.tanh(small))
    assert not calls  # small tensors never need the choice
    assert not torch.equal(tanh(x), torch.tanh(x)) and activations.USE_IDENTITY is True
    tanh(x)
    assert len(calls) == 1
    # the identity 4x slower (the Intel Xeon): torch's kernel
    monkeypatch.setattr(activations, "USE_IDENTITY", None)
    monkeypatch.setattr(activations, "time_both", timed(10e-6, 40e-6))
    assert torch.equal(tanh(x), torch.tanh(x)) and activations.USE_IDENTITY is False
    # within MIN_SPEEDUP: torch's kernel (one kernel, fewer surprises)
    monkeypatch.setattr(activations, "USE_IDENTITY", None)
    monkeypatch.setattr(activations, "time_both", timed(50e-6, 40e-6))
    assert torch.equal(tanh(x), torch.tanh(x)) and activations.USE_IDENTITY is False


def test_time_both_measures_both_kernels():
    torch_s, identity_s = activations.time_both(reps=3)
    assert 0 < torch_s < 0.1 and 0 < identity_s < 0.1
