import math

import numpy as np
import pytest
import torch

from sample_factory.algo.distributions import CategoricalDist
from sample_factory.algo.losses import (
    clamp_ratio,
    clipped_value_loss,
    entropy_loss,
    kl_penalty,
    masked_mean,
    normalize_advantages,
    ppo_clip_bounds,
    ppo_policy_loss,
    symmetric_kl_loss,
)


def test_masked_mean():
    x = torch.tensor([1.0, 2.0, 3.0, 10.0])
    assert masked_mean(x, None).item() == pytest.approx(4.0)
    assert masked_mean(x, torch.tensor([True, True, True, False])).item() == pytest.approx(2.0)
    assert masked_mean(x, torch.tensor([1.0, 0.0, 1.0, 0.0])).item() == pytest.approx(2.0)


def test_masked_mean_all_zero_mask_is_zero_not_nan():
    x = torch.tensor([1.0, float("nan"), 3.0], requires_grad=True)
    out = masked_mean(x, torch.zeros(3))
    assert out.item() == 0.0
    out.backward()
    assert torch.equal(x.grad, torch.zeros(3))


def test_masked_mean_ignores_nan_in_masked_entries():
    x = torch.tensor([2.0, float("nan"), 4.0])
    assert masked_mean(x, torch.tensor([True, False, True])).item() == pytest.approx(3.0)


def test_ppo_policy_loss_hand_computed():
    # ratios: 1.5, 1.5, 1.0, 0.5 ; clip 0.2 -> clipped ratios 1.2, 1.2, 1.0, 0.8
    ratios = torch.tensor([1.5, 1.5, 1.0, 0.5])
    log_old = torch.tensor([-1.0, -2.0, -0.5, -1.5])
    log_new = (log_old + ratios.log()).requires_grad_(True)
    adv = torch.tensor([2.0, -2.0, 1.0, -1.0])
    loss, stats = ppo_policy_loss(log_new, log_old, adv, clip_ratio=0.2)
    # per-sample min(r*A, clip(r)*A):
    #   A=+2, r=1.5: min(3.0, 2.4) = 2.4  (clipped, no grad)
    #   A=-2, r=1.5: min(-3.0, -2.4) = -3.0  (unclipped: pessimistic)
    #   A=+1, r=1.0: 1.0
    #   A=-1, r=0.5: min(-0.5, -0.8) = -0.8  (clipped, no grad)
    expected = -(2.4 - 3.0 + 1.0 - 0.8) / 4
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert stats["clip_fraction"].item() == pytest.approx(3 / 4)
    assert stats["ratio_mean"].item() == pytest.approx((1.5 + 1.5 + 1.0 + 0.5) / 4)
    kl = sum((r - 1) - math.log(r) for r in [1.5, 1.5, 1.0, 0.5]) / 4
    assert stats["approx_kl"].item() == pytest.approx(kl, abs=1e-6)
    assert all(not v.requires_grad for v in stats.values())

    loss.backward()
    # d loss / d log_new_i = -r_i * A_i / N for unclipped samples, 0 for clipped ones.
    expected_grad = torch.tensor([0.0, -1.5 * -2.0 / 4, -1.0 * 1.0 / 4, 0.0])
    torch.testing.assert_close(log_new.grad, expected_grad)


def test_ppo_policy_loss_mask():
    log_old = torch.zeros(3)
    log_new = torch.log(torch.tensor([1.5, 1.0, 2.0]))
    adv = torch.tensor([1.0, 1.0, 5.0])
    mask = torch.tensor([True, True, False])
    loss, stats = ppo_policy_loss(log_new, log_old, adv, clip_ratio=0.2, mask=mask)
    assert loss.item() == pytest.approx(-(1.2 + 1.0) / 2)
    assert stats["clip_fraction"].item() == pytest.approx(0.5)
    assert stats["ratio_mean"].item() == pytest.approx(1.25)


