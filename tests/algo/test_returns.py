import math

import pytest
import torch

from sample_factory.algo import returns
from sample_factory.algo.returns import calculate_gae, calculate_vtrace

T, B = 17, 5


def _random_batch(seed: int, done_prob: float = 0.2):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, B, generator=g)
    dones = (torch.rand(T, B, generator=g) < done_prob).float()
    values = torch.randn(T + 1, B, generator=g)
    log_rhos = torch.rand(T, B, generator=g) * 4.0 - 2.0  # [-2, 2]: clipping is active for many entries
    return rewards, dones, values, log_rhos


def _vtrace_reference(rewards, dones, values, log_rhos, gamma, rho_bar, c_bar):
    """Direct recursive definition, one env and one step at a time, with python floats."""
    r, d, v, lr = rewards.tolist(), dones.tolist(), values.tolist(), log_rhos.tolist()
    vs = [[0.0] * B for _ in range(T)]
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        vs_next = v[T][b]  # vs_T = V(x_T)
        for t in reversed(range(T)):
            rho = math.exp(lr[t][b])
            rho_c = min(rho_bar, rho)
            c = min(c_bar, rho)
            disc = gamma * (1.0 - d[t][b])
            delta = rho_c * (r[t][b] + disc * v[t + 1][b] - v[t][b])
            vs[t][b] = v[t][b] + delta + disc * c * (vs_next - v[t + 1][b])
            adv[t][b] = rho_c * (r[t][b] + disc * vs_next - v[t][b])
            vs_next = vs[t][b]
    return torch.tensor(vs), torch.tensor(adv)


def _gae_reference(rewards, dones, values, gamma, lam):
    r, d, v = rewards.tolist(), dones.tolist(), values.tolist()
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            nonterminal = 1.0 - d[t][b]
            delta = r[t][b] + gamma * nonterminal * v[t + 1][b] - v[t][b]
            running = delta + gamma * lam * nonterminal * running
            adv[t][b] = running
    adv_t = torch.tensor(adv)
    return adv_t, adv_t + values[:T]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("rho_bar", [1.0, 0.5])
