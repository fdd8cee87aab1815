"""APPOAlgorithm: the training step reproduces the values recorded from the implementation before it was split
into prepare / minibatch_loss / guarded_step, plus the pieces of the algorithm interface it implements."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.algo.appo import APPOAlgorithm
from sample_factory.algo.base import ActResult, Algorithm, reduced_precision_dtype
from sample_factory.algo.registry import ALGORITHMS, algorithm_class, make_algorithm
from sample_factory.config import parse_cfg
from sample_factory.config.options import all_options
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runtime.shared_buffers import TrajectoryBuffers
from tests.algo.appo_fixture import SCENARIOS, SMALL, VEC, make_batch, run_scenario


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


# Recorded (CPU, one thread) from PPOAlgorithm.train as it was before the split (commit 8c575f7); the refactored
# code reproduced every stat, parameter and optimizer state bit for bit. The tolerance only absorbs float32
# reduction-order differences between CPUs; int counts and versions must match exactly.
RECORDED = {
    "gru_vtrace_normalized": {
        "version": 17,
        "param_sum": 389.2724102049338,
        "param_abs_sum": 618.0855522585816,
        "last_stats": {
            "loss": 0.25513347797095776,
            "policy_loss": -0.002443620003759861,
            "value_loss": 0.5151541903614998,
            "entropy": 0.6931339204311371,
            "grad_norm": 0.27872924879193306,
            "value": 0.03318851685617119,
            "value_target": -0.06647233385592699,
            "advantage_abs": 0.7301684021949768,
            "clip_fraction": 0.44939693808555603,
            "ratio_mean": 1.071780413389206,
            "approx_kl": 0.05392822530120611,
            "sgd_steps": 4,
            "skipped_updates": 0,
            "lr": 0.0004,
            "lr_mean": 0.0004,  # constant: the rate every step used
            "exploration_coeff": 0.0,
            "policy_lag_min": 0.0,
            "policy_lag_avg": 2.542372941970825,
            "policy_lag_max": 5.0,
            "dropped_samples": 24,
            "inactive_samples": 4,
            "samples": 59,
        },
    },
    "gaussian_gae_unclipped": {
        "version": 29,
        "param_sum": 0.9759019964840263,
        "param_abs_sum": 23.716245629824698,
        "last_stats": {
            "loss": 0.5580973103642464,
            "policy_loss": 0.23280747731526694,
            "value_loss": 0.6505796710650126,
            "entropy": 2.7332831819852195,
            "grad_norm": 0.4326293741663297,
            "value": -0.040877064457163215,
            "value_target": -0.1735128052532673,
            "advantage_abs": 0.7811903208494186,
            "clip_fraction": 1.0,
            "ratio_mean": 0.19807064781586328,
            "approx_kl": 1.1904314657052357,
            "sgd_steps": 12,
            "skipped_updates": 0,
            "lr": 0.003,
            "lr_mean": 0.003,  # constant: the rate every step used
            "exploration_coeff": 0.0,
            "policy_lag_min": 0.0,
            "policy_lag_avg": 2.8888888359069824,
            "policy_lag_max": 5.0,
            "dropped_samples": 0,
            "inactive_samples": 6,
            "samples": 90,
        },
    },
    "action_mask_raw_advantages": {
        "version": 13,
        "param_sum": -5.375304971003061,
        "param_abs_sum": 40.10976722807027,
        "last_stats": {
            "loss": 0.21115016005933285,
            "policy_loss": 0.062323895283043385,
            "value_loss": 0.2976525314152241,
            "entropy": 0.8623669296503067,
            "grad_norm": 0.45261862128973007,
            "value": 0.06647749338299036,
            "value_target": 0.08498435979709029,
            "advantage_abs": 0.5735111385583878,
            "clip_fraction": 0.6086956560611725,
            "ratio_mean": 0.9706221222877502,
            "approx_kl": 0.10454130917787552,
            "sgd_steps": 4,
            "skipped_updates": 0,
            "lr": 0.001,
            "lr_mean": 0.001,  # constant: the rate every step used
            "exploration_coeff": 0.0,
            "policy_lag_min": 0.0,
            "policy_lag_avg": 2.36956524848938,
            "policy_lag_max": 5.0,
            "dropped_samples": 0,
            "inactive_samples": 4,
            "samples": 92,
        },
    },
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_training_reproduces_the_recorded_values(name):
    result, rec = run_scenario(name, make_algorithm), RECORDED[name]
    assert result["version"] == rec["version"]
    params = result["model"].values()
    assert sum(float(p.double().sum()) for p in params) == pytest.approx(rec["param_sum"], rel=1e-5)
    assert sum(float(p.double().abs().sum()) for p in params) == pytest.approx(rec["param_abs_sum"], rel=1e-5)
    stats = result["stats"][-1]
    assert set(stats) == set(rec["last_stats"])
    for k, v in rec["last_stats"].items():
        if isinstance(v, int):
            assert stats[k] == v, k
        else:
            assert stats[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k


def _algo(*flags: str, action_space: gym.Space = gym.spaces.Discrete(2)) -> APPOAlgorithm:
    torch.manual_seed(0)
    cfg = parse_cfg([*SMALL, "--use_rnn=False", *flags])
    return make_algorithm(cfg, ActorCritic(cfg, VEC, action_space), torch.device("cpu"))


def test_registry_matches_the_algo_option():
    choices = next(o.choices for o in all_options() if o.name == "algo")
    assert sorted(ALGORITHMS) == sorted(choices)
    algo = _algo()
    assert type(algo) is APPOAlgorithm and algorithm_class(algo.cfg) is APPOAlgorithm
    assert isinstance(algo, Algorithm)


def test_appo_reads_every_slot_tensor():
    assert set(APPOAlgorithm.required_buffers) == {*TrajectoryBuffers.SLOT_KEYS, "obs"}


def test_learning_rate_schedule():
    algo = _algo("--learning_rate=0.01", "--lr_schedule=linear_decay", "--train_for_env_steps=1000")
    algo.update_learning_rate(250)
    assert algo.optimizer.param_groups[0]["lr"] == pytest.approx(0.0075)
    algo.update_learning_rate(5000)
    assert algo.optimizer.param_groups[0]["lr"] == 0.0


def test_exploration_loss_schedule():
    """linear_decay: the entropy bonus of iteration i weighs --exploration_loss_coeff * (1 - env_steps / budget); the
    scenario's second iteration comes at the budget (300 env steps), so only its loss differs from a constant bonus."""
    flags = ("--exploration_loss_coeff=0.05", "--train_for_env_steps=300")
    const = run_scenario("gaussian_gae_unclipped", make_algorithm, flags)
    decay = run_scenario("gaussian_gae_unclipped", make_algorithm, (*flags, "--exploration_loss_schedule=linear_decay"))
    assert [s["exploration_coeff"] for s in const["stats"]] == [0.05, 0.05]
    assert [s["exploration_coeff"] for s in decay["stats"]] == [0.05, 0.0]
    assert decay["stats"][0]["loss"] == const["stats"][0]["loss"]
    assert decay["stats"][1]["loss"] != pytest.approx(const["stats"][1]["loss"])
    algo = _algo(
        "--exploration_loss_coeff=0.02", "--exploration_loss_schedule=linear_decay", "--train_for_env_steps=1000"
    )
    algo.update_learning_rate(250)
    assert algo.exploration_coeff == pytest.approx(0.015)