def test_clipped_value_loss_picks_max_branch():
    values_old = torch.tensor([0.0, 0.0])
    values_new = torch.tensor([1.0, 1.0], requires_grad=True)
    targets = torch.tensor([2.0, -1.0])
    loss = clipped_value_loss(values_new, values_old, targets, clip_value=0.2)
    # sample 0: unclipped (1-2)^2 = 1, clipped (0.2-2)^2 = 3.24 -> 3.24 (clipped branch wins, no grad)
    # sample 1: unclipped (1+1)^2 = 4, clipped (0.2+1)^2 = 1.44 -> 4 (unclipped wins)
    assert loss.item() == pytest.approx(0.5 * (3.24 + 4.0) / 2)
    loss.backward()
    # grad of 0.5*mean: sample 0 -> 0 (clipped const), sample 1 -> 0.5 * 2 * (1 - (-1)) / 2 = 1.0
    torch.testing.assert_close(values_new.grad, torch.tensor([0.0, 1.0]))


def test_value_loss_without_clipping_is_half_mse():
    values_new = torch.tensor([1.0, 3.0])
    targets = torch.tensor([0.0, 1.0])
    values_old = torch.tensor([100.0, -100.0])  # must be ignored
    for clip in (0.0, -1.0):
        loss = clipped_value_loss(values_new, values_old, targets, clip_value=clip)
        assert loss.item() == pytest.approx(0.5 * (1.0 + 4.0) / 2)
    masked = clipped_value_loss(values_new, values_old, targets, 0.0, mask=torch.tensor([False, True]))
    assert masked.item() == pytest.approx(0.5 * 4.0)


def test_entropy_loss():
    ent = torch.tensor([1.0, 2.0, 3.0])
    assert entropy_loss(ent, 0.01).item() == pytest.approx(-0.02)
    assert entropy_loss(ent, 0.5, mask=torch.tensor([0.0, 0.0, 1.0])).item() == pytest.approx(-1.5)
    assert entropy_loss(ent, 0.5, mask=torch.zeros(3)).item() == 0.0


def test_normalize_advantages_matches_numpy_reference():
    g = torch.Generator().manual_seed(0)
    adv = 3.0 * torch.randn(50, generator=g) + 1.5
    mask = torch.rand(50, generator=g) < 0.7
    a, m = adv.double().numpy(), mask.numpy()
    ref = (a - a[m].mean()) / (a[m].std() + 1e-7)  # population std, as in the loss
    out = normalize_advantages(adv, mask)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6)
    assert out[mask].mean().item() == pytest.approx(0.0, abs=1e-6)
    assert out[mask].std(correction=0).item() == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(normalize_advantages(adv, None).numpy(), (a - a.mean()) / (a.std() + 1e-7), rtol=1e-5)


def test_normalize_advantages_ignores_masked_out_entries():
    adv = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mask = torch.tensor([True, True, True, False])
    wild = adv.clone()
    wild[3] = float("nan")
    out, out_wild = normalize_advantages(adv, mask), normalize_advantages(wild, mask)
    assert torch.equal(out[:3], out_wild[:3])
    std = math.sqrt(2.0 / 3.0)
    torch.testing.assert_close(out[:3], torch.tensor([-1.0, 0.0, 1.0]) / (std + 1e-7))


def test_normalize_advantages_all_masked_is_finite():
    adv = torch.tensor([0.5, -2.0, 3.0])
    out = normalize_advantages(adv, torch.zeros(3, dtype=torch.bool))
    # mean and std over nothing are 0: the advantages are only scaled (the masked loss terms ignore them)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, adv / 1e-7)


# ---- clip modes, ratio clamp, KL penalty, symmetric KL ---------------------------------------------------------
def test_ppo_clip_bounds():
    assert ppo_clip_bounds(0.1) == pytest.approx((0.9, 1.1))
    assert ppo_clip_bounds(0.25, "unbiased") == pytest.approx((0.8, 1.25))  # 1 / 1.25 = 0.8
    lo, hi = ppo_clip_bounds(0.2, "unbiased")
    assert math.log(hi) == pytest.approx(-math.log(lo))  # symmetric in log-ratio
    with pytest.raises(ValueError):
        ppo_clip_bounds(0.2, "asymmetric")


