import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.distributions import Categorical, Normal, kl_divergence

from sample_factory.algo.distributions import (
    CategoricalDist,
    DiagGaussianDist,
    has_uniform_distribution,
    make_distribution,
    num_action_params,
)

B, A, D = 8, 5, 3


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_categorical_matches_torch_reference():
    logits = torch.randn(B, A) * 3
    dist = CategoricalDist(logits)
    ref = Categorical(logits=logits)
    actions = torch.randint(0, A, (B,))
    torch.testing.assert_close(dist.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    torch.testing.assert_close(dist.probs, ref.probs)
    assert torch.equal(dist.mode(), logits.argmax(-1))

    other_logits = torch.randn(B, A)
    other = CategoricalDist(other_logits)
    torch.testing.assert_close(dist.kl(other), kl_divergence(ref, Categorical(logits=other_logits)))
    torch.testing.assert_close(dist.kl(dist), torch.zeros(B), atol=1e-6, rtol=0)


def test_categorical_sample_shape_and_frequencies():
    dist = CategoricalDist(torch.randn(B, A))
    s = dist.sample()
    assert s.shape == (B,) and s.dtype == torch.int64
    assert ((s >= 0) & (s < A)).all()

    probs = torch.tensor([0.05, 0.1, 0.2, 0.25, 0.4])
    n = 20_000
    big = CategoricalDist(probs.log().expand(n, A))
    freq = torch.bincount(big.sample(), minlength=A).float() / n
    # std of a frequency estimate <= sqrt(0.25 / 20000) ~ 0.0035; allow ~4 sigma.
    torch.testing.assert_close(freq, probs, atol=0.015, rtol=0)


def test_categorical_mask():
    logits = torch.randn(B, A)
    mask = torch.ones(B, A, dtype=torch.bool)
    mask[:, 1] = False
    mask[0, :] = torch.tensor([False, False, True, False, False])  # only one legal action
    dist = CategoricalDist(logits, mask=mask)

    for _ in range(200):
        s = dist.sample()
        assert mask.gather(1, s.unsqueeze(1)).all()
    assert dist.sample()[0].item() == 2
    assert dist.mode()[0].item() == 2

    lp = dist.log_prob(torch.full((B,), 1))
    assert torch.isfinite(lp).all() and (lp < -1e30).all()
    assert torch.equal(dist.probs[:, 1], torch.zeros(B))

    # entropy equals that of the renormalised distribution over legal actions only
    ref = Categorical(logits=logits.masked_fill(~mask, float("-inf")))
    torch.testing.assert_close(dist.entropy(), ref.entropy())
    assert dist.entropy()[0].item() == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(dist.kl(dist), torch.zeros(B), atol=1e-6, rtol=0)


def test_categorical_mask_no_nan_and_grad():
    logits = torch.randn(B, A, requires_grad=True)
    mask = torch.zeros(B, A, dtype=torch.bool)
    mask[1:, 0] = True  # row 0 fully masked: degenerate but must stay finite
    dist = CategoricalDist(logits, mask=mask)
    total = dist.entropy().sum() + dist.log_prob(torch.zeros(B, dtype=torch.long)).sum()
    assert torch.isfinite(total)
    total.backward()
    assert torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("log_std_shape", [(B, D), (D,)])
def test_diag_gaussian_matches_torch_reference(log_std_shape):
    mean = torch.randn(B, D)
    log_std = torch.randn(*log_std_shape) * 0.5
    dist = DiagGaussianDist(mean, log_std)
    ref = Normal(mean, log_std.exp().expand_as(mean))
    actions = torch.randn(B, D) * 2
    torch.testing.assert_close(dist.log_prob(actions), ref.log_prob(actions).sum(-1))
    torch.testing.assert_close(dist.entropy(), ref.entropy().sum(-1))
    assert torch.equal(dist.mode(), mean)

    other = DiagGaussianDist(torch.randn(B, D), torch.randn(B, D) * 0.5)
    ref_other = Normal(other.mean, other.std)
    torch.testing.assert_close(dist.kl(other), kl_divergence(ref, ref_other).sum(-1))
    torch.testing.assert_close(dist.kl(dist), torch.zeros(B), atol=1e-6, rtol=0)


def test_diag_gaussian_sample_statistics():
    mean = torch.tensor([1.0, -2.0])
    log_std = torch.tensor([0.0, np.log(0.5)], dtype=torch.float32)
    n = 20_000
    dist = DiagGaussianDist(mean.expand(n, 2), log_std)
    s = dist.sample()
    assert s.shape == (n, 2) and s.dtype == torch.float32
    torch.testing.assert_close(s.mean(0), mean, atol=0.03, rtol=0)
    torch.testing.assert_close(s.std(0), log_std.exp(), atol=0.03, rtol=0)


def test_num_action_params_and_make_distribution():
    disc = gym.spaces.Discrete(4)
    box = gym.spaces.Box(low=-1.0, high=1.0, shape=(D,), dtype=np.float32)
    assert num_action_params(disc) == 4
    assert num_action_params(box) == D

    assert isinstance(make_distribution(disc, torch.randn(B, 4)), CategoricalDist)
    mask = torch.ones(B, 4, dtype=torch.bool)
    assert make_distribution(disc, torch.randn(B, 4), mask=mask).mask is mask
    gauss = make_distribution(box, torch.randn(B, D), log_std=torch.zeros(D))
    assert isinstance(gauss, DiagGaussianDist)
    assert gauss.log_prob(torch.zeros(B, D)).shape == (B,)

    with pytest.raises(ValueError):
        make_distribution(box, torch.randn(B, D))  # missing log_std
    with pytest.raises(ValueError):
        num_action_params(gym.spaces.MultiBinary(3))
    with pytest.raises(ValueError):
        num_action_params(gym.spaces.Box(low=-1.0, high=1.0, shape=(2, 2)))


# ---- --exploration_loss=symmetric_kl -------------------------------------------------------------------------
def test_symmetric_kl_to_uniform_hand_computed():
    p = [0.5, 0.25, 0.25]
    u = 1.0 / 3.0
    kl_u_p = sum(u * math.log(u / pi) for pi in p)  # KL(u || p)
    kl_p_u = sum(pi * math.log(pi / u) for pi in p)  # KL(p || u)
    dist = CategoricalDist(torch.tensor([p]).log())
    assert dist.symmetric_kl_to_uniform().item() == pytest.approx(kl_u_p + kl_p_u, rel=1e-6)
    # the same through torch's reference KL
    ref, uni = Categorical(probs=torch.tensor(p)), Categorical(probs=torch.full((3,), u))
    expected = kl_divergence(uni, ref) + kl_divergence(ref, uni)
    assert dist.symmetric_kl_to_uniform().item() == pytest.approx(expected.item(), rel=1e-6)
    # uniform: 0, whatever the logits' offset
    assert CategoricalDist(torch.full((2, 4), 7.0)).symmetric_kl_to_uniform().abs().max().item() < 1e-6


def test_symmetric_kl_grows_without_bound_unlike_entropy():
    """As one action's probability goes to 0, the entropy stays bounded (H <= log A) but the symmetric KL grows
    like -log(eps) / A: the penalty keeps every action possible."""
    values = []
    for eps in (1e-2, 1e-4, 1e-8):
        d = CategoricalDist(torch.tensor([[1.0 - eps, eps]]).log())
        values.append(d.symmetric_kl_to_uniform().item())
        assert d.entropy().item() <= math.log(2) + 1e-6
    assert values[0] < values[1] < values[2]
    # -mean(log p) - H(p) with p = [1 - eps, eps]: -0.5 * (log(1 - eps) + log(eps)) - H, and H ~ 0, log(1 - eps) ~ 0
    assert values[2] == pytest.approx(-0.5 * math.log(1e-8), rel=1e-3)


def test_symmetric_kl_to_uniform_over_allowed_actions_only():
    logits = torch.tensor([[0.0, math.log(3.0), 5.0], [1.0, 2.0, 3.0]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    out = CategoricalDist(logits, mask=mask).symmetric_kl_to_uniform()
    # row 0: p = [0.25, 0.75] over the 2 allowed actions, u = [0.5, 0.5]; the masked action counts for nothing
    p, u = [0.25, 0.75], 0.5
    expected = sum(u * math.log(u / pi) for pi in p) + sum(pi * math.log(pi / u) for pi in p)
    assert out[0].item() == pytest.approx(expected, rel=1e-5)
    assert out[1].item() == 0.0  # no allowed action: nothing to compare
    assert torch.isfinite(out).all()
    logits.requires_grad_(True)
    CategoricalDist(logits, mask=mask).symmetric_kl_to_uniform().sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 2] == 0.0


def test_symmetric_kl_composite_sums_parts_and_gaussian_has_none():
    space = gym.spaces.MultiDiscrete([2, 3])
    params = torch.randn(4, 5)
    d = make_distribution(space, params)
    parts = (
        CategoricalDist(params[:, :2]).symmetric_kl_to_uniform()
        + CategoricalDist(params[:, 2:]).symmetric_kl_to_uniform()
    )
    torch.testing.assert_close(d.symmetric_kl_to_uniform(), parts)
    with pytest.raises(ValueError, match="uniform"):
        DiagGaussianDist(torch.zeros(2, 1), torch.zeros(1)).symmetric_kl_to_uniform()
    mixed = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,), np.float32)))
    with pytest.raises(ValueError, match="uniform"):
        make_distribution(mixed, torch.zeros(2, 3), torch.zeros(1)).symmetric_kl_to_uniform()


@pytest.mark.parametrize(
    "space, expected",
    [
        (gym.spaces.Discrete(3), True),
        (gym.spaces.MultiDiscrete([2, 3]), True),
        (gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiDiscrete([3]))), True),
        (gym.spaces.Box(-1, 1, (2,), np.float32), False),
        (gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,), np.float32))), False),
    ],
)
def test_has_uniform_distribution(space, expected):
    assert has_uniform_distribution(space) is expected