def test_state_dict_round_trip_and_checkpoint_layout():
    algo = _algo()
    algo.guarded_step(sum(p.sum() for p in algo.model.parameters()), algo.optimizer)
    state = algo.state_dict()
    assert list(state) == ["optimizer"]  # the checkpoint's "algo" entry: {"optimizer": Adam state}
    assert state["optimizer"]["state"]
    other = _algo()
    other.load_state_dict(state)
    loaded = other.optimizer.state_dict()
    assert loaded["param_groups"] == state["optimizer"]["param_groups"]
    for i, s in state["optimizer"]["state"].items():
        assert all(torch.equal(loaded["state"][i][k], v) for k, v in s.items())


def test_non_finite_loss_is_skipped_and_counted():
    algo = _algo()
    before = [p.detach().clone() for p in algo.model.parameters()]

    def nan_loss():
        return sum(p.sum() for p in algo.model.parameters()) * float("nan")

    assert algo.guarded_step(nan_loss(), algo.optimizer) is None
    assert (algo.skipped_updates, algo.consecutive_skipped) == (1, 1)
    assert all(torch.equal(a, b) for a, b in zip(before, algo.model.parameters(), strict=True))
    assert algo.guarded_step(nan_loss(), algo.optimizer) is None
    assert (algo.skipped_updates, algo.consecutive_skipped) == (2, 2)
    grad_norm = algo.guarded_step(sum(p.sum() for p in algo.model.parameters()), algo.optimizer)
    assert grad_norm is not None and float(grad_norm) > 0
    assert (algo.skipped_updates, algo.consecutive_skipped) == (2, 0)