def test_ppo_policy_loss_unbiased_clip_hand_computed():
    # c = 0.25: symmetric [0.75, 1.25], unbiased [0.8, 1.25]. Ratios 0.78, 1.0, 1.5 with advantages -1, 1, 2.
    ratios = torch.tensor([0.78, 1.0, 1.5])
    log_old = torch.tensor([-1.0, -0.3, -2.0])
    adv = torch.tensor([-1.0, 1.0, 2.0])

    log_new = (log_old + ratios.log()).requires_grad_(True)
    loss, stats = ppo_policy_loss(log_new, log_old, adv, 0.25, clip_mode="unbiased")
    #   r=0.78, A=-1: min(-0.78, clip(0.78)=0.8 * -1) = -0.8 (clipped, no grad)
    #   r=1.0,  A=+1: 1.0
    #   r=1.5,  A=+2: min(3.0, 1.25 * 2) = 2.5 (clipped, no grad)
    assert loss.item() == pytest.approx(-(-0.8 + 1.0 + 2.5) / 3, abs=1e-6)
    assert stats["clip_fraction"].item() == pytest.approx(2 / 3)
    loss.backward()
    torch.testing.assert_close(log_new.grad, torch.tensor([0.0, -1.0 / 3, 0.0]))

    log_new = (log_old + ratios.log()).requires_grad_(True)
    loss, stats = ppo_policy_loss(log_new, log_old, adv, 0.25)  # symmetric: 0.78 is inside [0.75, 1.25]
    assert loss.item() == pytest.approx(-(-0.78 + 1.0 + 2.5) / 3, abs=1e-6)
    assert stats["clip_fraction"].item() == pytest.approx(1 / 3)
    loss.backward()
    torch.testing.assert_close(log_new.grad, torch.tensor([-0.78 * -1.0 / 3, -1.0 / 3, 0.0]))


def test_clamp_ratio():
    r = torch.tensor([0.01, 0.5, 1.0, 19.0, 50.0])
    torch.testing.assert_close(clamp_ratio(r, 20.0), torch.tensor([0.05, 0.5, 1.0, 19.0, 20.0]))
    for off in (0.0, -1.0):
        assert torch.equal(clamp_ratio(r, off), r)


def test_ppo_ratio_clamp_bounds_a_stale_samples_pull():
    """A stale sample with ratio 50 and a negative advantage: the pessimistic min picks the unclipped r * A, so
    without the clamp its loss term (and gradient) grows with r; with --ppo_ratio_clamp=20 both are capped."""
    log_old = torch.zeros(2)
    adv = torch.tensor([-1.0, 1.0])
    ratios = torch.tensor([50.0, 1.0])

    log_new = ratios.log().requires_grad_(True)
    loss, stats = ppo_policy_loss(log_new, log_old, adv, 0.1)
    assert loss.item() == pytest.approx(-(-50.0 + 1.0) / 2, rel=1e-6)
    loss.backward()
    assert log_new.grad[0].item() == pytest.approx(50.0 / 2, rel=1e-6)  # d(-r*A/N)/dlog r = -r*A/N

    log_new = ratios.log().requires_grad_(True)
    loss, clamped_stats = ppo_policy_loss(log_new, log_old, adv, 0.1, ratio_clamp=20.0)
    assert loss.item() == pytest.approx(-(-20.0 + 1.0) / 2, rel=1e-6)
    loss.backward()
    torch.testing.assert_close(log_new.grad, torch.tensor([0.0, -0.5]))
    # the stats describe the raw ratios
    assert clamped_stats["ratio_mean"].item() == pytest.approx(stats["ratio_mean"].item())
    assert clamped_stats["clip_fraction"].item() == pytest.approx(0.5)


