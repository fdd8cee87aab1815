import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from sample_factory.algo.base import make_adam
from sample_factory.algo.optim import FusedAdam
from sample_factory.config import parse_cfg

REPO = Path(__file__).resolve().parents[2]


class Net(torch.nn.Module):
    """A conv layer in channels_last (as the atari encoders keep theirs), a linear head, and a parameter the loss
    never reaches (no gradient: skipped, as torch's Adam skips it)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3).to(memory_format=torch.channels_last)
        self.head = torch.nn.Linear(4 * 4 * 4, 3)
        self.unused = torch.nn.Parameter(torch.ones(5))

    def forward(self, x):
        return self.head(torch.tanh(self.conv(x)).flatten(1))


def _net(seed=0) -> Net:
    torch.manual_seed(seed)
    return Net()


def _train(net, opt, steps, seed=1, lr_at=None):
    g = torch.Generator().manual_seed(seed)
    for i in range(steps):
        if lr_at is not None and i == lr_at:
            for group in opt.param_groups:
                group["lr"] = group["lr"] * 0.5
        x = torch.randn(8, 2, 6, 6, generator=g)
        opt.zero_grad(set_to_none=True)
        net(x).pow(2).mean().backward()
        opt.step()


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def _same_state(sa: dict, sb: dict) -> bool:
    return sa.keys() == sb.keys() and all(
        sa[i].keys() == sb[i].keys() and all(torch.equal(sa[i][k], sb[i][k]) for k in sa[i]) for i in sa
    )


HYPER = {"lr": 3e-3, "betas": (0.9, 0.99), "eps": 1e-5, "weight_decay": 1e-2}


def test_updates_are_bit_identical_to_torch_fused_adam():
    ours, theirs = _net(), _net()
    opt_a = FusedAdam(ours.parameters(), **HYPER)
    opt_b = torch.optim.Adam(theirs.parameters(), **HYPER, fused=True)
    _train(ours, opt_a, 6, lr_at=3)
    _train(theirs, opt_b, 6, lr_at=3)
    assert _same(ours, theirs)
    assert not _same(ours, _net()), "the parameters did change"
    assert torch.equal(ours.unused, _net().unused), "a parameter without gradient is left alone"
    sa, sb = opt_a.state_dict(), opt_b.state_dict()
    assert _same_state(sa["state"], sb["state"])
    assert sa["param_groups"] == sb["param_groups"]
    # the moments keep the parameters' memory format (channels_last conv weights)
    assert opt_a.state[ours.conv.weight]["exp_avg"].is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("torch_fused", [True, False])
def test_state_dicts_load_both_ways(torch_fused):
    ours, theirs = _net(), _net()
    opt_a = FusedAdam(ours.parameters(), **HYPER)
    _train(ours, opt_a, 3)
    saved = opt_a.state_dict()
    # ours -> torch: torch's Adam (either implementation) takes our state dict
    theirs.load_state_dict(ours.state_dict())
    opt_b = torch.optim.Adam(theirs.parameters(), lr=1.0, fused=torch_fused)
    opt_b.load_state_dict(saved)
    assert opt_b.param_groups[0]["lr"] == HYPER["lr"]
    # torch -> ours: a fresh FusedAdam continues from torch's state dict exactly as torch's fused Adam does
    again, ref = _net(), _net()
    again.load_state_dict(ours.state_dict())
    ref.load_state_dict(ours.state_dict())
    src = opt_b.state_dict()
    before = {i: {k: v.clone() for k, v in st.items()} for i, st in src["state"].items()}
    opt_c = FusedAdam(again.parameters(), lr=1.0)
    opt_c.load_state_dict(src)
    _train(again, opt_c, 3, seed=2)
    assert _same_state(src["state"], before), "loading copies the moments: the loaded dict is left as it was"
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1.0, fused=True)
    opt_ref.load_state_dict(src)
    _train(ref, opt_ref, 3, seed=2)
    assert _same(again, ref)
    assert _same_state(opt_c.state_dict()["state"], opt_ref.state_dict()["state"])
    assert opt_c.param_groups[0]["betas"] == HYPER["betas"] and opt_c.param_groups[0]["eps"] == HYPER["eps"]


def test_load_refuses_what_it_cannot_continue():
    net = _net()
    opt = FusedAdam(net.parameters())
    with pytest.raises(ValueError, match="parameters"):
        opt.load_state_dict(FusedAdam(list(net.parameters())[:2]).state_dict())
    amsgrad = torch.optim.Adam(net.parameters(), amsgrad=True).state_dict()
    with pytest.raises(ValueError, match="amsgrad"):
        opt.load_state_dict(amsgrad)


def test_zero_grad_keeps_or_drops_gradients():
    net = _net()
    opt = FusedAdam(net.parameters())
    net(torch.randn(2, 2, 6, 6)).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert torch.count_nonzero(net.head.weight.grad) == 0
    opt.zero_grad()
    assert net.head.weight.grad is None


def test_make_adam_picks_the_fused_kernel_unless_asked_not_to():
    cfg = parse_cfg(["--env=CartPole-v1", "--learning_rate=2e-3", "--adam_eps=1e-6"])
    opt = make_adam(cfg, _net().parameters())
    assert isinstance(opt, FusedAdam)
    assert opt.param_groups[0]["lr"] == 2e-3 and opt.param_groups[0]["eps"] == 1e-6
    loop = make_adam(cfg, _net().parameters(), fused=False)
    assert isinstance(loop, torch.optim.Adam) and not loop.param_groups[0]["fused"]
    with pytest.raises(ValueError, match="floating-point"):
        FusedAdam([torch.zeros(3, dtype=torch.int64)])


@pytest.mark.timeout(120)
def test_a_learner_never_imports_dynamo():
    # torch.optim imports torch._dynamo (1.0-1.1 s on the 2-core machine): the point of FusedAdam is that a learner's
    # start never waits for it. A fresh interpreter, because the pytest process may have imported dynamo already.
    script = textwrap.dedent(
        """
        import sys
        import torch
        from sample_factory.algo.registry import make_algorithm
        from tests.algo.appo_fixture import run_scenario
        for name in ("gru_vtrace_normalized", "gaussian_gae_unclipped"):
            out = run_scenario(name, make_algorithm)
        assert out["algo"]["optimizer"]["state"], "the optimizer stepped"
        print(sorted(m for m in sys.modules if m.startswith("torch._dynamo")))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=100, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_found_inf_skips_the_update_on_the_device():
    """With found_inf = 1 nothing moves: parameters, moments and step counts stay as they were; with 0 the step is
    the ordinary one (the NaN/inf guard skips steps this way without a read-back: Algorithm.device_step)."""
    net, ref = _net(0), _net(0)
    opt, ref_opt = FusedAdam(net.parameters(), lr=0.1), FusedAdam(ref.parameters(), lr=0.1)
    x = torch.randn(2, 2, 6, 6).to(memory_format=torch.channels_last)
    for m, o in ((net, opt), (ref, ref_opt)):
        m(x).sum().backward()
        o.step()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    moments = {id(p): {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()}
    net(x).sum().backward()
    opt.step(found_inf=torch.ones(()))
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    for p, s in opt.state.items():
        assert all(torch.equal(v, moments[id(p)][k]) for k, v in s.items())
    opt.zero_grad()
    ref_opt.zero_grad()
    for m in (net, ref):
        m(x).sum().backward()
    opt.step(found_inf=torch.zeros(()))
    ref_opt.step()
    assert all(torch.equal(a, b) for a, b in zip(net.parameters(), ref.parameters(), strict=True))


def test_tensor_learning_rate_matches_a_float_one_and_loads_onto_the_parameters_device():
    """--lr_schedule=kl_adaptive keeps the rate as a device tensor: the kernel's steps are a float rate's (up to the
    rate's float32 rounding), and a state dict whose rate is a tensor loads it as a float32 tensor beside the
    parameters."""
    a, b = _net(), _net()
    opt_a = FusedAdam(a.parameters(), lr=1e-3)
    opt_b = FusedAdam(b.parameters(), lr=1e-3)
    opt_b.param_groups[0]["lr"] = torch.tensor(1e-3, dtype=torch.float32)
    _train(a, opt_a, 5)
    _train(b, opt_b, 5)
    assert not torch.equal(b.conv.weight, _net().conv.weight)  # the tensor rate trained
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(pa, pb, rtol=1e-6, atol=1e-8)
    state = opt_b.state_dict()
    state["param_groups"][0]["lr"] = torch.tensor(2e-3, dtype=torch.float64)
    c = _net()
    opt_c = FusedAdam(c.parameters(), lr=1e-3)
    opt_c.load_state_dict(state)
    lr = opt_c.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor) and lr.dtype == torch.float32 and lr.item() == pytest.approx(2e-3)
    assert lr is not state["param_groups"][0]["lr"]