@pytest.mark.parametrize("c_bar", [1.0, 0.5])
def test_vtrace_matches_reference(seed, rho_bar, c_bar):
    rewards, dones, values, log_rhos = _random_batch(seed)
    assert dones.sum() > 0
    vs, adv = calculate_vtrace(rewards, dones, values, log_rhos, gamma=0.97, rho_bar=rho_bar, c_bar=c_bar)
    vs_ref, adv_ref = _vtrace_reference(rewards, dones, values, log_rhos, 0.97, rho_bar, c_bar)
    assert vs.shape == (T, B) and adv.shape == (T, B)
    assert vs.dtype == torch.float32
    torch.testing.assert_close(vs, vs_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(adv, adv_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
def test_gae_matches_reference(seed, lam):
    rewards, dones, values, _ = _random_batch(seed)
    adv, ret = calculate_gae(rewards, dones, values, gamma=0.99, gae_lambda=lam)
    adv_ref, ret_ref = _gae_reference(rewards, dones, values, 0.99, lam)
    torch.testing.assert_close(adv, adv_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ret, ret_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ret, adv + values[:T])


def test_vtrace_on_policy_equals_gae_lambda_one():
    rewards, dones, values, _ = _random_batch(3)
    zero = torch.zeros(T, B)
    vs, pg_adv = calculate_vtrace(rewards, dones, values, zero, gamma=0.95, rho_bar=1.0, c_bar=1.0)
    gae_adv, gae_ret = calculate_gae(rewards, dones, values, gamma=0.95, gae_lambda=1.0)
    torch.testing.assert_close(vs, gae_ret, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pg_adv, gae_adv, atol=1e-5, rtol=1e-5)


def test_done_stops_bootstrapping():
    rewards, _, values, _ = _random_batch(4)
    dones = torch.zeros(T, B)
    t_done = 6
    dones[t_done] = 1.0
    vs, pg_adv = calculate_vtrace(rewards, dones, values, torch.zeros(T, B), gamma=0.99)
    # With rho = 1 and a terminal step: vs_t = V_t + (r_t - V_t) = r_t; nothing after t leaks in.
    torch.testing.assert_close(vs[t_done], rewards[t_done])
    torch.testing.assert_close(pg_adv[t_done], rewards[t_done] - values[t_done])

    # Changing anything after the episode end must not change targets at or before it.
    rewards2, values2 = rewards.clone(), values.clone()
    rewards2[t_done + 1 :] += 10.0
    values2[t_done + 1 :] -= 10.0
    vs2, _ = calculate_vtrace(rewards2, dones, values2, torch.zeros(T, B), gamma=0.99)
    torch.testing.assert_close(vs2[: t_done + 1], vs[: t_done + 1])
    adv_a, _ = calculate_gae(rewards, dones, values, gamma=0.99, gae_lambda=0.9)
    adv_b, _ = calculate_gae(rewards2, dones, values2, gamma=0.99, gae_lambda=0.9)
    torch.testing.assert_close(adv_b[: t_done + 1], adv_a[: t_done + 1])


def test_last_step_bootstraps_from_final_value():
    rewards = torch.tensor([[1.0]])  # [T=1, B=1]
    dones = torch.zeros(1, 1)
    values = torch.tensor([[0.5], [2.0]])  # [T+1, B]
    vs, pg_adv = calculate_vtrace(rewards, dones, values, torch.zeros(1, 1), gamma=0.5)
    assert vs.item() == pytest.approx(1.0 + 0.5 * 2.0)
    assert pg_adv.item() == pytest.approx(1.0 + 0.5 * 2.0 - 0.5)
    adv, ret = calculate_gae(rewards, dones, values, gamma=0.5, gae_lambda=0.9)
    assert ret.item() == pytest.approx(2.0)


def test_no_grad_and_bad_shapes():
    rewards, dones, values, log_rhos = _random_batch(5)
    values.requires_grad_(True)
    vs, adv = calculate_vtrace(rewards, dones, values, log_rhos, gamma=0.99)
    assert not vs.requires_grad and not adv.requires_grad
    with pytest.raises(ValueError):
        calculate_gae(rewards, dones, values[:T], gamma=0.99, gae_lambda=0.95)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reverse_recurrence_numpy_loop_is_bit_identical_to_the_torch_loop(monkeypatch, dtype):
    # The CPU path runs the loop in numpy; the same multiply-then-add per element must give the very same bits,
    # for transposed (non-contiguous) inputs as the learner passes them ([B, T] tensors read as [T, B]).
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, T, generator=g, dtype=dtype).T  # [T, B], not contiguous
    coefs = torch.rand(B, T, generator=g, dtype=dtype).T
    fast = returns.reverse_recurrence(x, coefs)
    monkeypatch.setattr(returns, "NUMPY_LOOP", False)
    slow = returns.reverse_recurrence(x, coefs)
    assert fast.dtype == slow.dtype == dtype and fast.shape == (T, B)
    assert torch.equal(fast, slow)
    expected = [0.0] * B  # the definition, in python floats
    for t in reversed(range(T)):
        expected = [x[t, b].item() + coefs[t, b].item() * expected[b] for b in range(B)]
        assert torch.allclose(fast[t].double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-5)


def test_vtrace_and_gae_identical_with_either_loop(monkeypatch):
    rewards, dones, values, log_rhos = _random_batch(7)
    fast = (
        *calculate_vtrace(rewards, dones, values, log_rhos, 0.99),
        *calculate_gae(rewards, dones, values, 0.99, 0.95),
    )
    monkeypatch.setattr(returns, "NUMPY_LOOP", False)
    slow = (
        *calculate_vtrace(rewards, dones, values, log_rhos, 0.99),
        *calculate_gae(rewards, dones, values, 0.99, 0.95),
    )
    for a, b in zip(fast, slow):
        assert torch.equal(a, b)


def test_reverse_recurrence_keeps_bfloat16_on_the_torch_loop():
    x = torch.randn(T, B).bfloat16()
    out = returns.reverse_recurrence(x, torch.full((T, B), 0.5).bfloat16())
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


@pytest.mark.parametrize("T,B", [(1, 3), (7, 5), (32, 64), (128, 4)])
def test_closed_form_recurrence_equals_the_time_loop(T, B, monkeypatch):
    """The accelerator path of reverse_recurrence (a weighted sum over a [T, T, B] tensor instead of 2T launches)
    gives the loop's values, with episode ends (coefficient 0) inside the window."""
    torch.manual_seed(T)
    x = torch.randn(T, B)
    coefs = torch.rand(T, B) * (torch.rand(T, B) > 0.2)
    monkeypatch.setattr(returns, "NUMPY_LOOP", False)
    loop = returns.reverse_recurrence(x, coefs)
    assert torch.allclose(returns.reverse_recurrence_closed_form(x, coefs), loop, atol=1e-5, rtol=1e-5)
    assert torch.allclose(returns.reverse_recurrence_closed_form(x[:, 0], coefs[:, 0]), loop[:, 0], atol=1e-5)