def test_weights_replaced_drops_optimizer_moments():
    algo = _algo()
    algo.guarded_step(sum(p.sum() for p in algo.model.parameters()), algo.optimizer)
    assert algo.optimizer.state
    algo.on_weights_replaced()
    assert not algo.optimizer.state


def test_update_cfg_is_read_from_then_on():
    algo = _algo()
    cfg = parse_cfg([*SMALL, "--use_rnn=False", "--ppo_clip_ratio=0.3"])
    algo.update_cfg(cfg)
    assert algo.cfg is cfg


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32)])
def test_act_samples_the_models_distribution(action_space):
    algo = _algo("--normalize_returns=True", action_space=action_space)
    model, N = algo.model.eval(), 5
    model.returns_normalizer.update(10.0 + 3.0 * torch.randn(100))
    obs = {"obs": torch.randn(N, 4)}
    with torch.inference_mode():
        params, values, _ = model.forward_step(obs, None)
        torch.manual_seed(7)
        expected = model.distribution(params).sample()
        torch.manual_seed(7)
        res = APPOAlgorithm.act(algo.cfg, model, obs, None, None, deterministic=False)
        assert isinstance(res, ActResult) and res.new_rnn_states is None
        torch.testing.assert_close(res.actions, expected)
        torch.testing.assert_close(res.log_probs, model.distribution(params).log_prob(expected))
        torch.testing.assert_close(res.values, model.denormalize_values(values))  # real scale
        torch.testing.assert_close(APPOAlgorithm.values(algo.cfg, model, obs, None), res.values)
        mode = APPOAlgorithm.act(algo.cfg, model, obs, None, None, deterministic=True).actions
        torch.testing.assert_close(mode, model.distribution(params).mode())


def test_act_respects_the_action_mask():
    algo = _algo(action_space=gym.spaces.Discrete(3))
    mask = torch.tensor([[0, 1, 0]] * 50, dtype=torch.int8)
    with torch.inference_mode():
        res = APPOAlgorithm.act(algo.cfg, algo.model, {"obs": torch.randn(50, 4)}, None, mask, False)
    assert (res.actions == 1).all()


def test_autocast_dtype_choices():
    cpu = torch.device("cpu")
    assert reduced_precision_dtype("fp32", cpu) is None
    assert reduced_precision_dtype("bf16", cpu) is torch.bfloat16
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert reduced_precision_dtype("auto", cpu) is (torch.bfloat16 if native else None)


@pytest.mark.parametrize("name", ["gru_vtrace_normalized", "gaussian_gae_unclipped"])
def test_bf16_learner_trains_close_to_fp32(name):
    """--learner_precision=bf16: the forward pass runs in bf16 (conv and linear layers), everything after it in
    fp32: weights stay fp32 and the losses land near the fp32 run's."""
    fp32 = run_scenario(name, make_algorithm)
    bf16 = run_scenario(name, make_algorithm, extra=("--learner_precision=bf16",))
    assert {k: v.dtype for k, v in bf16["model"].items()} == {k: v.dtype for k, v in fp32["model"].items()}
    for k in ("loss", "value_loss", "entropy"):
        a, b = fp32["stats"][0][k], bf16["stats"][0][k]
        assert math.isfinite(b) and b == pytest.approx(a, rel=0.05, abs=0.02), (k, a, b)
    # bf16 really changed the arithmetic (the option is not a no-op)
    assert fp32["stats"][0]["loss"] != bf16["stats"][0]["loss"]


