"""Ape-X DQN (algo/dqn.py): per-agent epsilons, dueling Q, double-Q targets, actor-side priorities, acting, and
one algorithm's bookkeeping: --training_intensity, --learning_starts, target-network updates, one-time replay,
checkpoint state with and without the replay buffer."""

from __future__ import annotations

import io

import gymnasium as gym
import pytest
import torch

from sample_factory.algo.dqn import (
    DQNAlgorithm,
    apex_epsilon,
    double_q_target,
    epsilon_greedy,
    initial_priorities,
    q_values,
)
from sample_factory.algo.replay import nstep_targets
from sample_factory.config import ConfigError, parse_cfg
from sample_factory.config.checks import finalize_cfg
from sample_factory.model.actor_critic import ActorCritic

OBS, ACT = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3)


def make_algo(*flags: str) -> DQNAlgorithm:
    cfg = parse_cfg(["--env=CartPole-v1", "--algo=DQN", "--device=cpu", "--seed=0", "--encoder_mlp_layers=16", *flags])
    torch.manual_seed(0)
    return DQNAlgorithm(cfg, ActorCritic(cfg, OBS, ACT), torch.device("cpu"))


def fake_batch(M=4, T=32, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs": {"obs": torch.randn(M, T + 1, 4, generator=g)},
        "is_first": torch.zeros(M, T + 1, dtype=torch.bool),
        "active": torch.ones(M, T, dtype=torch.bool),
        "actions": torch.randint(0, 3, (M, T + 1), generator=g),
        "log_probs": torch.randn(M, T + 1, generator=g),
        "values": torch.randn(M, T + 1, generator=g),
        "policy_id": torch.zeros(M, T + 1, dtype=torch.int64),
        "rewards": torch.ones(M, T),
        "dones": torch.rand(M, T, generator=g) < 0.05,
        "truncated": torch.zeros(M, T, dtype=torch.bool),
        "final_values": torch.zeros(M, T),
    }


def test_apex_epsilons():
    N = 8
    rank = torch.arange(N) / (N - 1)
    eps = apex_epsilon(rank, 0.4, 7.0)
    assert float(eps[0]) == pytest.approx(0.4) and float(eps[-1]) == pytest.approx(0.4**8)
    assert float(eps[3]) == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert (eps[1:] < eps[:-1]).all()


