import math

import numpy as np
import pytest
import torch

from sample_factory.algo.losses import (
    clipped_value_loss,
    entropy_loss,
    masked_mean,
    normalize_advantages,
    ppo_policy_loss,
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