def test_minibatch_without_valid_samples_takes_no_step():
    """Every sample past --max_policy_lag: no optimizer step (Adam's momentum would still move the weights) and
    the policy version does not advance; a minibatch with valid samples trains as usual."""
    algo = _algo("--max_policy_lag=3", "--num_batches_per_epoch=2", "--num_epochs=1")
    # a first real step, so that Adam has momentum that a zero-gradient step would apply
    batch = make_batch(VEC, gym.spaces.Discrete(2), 0, version=5)
    batch["policy_version"][:] = 5
    _, version = algo.train(batch, 5)
    assert version == 5 + 2
    before = [p.detach().clone() for p in algo.model.parameters()]
    stale = make_batch(VEC, gym.spaces.Discrete(2), 0, version=100)
    stale["policy_version"][:] = 0  # lag 100 > 3 everywhere
    stats, version = algo.train(stale, 100)
    assert version == 100 and stats["sgd_steps"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, algo.model.parameters(), strict=True))
    assert stats["dropped_samples"] == stats["samples"] > 0


@pytest.mark.parametrize("max_grad_norm", [0.0, 0.05, 1e6])
def test_guarded_step_clips_as_torch_clip_grad_norm(max_grad_norm):
    """The step's norm and clipped gradients equal torch.nn.utils.clip_grad_norm_'s on the same loss (no clipping with
    --max_grad_norm=0, where the norm is still returned); Adam then gets exactly those gradients."""
    algo = _algo(f"--max_grad_norm={max_grad_norm}")
    ref = _algo(f"--max_grad_norm={max_grad_norm}")

    def loss(model):
        return sum((p * (i + 1)).sum() ** 2 for i, p in enumerate(model.parameters()))

    for _ in range(2):  # the second step runs on the listed parameters too
        ref.optimizer.zero_grad(set_to_none=True)
        loss(ref.model).backward()
        params = list(ref.model.parameters())
        if max_grad_norm > 0:
            expected = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        else:
            expected = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params]))
        grads = [p.grad.clone() for p in params]
        ref.optimizer.step()
        grad_norm = algo.guarded_step(loss(algo.model), algo.optimizer)
        assert torch.allclose(grad_norm, expected, rtol=1e-6), (grad_norm, expected)
        assert all(torch.allclose(p.grad, g, rtol=1e-6) for p, g in zip(algo.model.parameters(), grads, strict=True))
        assert all(torch.equal(a, b) for a, b in zip(algo.model.parameters(), ref.model.parameters(), strict=True))
    if 0 < max_grad_norm < 1:
        clipped = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in algo.model.parameters()]))
        assert float(clipped) == pytest.approx(max_grad_norm, rel=1e-4)