def test_dueling_q_and_double_q_target():
    adv = torch.tensor([[1.0, 2.0, 3.0]])
    v = torch.tensor([10.0])
    torch.testing.assert_close(q_values(adv, v, dueling=True), torch.tensor([[9.0, 10.0, 11.0]]))
    torch.testing.assert_close(q_values(adv, v, dueling=False), adv)
    returns, disc = torch.tensor([1.0, 1.0, 2.0]), torch.tensor([0.5, 0.5, 0.0])
    q_target = torch.tensor([[1.0, 5.0], [4.0, 3.0], [7.0, 9.0]])
    q_online = torch.tensor([[2.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    # double Q: the online net picks the action, the target net rates it; no bootstrap where discount is 0
    torch.testing.assert_close(double_q_target(returns, disc, q_target, q_online), torch.tensor([1.5, 2.5, 2.0]))
    torch.testing.assert_close(double_q_target(returns, disc, q_target, None), torch.tensor([3.5, 3.0, 2.0]))
    # a masked (-inf) bootstrap action never leaks into a terminal target
    masked = torch.tensor([[float("-inf"), 1.0]] * 3)
    assert torch.isfinite(double_q_target(returns, torch.zeros(3), masked, masked)).all()


def test_initial_priorities_from_behaviour_q_values():
    T = 4
    z = torch.zeros(1, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(1, T), z, z, torch.zeros(1, T), 0.5, 2)
    q_taken = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    q_max = torch.tensor([[0.0, 0.0, 2.0, 4.0, 8.0]])  # [T+1]
    prio = initial_priorities(targets.returns, targets.discounts, targets.offsets, q_taken, q_max)
    # t=0: 1 + .5 + .25 * q_max[2] - 1; t=2: 1.5 + .25 * q_max[4] - 1; t=3: 1 + .5 * q_max[4] - 1
    torch.testing.assert_close(prio, torch.tensor([[1.0, 1.5, 2.5, 4.0]]))


def test_act_greedy_and_epsilon_greedy():
    algo = make_algo()
    obs = {"obs": torch.randn(4000, 4)}
    greedy = DQNAlgorithm.act(algo.cfg, algo.model, obs, None, None, deterministic=True)
    params, values, _ = algo.model.forward_step(obs, None)
    q = q_values(params, values, True)
    torch.testing.assert_close(greedy.actions, q.argmax(-1))
    torch.testing.assert_close(greedy.values, q.max(-1).values)
    torch.testing.assert_close(greedy.log_probs, q.gather(-1, greedy.actions[:, None]).squeeze(-1))  # Q(s, a)
    rank = torch.cat([torch.zeros(2000), torch.ones(2000)])  # most exploring half, least exploring half
    res = DQNAlgorithm.act(algo.cfg, algo.model, obs, None, None, deterministic=False, agent_rank=rank)
    differs = res.actions != greedy.actions
    # random actions differ from the greedy one 2/3 of the time: eps 0.4 -> 0.27, eps 0.4^8 -> ~0
    assert float(differs[:2000].float().mean()) == pytest.approx(0.4 * 2 / 3, abs=0.04)
    assert float(differs[2000:].float().mean()) < 0.01
    mask = torch.tensor([[0, 1, 1]]).expand(4000, 3)
    res = DQNAlgorithm.act(algo.cfg, algo.model, obs, None, mask, deterministic=False)
    assert (res.actions != 0).all()  # neither greedy nor random picks a masked action


def test_an_evaluation_run_explores_with_eval_epsilon_not_the_apex_epsilons():
    algo = make_algo("--eval_epsilon=0.3")
    obs = {"obs": torch.randn(4000, 4)}
    greedy = DQNAlgorithm.act(algo.cfg, algo.model, obs, None, None, deterministic=True).actions
    algo.cfg.evaluation_run = True
    rank = torch.zeros(4000)  # in training: the most exploring agents (0.4)
    res = DQNAlgorithm.act(algo.cfg, algo.model, obs, None, None, deterministic=False, agent_rank=rank)
    assert float((res.actions != greedy).float().mean()) == pytest.approx(0.3 * 2 / 3, abs=0.04)
    again = DQNAlgorithm.act(algo.cfg, algo.model, obs, None, None, deterministic=True).actions
    torch.testing.assert_close(again, greedy)  # deterministic stays greedy in an evaluation too


def test_epsilon_greedy_draws_only_allowed_actions():
    greedy = torch.zeros(3000, dtype=torch.long)
    torch.testing.assert_close(epsilon_greedy(greedy, 0.0, 4, None), greedy)
    drawn = epsilon_greedy(greedy, 1.0, 4, None)
    assert set(drawn.tolist()) == {0, 1, 2, 3}
    mask = torch.tensor([[0, 1, 0, 1]]).expand(3000, 4)
    assert set(epsilon_greedy(greedy, 1.0, 4, mask).tolist()) == {1, 3}
    per_row = torch.cat([torch.zeros(1500), torch.ones(1500)])  # one epsilon per row
    mixed = epsilon_greedy(greedy, per_row, 4, None)
    assert (mixed[:1500] == 0).all() and float((mixed[1500:] != 0).float().mean()) == pytest.approx(0.75, abs=0.05)


def test_eval_epsilon_decides_whether_dqn_evaluations_are_deterministic():
    classic = parse_cfg(["--env=CartPole-v1", "--algo=DQN"])
    assert classic.eval_epsilon == 0.0 and classic.eval_deterministic
    atari = parse_cfg(["--env=atari_breakout", "--algo=DQN"])
    assert atari.preset == "atari_dqn" and atari.eval_epsilon == 0.05 and not atari.eval_deterministic
    assert parse_cfg(["--env=atari_breakout", "--algo=DQN", "--eval_epsilon=0"]).eval_deterministic
    with pytest.raises(SystemExit):
        parse_cfg(["--env=CartPole-v1", "--algo=DQN", "--eval_epsilon=1.5"])


def test_training_intensity_learning_starts_and_target_updates():
    algo = make_algo(
        "--batch_size=32", "--training_intensity=4", "--learning_starts=200", "--target_network_update_freq=64"
    )
    stats, version = algo.train(fake_batch(M=4), 0, 0)  # 128 transitions < learning_starts: store only
    assert stats["sgd_steps"] == 0 and stats["replay_size"] == 128 and version == 0
    stats, version = algo.train(fake_batch(M=4, seed=1), version, 0)  # 256 stored: 128 new * 4 / 32 = 16 steps
    assert stats["sgd_steps"] == 16 and version == 16
    assert stats["replay_ratio"] == pytest.approx(4.0)
    assert stats["target_updates"] == 2  # every 64 sampled transitions
    for k in ("loss", "q_mean", "td_error_abs", "importance_weight", "replay_size", "epsilon_min", "beta"):
        assert k in stats
    # the last copy was at sampled transition 200 (step 8 of 16): the online net has trained on since
    target_w = dict(algo.target.named_parameters())["policy_head.weight"]
    assert not torch.equal(target_w, dict(algo.model.named_parameters())["policy_head.weight"])
    assert not target_w.requires_grad


def test_a_stop_request_ends_the_iteration_between_sgd_steps():
    """A learner asked to stop (SIGINT) must not finish a long iteration first: the steps taken count, the rest is
    dropped."""
    algo = make_algo("--batch_size=32", "--training_intensity=8", "--learning_starts=100")
    asked = []
    algo.stop_check = lambda: asked.append(1) or len(asked) > 3  # stop is seen at the 4th question
    stats, version = algo.train(fake_batch(M=4), 5, 0)  # 128 new * 8 / 32 = 32 steps owed
    assert stats["sgd_steps"] == 3 and version == 8 and len(asked) == 4


def test_one_time_replay_trains_on_each_fresh_sample_once():
    algo = make_algo("--batch_size=32", "--exp_replayer=one_time")
    stats, _ = algo.train(fake_batch(M=4), 0, 0)
    assert stats["sgd_steps"] == 4 and stats["replay_ratio"] == pytest.approx(1.0)
    assert algo.replay.capacity == 2 * 32 * algo.cfg.num_batches_per_epoch  # room for an iteration (or two) only


def test_the_replay_buffer_says_where_its_observations_live():
    algo = make_algo("--batch_size=32", "--learning_starts=100")
    algo.train(fake_batch(M=4), 0, 0)
    assert algo.replay.device.type == "cpu"
    assert any("replay buffer: 100,000 transitions" in n and "host memory" in n for n in algo.notes), algo.notes


@pytest.mark.parametrize("save_buffer", [False, True])
def test_checkpoint_state_with_and_without_the_replay_buffer(save_buffer):
    flags = ["--batch_size=32", "--learning_starts=100", f"--save_replay_buffer={save_buffer}"]
    algo = make_algo(*flags)
    algo.train(fake_batch(M=4), 0, 0)
    state = algo.state_dict()
    assert ("replay" in state) == save_buffer and "target" in state and "optimizer" in state
    resumed = make_algo(*flags)
    resumed.load_state_dict(state)
    stats, _ = resumed.train(fake_batch(M=1, seed=3), 0, 0)
    # without the buffer the replay refills: 32 transitions < learning_starts, no step yet
    assert stats["replay_size"] == (160 if save_buffer else 32)
    assert (stats["sgd_steps"] > 0) == save_buffer


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--use_rnn=True"], "needs a feed-forward model"),
        (["--normalize_returns=True"], "does not normalize returns"),
        (["--training_intensity=0"], "--training_intensity must be > 0"),
        (["--replay_buffer_capacity=1000"], "must hold at least two iterations"),
    ],
)
def test_dqn_config_errors(flags, message):
    cfg = parse_cfg(["--env=CartPole-v1", "--algo=DQN"])
    for f in flags:
        k, v = f[2:].split("=")
        setattr(cfg, k, {"True": True}.get(v, float(v) if v[0].isdigit() else v))
    with pytest.raises(ConfigError, match=message):
        finalize_cfg(cfg)


def test_appo_refuses_a_replayer_and_dqn_defaults():
    cfg = parse_cfg(["--env=CartPole-v1"])
    assert cfg.exp_replayer == "one_time"
    cfg.exp_replayer = "prioritized"
    with pytest.raises(ConfigError, match="APPO replays uniformly"):
        finalize_cfg(cfg)
    cfg = parse_cfg(["--env=CartPole-v1", "--algo=DQN"])
    assert cfg.preset == "classic_control_dqn" and cfg.exp_replayer == "prioritized" and cfg.eval_deterministic
    cfg = parse_cfg(["--env=MyEnv-v0", "--algo=DQN"])
    assert cfg.preset == "dqn" and cfg.use_rnn is False


def through_a_file(state: dict) -> dict:
    """A state as a checkpoint gives it back (saved, loaded with weights_only)."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def test_a_loaded_replay_buffer_is_in_every_later_checkpoint_and_samples_on_exactly():
    """A checkpoint written before the resumed learner's first batch (Ctrl+C right after the resume) still holds
    the buffer, and the resumed buffer draws what the original would have drawn (its RNG is saved too)."""
    flags = ["--batch_size=32", "--learning_starts=100", "--save_replay_buffer=True"]
    algo = make_algo(*flags)
    algo.train(fake_batch(M=4), 0, 0)
    algo.train(fake_batch(M=4, seed=1), 0, 0)  # sampled from the buffer: its RNG moved on
    resumed = make_algo(*flags)
    resumed.load_state_dict(through_a_file(algo.state_dict()))
    again = through_a_file(resumed.state_dict())["replay"]  # no batch yet
    assert again["filled_blocks"] == algo.replay.filled_blocks and torch.equal(again["valid"], algo.replay.valid)
    a, b = algo.replay.sample(64, 0.4), resumed.replay.sample(64, 0.4)
    assert torch.equal(a.indices, b.indices) and torch.equal(a.weights, b.weights)
    assert torch.equal(a.obs["obs"], b.obs["obs"])


def test_resume_checks_refuse_a_buffer_that_does_not_fit():
    algo = make_algo("--batch_size=32", "--learning_starts=100", "--save_replay_buffer=True")
    algo.train(fake_batch(M=4), 0, 0)
    state = through_a_file(algo.state_dict())
    same = make_algo("--batch_size=32", "--save_replay_buffer=True").cfg
    assert DQNAlgorithm.check_resume(same, state) == []
    bigger = make_algo("--batch_size=32", "--save_replay_buffer=True", "--replay_buffer_capacity=200000").cfg
    with pytest.raises(ConfigError, match=r"resume with --replay_buffer_capacity=\d+ --rollout=32"):
        DQNAlgorithm.check_resume(bigger, state)
    dropped = make_algo("--batch_size=32", "--save_replay_buffer=False", "--replay_buffer_capacity=200000").cfg
    assert "not loaded" in DQNAlgorithm.check_resume(dropped, state)[0]
    with pytest.raises(ConfigError, match="not written by --algo=DQN"):
        DQNAlgorithm.check_resume(same, {"optimizer": state["optimizer"]})


def test_non_discrete_action_spaces_are_refused_before_the_run_starts():
    cfg = parse_cfg(["--env=CarRacing-v3", "--algo=DQN"])
    frames = gym.spaces.Box(0, 255, (96, 96, 3))
    for space in (gym.spaces.Box(-1, 1, (3,)), gym.spaces.MultiDiscrete([2, 3])):
        with pytest.raises(ConfigError, match=r"--algo=DQN needs a Discrete action space .* --algo=APPO"):
            DQNAlgorithm.check_spaces(cfg, frames, space)
    DQNAlgorithm.check_spaces(cfg, frames, gym.spaces.Discrete(5))