def test_decoupled_ppo_loss_is_ppo_around_the_proximal_policy_weighted_by_it():
    """The decoupled objective (Hilton et al. 2021): w * min(r' A, clip(r', 1 - c, 1 + c) A) with w = pi_prox / mu and
    r' = pi / pi_prox, by hand, its gradient, and PPO's loss exactly where pi_prox = mu."""
    log_old = torch.tensor([-1.0, -0.5, -2.0, -1.2])  # mu, the behaviour policy
    w = torch.tensor([1.5, 0.5, 1.0, 2.0])  # pi_prox / mu: the policy moved since these were collected
    r_prox = torch.tensor([1.3, 0.7, 1.05, 0.85])  # pi / pi_prox
    adv = torch.tensor([1.0, -1.0, 2.0, -0.5])
    log_prox = log_old + w.log()

    log_new = (log_prox + r_prox.log()).requires_grad_(True)
    loss, stats = ppo_policy_loss(log_new, log_old, adv, 0.2, log_prob_prox=log_prox)
    #   w=1.5, r'=1.3, A=+1: 1.5 * min(1.3, 1.2) = 1.8 (clipped, no grad)
    #   w=0.5, r'=0.7, A=-1: 0.5 * min(-0.7, -0.8) = -0.4 (clipped, no grad)
    #   w=1.0, r'=1.05, A=+2: 2.1
    #   w=2.0, r'=0.85, A=-0.5: 2 * min(-0.425, -0.4) = -0.85
    assert loss.item() == pytest.approx(-(1.8 - 0.4 + 2.1 - 0.85) / 4, abs=1e-6)
    loss.backward()  # d(-w r' A / N) / d log pi = -w r' A / N where unclipped
    torch.testing.assert_close(log_new.grad, torch.tensor([0.0, 0.0, -1.05 * 2.0 / 4, 2.0 * 0.85 * 0.5 / 4]))
    assert stats["clip_fraction"].item() == pytest.approx(0.5)  # of r' against [0.8, 1.2]
    assert stats["ratio_mean"].item() == pytest.approx(float(r_prox.mean()), rel=1e-6)
    kl = float(((r_prox - 1) - r_prox.log()).mean())  # from pi_prox, not from mu
    assert stats["approx_kl"].item() == pytest.approx(kl, rel=1e-5)

    # pi_prox = mu: exactly PPO's loss, gradient and stats
    log_new = (log_old + r_prox.log()).requires_grad_(True)
    plain, plain_stats = ppo_policy_loss(log_new, log_old, adv, 0.2, ratio_clamp=20.0)
    (plain_grad,) = torch.autograd.grad(plain, log_new)
    same, same_stats = ppo_policy_loss(log_new, log_old, adv, 0.2, ratio_clamp=20.0, log_prob_prox=log_old.clone())
    (same_grad,) = torch.autograd.grad(same, log_new)
    assert same.item() == plain.item() and torch.equal(same_grad, plain_grad)
    assert all(same_stats[k].item() == plain_stats[k].item() for k in plain_stats)


def test_kl_penalty_value_and_gradient_are_unbiased():
    """Averaged over actions drawn from the behaviour policy mu (here exactly: weighted by mu), the estimator's value
    is KL(mu || pi) and its gradient is the analytic KL's gradient."""
    mu = torch.tensor([0.6, 0.3, 0.1])
    logits = torch.tensor([0.2, -0.4, 1.1], requires_grad=True)

    pi_log = torch.log_softmax(logits, -1)
    exact = CategoricalDist(mu.log().unsqueeze(0)).kl(CategoricalDist(logits.unsqueeze(0)))[0]
    (grad_exact,) = torch.autograd.grad(exact, logits)

    expectation = sum(mu[a] * kl_penalty(pi_log[a : a + 1], mu.log()[a : a + 1]) for a in range(3))
    (grad_est,) = torch.autograd.grad(expectation, logits)
    assert expectation.item() == pytest.approx(exact.item(), rel=1e-5)
    torch.testing.assert_close(grad_est, grad_exact)
    # by hand: sum_a mu(a) log(mu(a) / pi(a))
    p = torch.softmax(logits.detach(), -1)
    assert exact.item() == pytest.approx(float((mu * (mu / p).log()).sum()), rel=1e-5)


def test_kl_penalty_is_zero_with_zero_gradient_on_policy_and_masked():
    log_old = torch.tensor([-0.5, -1.5, -2.0])
    log_new = log_old.clone().requires_grad_(True)
    value = kl_penalty(log_new, log_old)
    value.backward()
    assert value.item() == 0.0 and torch.equal(log_new.grad, torch.zeros(3))  # no noise where pi == mu

    # per sample (r - 1) - log r >= 0; masked-out samples count for nothing
    log_new = torch.tensor([-0.5 + math.log(2.0), -1.5, 5.0])
    value = kl_penalty(log_new, log_old, mask=torch.tensor([True, True, False]))
    assert value.item() == pytest.approx((1.0 - math.log(2.0)) / 2, rel=1e-6)


def test_symmetric_kl_loss():
    skl = torch.tensor([0.5, 1.5, 100.0])
    assert symmetric_kl_loss(skl, 0.1, mask=torch.tensor([True, True, False])).item() == pytest.approx(0.1)
    assert symmetric_kl_loss(skl, 0.0).item() == 0.0