def test_guarded_step_with_parameters_the_loss_does_not_reach():
    """Parameters without a gradient (a loss over the value head only) are left out of the norm and the clipping,
    as clip_grad_norm_ leaves them; Adam moves only the ones with a gradient."""
    algo = _algo("--max_grad_norm=0.01")
    before = {n: p.detach().clone() for n, p in algo.model.named_parameters()}
    head = algo.model.value_head
    grad_norm = algo.guarded_step((head.weight.sum() + head.bias.sum()) * 10, algo.optimizer)
    expected = torch.linalg.vector_norm(torch.stack([torch.full_like(head.weight, 10.0).norm(), torch.tensor(10.0)]))
    assert torch.allclose(grad_norm, expected)
    moved = {n for n, p in algo.model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == {"value_head.weight", "value_head.bias"}


def test_device_step_skips_nonfinite_and_empty_minibatches_without_a_read_back():
    """device_step decides on the device: a NaN loss leaves the weights as they were and is counted (total and in a
    row), a minibatch without data (has_data False) is not applied and not counted, and neither resets the run of
    NaN skips; a good step is applied and resets it. The counts reach the host only through read_skip_counts."""
    algo = _algo()
    before = [p.detach().clone() for p in algo.model.parameters()]

    def loss():
        return sum(p.sum() for p in algo.model.parameters())

    norm, ok = algo.device_step(loss() * float("nan"), algo.optimizer)
    assert not bool(ok) and algo.skipped_updates == 0  # not read back yet
    _, ok = algo.device_step(loss(), algo.optimizer, has_data=torch.tensor(False))
    assert not bool(ok)
    assert all(torch.equal(a, b) for a, b in zip(before, algo.model.parameters(), strict=True))
    algo.read_skip_counts()
    assert (algo.skipped_updates, algo.consecutive_skipped) == (1, 1)
    _, ok = algo.device_step(loss(), algo.optimizer, has_data=torch.tensor(True))
    assert bool(ok)
    assert not all(torch.equal(a, b) for a, b in zip(before, algo.model.parameters(), strict=True))
    algo.read_skip_counts()
    assert (algo.skipped_updates, algo.consecutive_skipped) == (1, 0)


def test_kl_adaptive_lr_rule():
    """rl_games' adaptive rule: / 1.5 above twice the target, * 1.5 below half of it, unchanged between, clamped."""
    from sample_factory.algo.base import kl_adaptive_lr

    lr = torch.tensor(1e-3)
    step = [kl_adaptive_lr(lr, torch.tensor(kl), 0.01, 1e-6, 1e-2).item() for kl in (0.03, 0.021, 0.015, 0.004, 0.0)]
    assert step == pytest.approx([1e-3 / 1.5, 1e-3 / 1.5, 1e-3, 1.5e-3, 1.5e-3])
    assert kl_adaptive_lr(torch.tensor(9e-3), torch.tensor(0.0), 0.01, 1e-6, 1e-2).item() == pytest.approx(1e-2)
    assert kl_adaptive_lr(torch.tensor(1e-6), torch.tensor(1.0), 0.01, 1e-6, 1e-2).item() == pytest.approx(1e-6)


def test_kl_adaptive_schedule_steers_every_step_and_resumes():
    """--lr_schedule=kl_adaptive: the rate moves after every applied SGD step by the minibatch's approx_kl (the
    scenario's random behaviour policy is far from the model's: KL ~1 against a target of 0.01, so every step divides
    by 1.5), the iteration reports the rate it ended at, update_learning_rate leaves it alone, and a checkpoint's
    rate is where a resumed run goes on."""
    flags = ("--lr_schedule=kl_adaptive", "--kl_threshold=0.01")
    out = run_scenario("gaussian_gae_unclipped", make_algorithm, flags)
    assert [s["sgd_steps"] for s in out["stats"]] == [12, 12]  # 4 epochs x 3 minibatches, 2 iterations
    # 12 divisions, then 24 (below --lr_min=1e-6: held there)
    assert [s["lr"] for s in out["stats"]] == pytest.approx([3e-3 / 1.5**12, 1e-6])
    # lr_mean: the mean of the rates the iteration's steps used (the first step's is the one the iteration starts at)
    used = [max(3e-3 / 1.5**i, 1e-6) for i in range(24)]
    assert [s["lr_mean"] for s in out["stats"]] == pytest.approx([np.mean(used[:12]), np.mean(used[12:])], rel=1e-5)
    saved = out["algo"]["optimizer"]["param_groups"][0]["lr"]
    assert isinstance(saved, torch.Tensor) and saved.item() == pytest.approx(1e-6)
    # a KL far below the target: * 1.5 per step, up to --lr_max
    up = run_scenario("gaussian_gae_unclipped", make_algorithm, (*flags[:1], "--kl_threshold=100", "--lr_max=1"))
    assert up["stats"][0]["lr"] == pytest.approx(3e-3 * 1.5**12)
    const = run_scenario("gaussian_gae_unclipped", make_algorithm)
    assert [s["lr_mean"] for s in const["stats"]] == pytest.approx([s["lr"] for s in const["stats"]])
    algo = _algo(*flags, "--learning_rate=3e-3", action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    algo.load_state_dict(out["algo"])
    algo.update_learning_rate(10**6)
    assert algo.optimizer.param_groups[0]["lr"] is algo.lr_t and algo.lr_t.item() == pytest.approx(saved.item())
    # a checkpoint of a constant-rate run starts the steered rate at --learning_rate
    other = _algo(*flags, "--learning_rate=2e-3", action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    other.load_state_dict(const["algo"])
    assert other.lr_t.item() == pytest.approx(2e-3)


def test_kl_adaptive_rejected_where_it_cannot_apply():
    with pytest.raises(SystemExit):
        parse_cfg([*SMALL, "--algo=DQN", "--lr_schedule=kl_adaptive"])
    with pytest.raises(SystemExit):
        parse_cfg([*SMALL, "--lr_schedule=kl_adaptive", "--learning_rate=0.1", "--lr_max=0.01"])
    with pytest.raises(SystemExit):
        parse_cfg([*SMALL, "--lr_schedule=kl_adaptive", "--kl_threshold=0"])
