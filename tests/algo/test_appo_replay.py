"""IMPALA-style replay for APPO (--replay_proportion, --replay_buffer_num_slots): the trajectory ring, the replayed
count, the mixed batch (fresh rows first, replayed lag reported separately), and the config rules."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from sample_factory.algo.appo import APPOAlgorithm
from sample_factory.algo.replay import TrajectoryReplay, concat_batches, replayed_count
from sample_factory.config import ConfigError, parse_cfg
from sample_factory.model.actor_critic import ActorCritic
from tests.algo.appo_fixture import SMALL, VEC, M, make_batch
from tests.algo.test_dqn import through_a_file


def test_trajectory_ring_keeps_the_newest_and_samples_uniformly():
    ring = TrajectoryReplay(num_slots=5, seed=0)
    for start in (0, 3, 6):  # 9 trajectories into 5 slots: 4..8 kept
        ids = torch.arange(start, start + 3)
        ring.add({"x": ids.float().unsqueeze(1).repeat(1, 4), "obs": {"o": ids.unsqueeze(1)}})
    assert len(ring) == 5
    s = ring.sample(5000)
    assert s["x"].shape == (5000, 4) and torch.equal(s["x"][:, 0].long(), s["obs"]["o"][:, 0])
    counts = torch.bincount(s["obs"]["o"][:, 0], minlength=9)
    assert counts[:4].sum() == 0 and ((counts[4:] - 1000).abs() < 120).all()
    both = concat_batches({"x": torch.zeros(2, 4), "obs": {"o": torch.zeros(2, 1)}}, s)
    assert both["x"].shape == (5002, 4) and both["obs"]["o"].shape == (5002, 1)


def test_replayed_count_has_the_requested_mean():
    g = torch.Generator().manual_seed(0)
    assert replayed_count(2.0, 8, g) == 16
    draws = [replayed_count(0.3, 5, g) for _ in range(4000)]  # 1.5 on average: 1 or 2
    assert set(draws) == {1, 2} and sum(draws) / len(draws) == pytest.approx(1.5, abs=0.05)


def test_appo_trains_on_fresh_plus_replayed_trajectories():
    cfg = parse_cfg([*SMALL, "--use_rnn=False", "--replay_proportion=0.5", "--replay_buffer_num_slots=40"])
    assert cfg.exp_replayer == "uniform"
    torch.manual_seed(0)
    algo = APPOAlgorithm(cfg, ActorCritic(cfg, VEC, gym.spaces.Discrete(2)), torch.device("cpu"))
    stats, v = algo.train(make_batch(VEC, gym.spaces.Discrete(2), 0, version=0), 0, 0)
    assert stats["replayed_samples"] == 0 and len(algo.replay) == M  # nothing to replay yet; stored
    seen = []
    algo.prepare = lambda b, *a, _p=algo.prepare, **k: seen.append(b["is_first"].shape[0]) or _p(b, *a, **k)
    fresh = make_batch(VEC, gym.spaces.Discrete(2), 0, version=v)
    T = cfg.rollout
    own = int((fresh["active"][:, :T] & (fresh["policy_id"][:, :T] == 0)).sum())  # the batch mixes in other steps
    stats, v2 = algo.train(fresh, v, 0)
    assert seen == [M + M // 2]  # 0.5 * 12 replayed trajectories after the 12 fresh ones
    assert stats["samples"] == own and 0 < stats["replayed_samples"] <= (M // 2) * T
    # the replayed trajectories acted v versions earlier than the fresh ones: their lag is reported apart
    assert stats["replay_policy_lag_min"] >= v and stats["replay_policy_lag_avg"] > stats["policy_lag_avg"]
    assert len(algo.replay) == 2 * M


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--replay_proportion=0.5", "--replay_buffer_num_slots=10", "--with_vtrace=False"], "needs V-trace"),
        (["--replay_proportion=0.5"], "--replay_buffer_num_slots >= 1"),
        (["--exp_replayer=uniform"], "needs both --exp_replayer=uniform and --replay_proportion > 0"),
        (["--exp_replayer=prioritized"], "APPO replays uniformly"),
    ],
)
def test_appo_replay_config_errors(flags, message, capsys):
    with pytest.raises(SystemExit):
        parse_cfg(["--env=CartPole-v1", *flags])
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_trajectory_replay_is_checkpointed_with_save_replay_buffer():
    """--save_replay_buffer keeps APPO's replayed trajectories and their sampling generator across a resume."""
    flags = [*SMALL, "--use_rnn=False", "--replay_proportion=0.5", "--replay_buffer_num_slots=40"]
    spaces = (VEC, gym.spaces.Discrete(2))

    def make(*extra: str) -> APPOAlgorithm:
        cfg = parse_cfg([*flags, *extra])
        torch.manual_seed(0)
        return APPOAlgorithm(cfg, ActorCritic(cfg, *spaces), torch.device("cpu"))

    algo = make("--save_replay_buffer=True")
    for i in range(2):
        algo.train(make_batch(*spaces, 0, version=i), i, 0)
    assert "replay" not in make().state_dict() and "replay" not in make("--save_replay_buffer=True").state_dict()
    state = through_a_file(algo.state_dict())
    assert state["replay"]["filled"] == 2 * M
    resumed = make("--save_replay_buffer=True")
    assert APPOAlgorithm.check_resume(resumed.cfg, state) == []
    resumed.load_state_dict(state)
    assert len(resumed.replay) == 2 * M and through_a_file(resumed.state_dict())["replay"]["filled"] == 2 * M
    a, b = algo.replay.sample(7), resumed.replay.sample(7)
    assert torch.equal(a["obs"]["obs"], b["obs"]["obs"]) and torch.equal(a["actions"], b["actions"])
    with pytest.raises(ConfigError, match="--replay_buffer_num_slots=40"):
        APPOAlgorithm.check_resume(make("--replay_buffer_num_slots=80", "--save_replay_buffer=True").cfg, state)
