"""APPO with the loss options: --exploration_loss=symmetric_kl, --kl_loss_coeff, --ppo_clip_mode=unbiased,
--ppo_ratio_clamp and --decoupled_ppo reach the minibatch loss (each changes it by exactly its term), and the action
spaces symmetric_kl cannot apply to are rejected before a run starts."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.algo.appo import APPOAlgorithm
from sample_factory.algo.registry import make_algorithm
from sample_factory.config import ConfigError, parse_cfg
from sample_factory.model.actor_critic import ActorCritic
from tests.algo.appo_fixture import RECORDED_GAUSSIAN_PARAM_SUM, SMALL, VEC, make_batch, run_scenario

DISCRETE = gym.spaces.Discrete(3)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


def _minibatch(*flags: str, action_space: gym.Space = DISCRETE, log_probs: float | None = None):
    """(loss, stats) of one minibatch holding the whole fixed batch, for a model initialised from seed 0."""
    torch.manual_seed(0)
    cfg = parse_cfg([*SMALL, "--use_rnn=False", *flags])
    algo = make_algorithm(cfg, ActorCritic(cfg, VEC, action_space), torch.device("cpu"))
    batch = make_batch(VEC, action_space, 0, version=5)
    if log_probs is not None:
        batch["log_probs"][:] = log_probs
    if isinstance(action_space, gym.spaces.MultiDiscrete):  # make_batch draws Gaussian actions for non-Discrete
        g = torch.Generator().manual_seed(5)
        batch["actions"] = torch.stack(
            [torch.randint(0, int(n), batch["actions"].shape[:2], generator=g) for n in action_space.nvec], -1
        )
    p = algo.prepare(batch, 5, None)
    loss, stats, _ = algo.minibatch_loss(p, torch.arange(p.is_first.shape[0]))
    return loss, stats


def test_kl_loss_adds_coeff_times_the_kl_estimate():
    base_loss, base = _minibatch()
    loss, stats = _minibatch("--kl_loss_coeff=0.5")
    assert "kl_loss" not in base  # off by default: not reported
    # the penalty is the approx_kl statistic (same estimator, same valid samples), weighted
    assert stats["kl_loss"].item() == pytest.approx(0.5 * stats["approx_kl"].item(), rel=1e-6)
    assert stats["kl_loss"].item() > 0
    assert (loss - base_loss).item() == pytest.approx(stats["kl_loss"].item(), rel=1e-5)


def test_symmetric_kl_replaces_the_entropy_bonus():
    ent_loss, ent = _minibatch("--exploration_loss_coeff=0.01")
    loss, stats = _minibatch("--exploration_loss_coeff=0.01", "--exploration_loss=symmetric_kl")
    assert "symmetric_kl" not in ent and stats["symmetric_kl"].item() > 0
    assert stats["entropy"].item() == pytest.approx(ent["entropy"].item())  # still reported
    # entropy: -0.01 * H; symmetric_kl: +0.01 * SKL
    delta = 0.01 * (stats["symmetric_kl"].item() + ent["entropy"].item())
    assert (loss - ent_loss).item() == pytest.approx(delta, rel=1e-4)


def test_symmetric_kl_on_multidiscrete():
    space = gym.spaces.MultiDiscrete([2, 3])
    loss, stats = _minibatch("--exploration_loss=symmetric_kl", action_space=space)
    assert math.isfinite(loss.item()) and stats["symmetric_kl"].item() > 0


def test_unbiased_clip_mode_reaches_the_policy_loss():
    # the batch's behaviour log-probs (about -0.7) against a fresh 3-action policy (about -1.1): ratios around 0.67,
    # many inside the symmetric [0.5, 1.5] but below the unbiased lower bound 1 / 1.5 = 0.667
    _, sym = _minibatch("--ppo_clip_ratio=0.5")
    _, unb = _minibatch("--ppo_clip_ratio=0.5", "--ppo_clip_mode=unbiased")
    assert unb["clip_fraction"].item() > sym["clip_fraction"].item()
    assert unb["policy_loss"].item() != sym["policy_loss"].item()


def test_ratio_clamp_reaches_the_policy_loss():
    # behaviour log-prob 3.0 (an impossible probability, so every ratio is ~e^-4 < 1/20): clamped vs not
    _, off = _minibatch("--ppo_ratio_clamp=0", log_probs=3.0)
    _, on = _minibatch("--ppo_ratio_clamp=20", log_probs=3.0)
    assert off["ratio_mean"].item() < 0.05 and on["ratio_mean"].item() == off["ratio_mean"].item()
    assert on["policy_loss"].item() != pytest.approx(off["policy_loss"].item())


def test_default_ratio_clamp_changes_the_stale_gaussian_scenario():
    """The recorded Gaussian scenario has ratios below 1/20 (it runs with --ppo_ratio_clamp=0 to reproduce its
    record): with the default clamp it trains differently, and still finitely."""
    result = run_scenario("gaussian_gae_unclipped", make_algorithm, extra=("--ppo_ratio_clamp=20",))
    param_sum = sum(float(p.double().sum()) for p in result["model"].values())
    assert param_sum != pytest.approx(RECORDED_GAUSSIAN_PARAM_SUM, rel=1e-5)
    assert all(math.isfinite(v) for s in result["stats"] for v in s.values())


def test_decoupled_ppo_clips_around_the_weights_the_iteration_starts_from():
    """The fixed batch's behaviour log-probs (about -0.7) are far from a fresh 3-action policy (about -1.1): measured
    from them, the first step already has a KL and clipped ratios; measured from the proximal policy (the weights
    before the first step, the ones the loss evaluates) it has none, and the loss still differs from PPO's."""
    plain_loss, plain = _minibatch()
    loss, stats = _minibatch("--decoupled_ppo=True")
    assert plain["approx_kl"].item() > 0.01 and plain["ratio_mean"].item() < 0.9
    assert stats["approx_kl"].item() == pytest.approx(0.0, abs=1e-6)
    assert stats["ratio_mean"].item() == pytest.approx(1.0, abs=1e-5) and stats["clip_fraction"].item() == 0.0
    assert loss.item() != pytest.approx(plain_loss.item())  # weighted by pi_prox / mu, clipped elsewhere


@pytest.mark.parametrize("scenario", ["gru_vtrace_normalized", "action_mask_raw_advantages"])
def test_decoupled_ppo_trains_recurrent_and_masked_models(scenario):
    result = run_scenario(scenario, make_algorithm, extra=("--decoupled_ppo=True",))
    for stats in result["stats"]:
        assert stats["sgd_steps"] > 0 and all(math.isfinite(v) for v in stats.values()), stats


def test_training_with_every_loss_option():
    extra = (
        "--exploration_loss=symmetric_kl",
        "--exploration_loss_coeff=0.01",
        "--kl_loss_coeff=0.3",
        "--ppo_clip_mode=unbiased",
    )
    result = run_scenario("action_mask_raw_advantages", make_algorithm, extra=extra)
    for stats in result["stats"]:
        assert stats["sgd_steps"] > 0
        assert {"kl_loss", "symmetric_kl", "entropy", "approx_kl"} <= set(stats)
        assert all(math.isfinite(v) for v in stats.values()), stats


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
        gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (1,), np.float32))),
    ],
)
def test_symmetric_kl_rejects_spaces_with_gaussian_parts(space):
    cfg = parse_cfg([*SMALL, "--exploration_loss=symmetric_kl"])
    with pytest.raises(ConfigError, match="symmetric_kl needs discrete actions"):
        APPOAlgorithm.check_spaces(cfg, VEC, space)
    APPOAlgorithm.check_spaces(parse_cfg(SMALL), VEC, space)  # entropy: any space


def test_symmetric_kl_accepts_discrete_spaces():
    cfg = parse_cfg([*SMALL, "--exploration_loss=symmetric_kl"])
    for space in (DISCRETE, gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Tuple((DISCRETE, DISCRETE))):
        APPOAlgorithm.check_spaces(cfg, VEC, space)


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--ppo_ratio_clamp=0.5", "ppo_ratio_clamp"),
        ("--kl_loss_coeff=-1", "kl_loss_coeff"),
        ("--decorrelate_experience_max_seconds=-1", "decorrelate_experience_max_seconds"),
        ("--decoupled_ppo=True --algo=DQN", "decoupled_ppo"),
    ],
)
def test_invalid_loss_flags_rejected(flag, message, capsys):
    with pytest.raises(SystemExit):
        parse_cfg([*SMALL, *flag.split()])
    assert message in capsys.readouterr().err


def test_defaults_as_sample_factory():
    cfg = parse_cfg(SMALL)
    assert (cfg.exploration_loss, cfg.kl_loss_coeff, cfg.ppo_clip_mode) == ("entropy", 0.0, "symmetric")
    assert cfg.ppo_ratio_clamp == 20.0  # Sample Factory 2 clamps to [0.05, 20]
    assert cfg.max_policy_lag == 1000 and cfg.decorrelate_experience_max_seconds == 0.0


@pytest.mark.parametrize(
    "flags", [(), ("--exploration_loss_coeff=0.01", "--kl_loss_coeff=0.5", "--normalize_returns=True")]
)
def test_all_valid_batches_take_plain_means_with_the_masked_losses_values(flags):
    """A batch whose steps are all valid trains with plain means (prepare sets all_valid); the loss, its gradient and
    every stat equal the masked means' over the same all-true mask. A batch with a stale step keeps the mask."""
    results = []
    for masked in (False, True):  # plain means, then the masked means over the same mask; fresh models (normalizers)
        torch.manual_seed(0)
        cfg = parse_cfg([*SMALL, "--use_rnn=False", *flags])
        algo = make_algorithm(cfg, ActorCritic(cfg, VEC, DISCRETE), torch.device("cpu"))
        batch = make_batch(VEC, DISCRETE, 0, version=5)
        batch["active"][:] = True  # the fixture has inactive steps (multi-agent)
        p = algo.prepare(batch, 5, None)
        assert p.all_valid and bool(p.valid.all())
        loss, stats, _ = algo.minibatch_loss(p._replace(all_valid=not masked), torch.arange(p.is_first.shape[0]))
        loss.backward()
        grads = [q.grad.clone() for q in algo.model.parameters()]
        results.append((loss.item(), {k: v.item() for k, v in stats.items()}, grads))
    (loss_a, stats_a, grads_a), (loss_b, stats_b, grads_b) = results
    assert loss_a == pytest.approx(loss_b, rel=1e-5, abs=1e-7)
    assert stats_a.keys() == stats_b.keys()
    assert all(stats_a[k] == pytest.approx(stats_b[k], rel=1e-5, abs=1e-7) for k in stats_a), (stats_a, stats_b)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(grads_a, grads_b, strict=True))
    batch["policy_version"][0, 0] = 5 - cfg.max_policy_lag - 1  # one step too old
    assert not algo.prepare(batch, 5, None).all_valid
