"""PBT decision logic: periods, mutation, replacement gaps, bounds, history and the saved state."""

import copy
import json
import math
import os

import numpy as np
import pytest

from sample_factory.config import ConfigError, parse_cfg
from sample_factory.pbt import population as pbt
from sample_factory.pbt.population import (
    DQN_MUTABLE_HYPERPARAMS,
    MUTABLE_HYPERPARAMS,
    PolicyPbtState,
    PopulationBasedTraining,
    apply_hyperparams,
    cfg_hyperparams,
    load_pbt_state,
    objective_from_stats,
    save_pbt_state,
)

M = 1_000_000
# Every learner option non-zero, so all of them are mutable (the CartPole preset switches two of them off).
ALL_ON = ["--exploration_loss_coeff=0.01", "--ppo_clip_value=1.0", "--kl_loss_coeff=0.1"]


def make_cfg(*flags: str):
    return parse_cfg(["--env=CartPole-v1", "--num_workers=1", "--with_pbt", *flags])


def make_pbt(*flags: str, n: int = 4, seed: int = 0, **kwargs) -> PopulationBasedTraining:
    return PopulationBasedTraining(make_cfg(*flags), n, rng=np.random.default_rng(seed), **kwargs)


def in_bounds(p: PopulationBasedTraining, hp: dict) -> bool:
    return all(p.bounds[k][0] <= v <= p.bounds[k][1] for k, v in hp.items())


def test_flags_declared_with_defaults_and_parsed():
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=1"])
    assert cfg.with_pbt is False
    assert cfg.pbt_period_env_steps == 5_000_000 and cfg.pbt_start_mutation == 20_000_000
    assert (cfg.pbt_replace_fraction, cfg.pbt_mutation_rate) == (0.3, 0.15)
    assert (cfg.pbt_replace_reward_gap, cfg.pbt_replace_reward_gap_absolute) == (0.1, 1e-6)
    assert cfg.pbt_optimize_gamma is False and cfg.pbt_target_objective == "true_objective"
    assert (cfg.pbt_perturb_min, cfg.pbt_perturb_max) == (1.1, 1.5)
    assert cfg.pbt_mix_policies_in_one_env is True
    cfg = make_cfg("--pbt_period_env_steps=100", "--pbt_optimize_gamma=True", "--pbt_target_objective=reward")
    assert cfg.with_pbt is True and cfg.pbt_period_env_steps == 100
    assert cfg.pbt_optimize_gamma is True and cfg.pbt_target_objective == "reward"


@pytest.mark.parametrize(
    "flag", ["--pbt_perturb_min=0.9", "--pbt_perturb_max=1.05", "--pbt_replace_fraction=1.5", "--pbt_mutation_rate=-1"]
)
def test_invalid_flags_rejected(flag):
    with pytest.raises(ConfigError):
        make_pbt(flag)


def test_objective_from_stats():
    cfg = make_cfg()
    assert objective_from_stats(cfg, 12.5, {"reward": 3.0}) == 12.5
    cfg = make_cfg("--pbt_target_objective=kills")
    assert objective_from_stats(cfg, 12.5, {"kills": 3.0}) == 3.0
    assert math.isnan(objective_from_stats(cfg, 12.5, {}))


def test_policy0_keeps_cfg_values_others_are_diverse():
    p = make_pbt(*ALL_ON, n=6, reward_shaping={"kill": 1.0, "death": -0.5})
    base = cfg_hyperparams(p.cfg, {"kill": 1.0, "death": -0.5})
    assert p.initial_hyperparams(0) == base == p.hyperparams(0)
    assert base["learning_rate"] == p.cfg.learning_rate and "gamma" not in base
    assert base["reward_shaping/death"] == -0.5
    seen = set()
    for i in range(1, 6):
        hp = p.initial_hyperparams(i)
        assert hp == p.hyperparams(i) and hp.keys() == base.keys()
        assert all(hp[k] != base[k] for k in base), hp  # every value perturbed once
        assert in_bounds(p, hp)
        assert hp["reward_shaping/death"] < 0 < hp["reward_shaping/kill"]  # signs kept
        seen.add(tuple(sorted(hp.items())))
    assert len(seen) == 5


def test_options_switched_off_stay_off():
    p = make_pbt("--pbt_mutation_rate=1.0", "--pbt_start_mutation=0", "--pbt_period_env_steps=1", n=3)
    assert p.cfg.exploration_loss_coeff == 0.0 and p.cfg.ppo_clip_value == 0.0  # the CartPole preset
    for s in range(1, 200):
        p.step(1, s, {})
    for i in range(3):
        assert p.hyperparams(i)["exploration_loss_coeff"] == 0.0 and p.hyperparams(i)["ppo_clip_value"] == 0.0
        assert p.hyperparams(i)["kl_loss_coeff"] == 0.0  # default 0: the KL penalty stays off


def test_no_action_before_period():
    p = make_pbt("--pbt_period_env_steps=1000000", "--pbt_start_mutation=0")
    before = p.hyperparams(1)
    assert p.step(1, M - 1, {0: 1.0, 1: 0.0, 2: 2.0, 3: 3.0}) == []
    assert p.states[1].last_pbt_env_steps == 0 and p.hyperparams(1) == before and p.states[1].history == []
    [d] = p.step(1, M, {0: 1.0, 1: 0.0, 2: 2.0, 3: 3.0})
    assert d.target == 1 and p.states[1].last_pbt_env_steps == M


def test_nothing_before_start_mutation_but_period_restarts():
    p = make_pbt("--pbt_period_env_steps=1000000", "--pbt_start_mutation=10000000", "--pbt_mutation_rate=1.0")
    before = p.hyperparams(2)
    assert p.step(2, 9_500_000, {}) == []
    assert p.states[2].last_pbt_env_steps == 9_500_000  # the period restarted
    assert p.hyperparams(2) == before and p.states[2].history == []
    assert p.step(2, 10_000_000, {}) == []  # past start_mutation, but only half a period since the last step
    [d] = p.step(2, 10_500_000, {})
    assert d.kind == "mutation" and d.hyperparams != before


def test_mutation_changes_only_some_values_and_is_reproducible():
    flags = (*ALL_ON, "--pbt_start_mutation=0", "--pbt_period_env_steps=1")
    p, q = make_pbt(*flags, seed=7), make_pbt(*flags, seed=7)
    n_keys = len(p.hyperparams(0))
    changed, partial = 0, 0
    for s in range(1, 2001):
        [d] = p.step(0, s, {})
        assert d == q.step(0, s, {})[0]  # same seed, same decisions
        assert d.kind == "mutation" and d.source is None
        changed += len(d.changes)
        partial += 0 < len(d.changes) < n_keys
        assert d.hyperparams == p.hyperparams(0)
        for k, c in d.changes.items():
            lo, hi = sorted((c["old"] * 1.1, c["old"] * 1.5))
            lo2, hi2 = sorted((c["old"] / 1.5, c["old"] / 1.1))
            new = c["new"]
            clipped = new in p.bounds[k]
            assert clipped or lo <= new <= hi or lo2 <= new <= hi2, (k, c)
    assert partial > 100
    assert changed / (2000 * n_keys) == pytest.approx(0.15, abs=0.03)


def test_values_stay_in_bounds_over_10000_mutations():
    flags = (*ALL_ON, "--pbt_start_mutation=0", "--pbt_period_env_steps=1", "--pbt_optimize_gamma")
    flags += ("--pbt_mutation_rate=1.0", "--pbt_perturb_min=1.5", "--pbt_perturb_max=4.0")
    p = make_pbt(*flags, n=2, seed=3, reward_shaping={"pos": 0.5, "neg": -2.0, "zero": 0.0})
    lows, highs = set(), set()
    for s in range(1, 10_001):
        [d] = p.step(1, s, {})
        hp = d.hyperparams
        assert in_bounds(p, hp), hp
        assert all(math.isfinite(v) for v in hp.values())
        assert 0.9 <= hp["gamma"] <= 0.9999
        assert hp["reward_shaping/pos"] > 0 > hp["reward_shaping/neg"] and hp["reward_shaping/zero"] == 0.0
        lows |= {k for k, v in hp.items() if v == p.bounds[k][0]}
        highs |= {k for k, v in hp.items() if v == p.bounds[k][1]}
    # The random walk really pushed against the bounds (so the clipping was exercised).
    assert {"learning_rate", "gamma", "reward_shaping/pos"} <= lows & highs


def test_gamma_only_mutated_with_pbt_optimize_gamma():
    for flag, expect in (("--pbt_optimize_gamma=False", False), ("--pbt_optimize_gamma=True", True)):
        p = make_pbt(flag, "--pbt_mutation_rate=1.0", "--pbt_start_mutation=0", "--pbt_period_env_steps=1", n=3)
        assert ("gamma" in p.hyperparams(0)) is expect and ("gamma" in p.initial_hyperparams(2)) is expect
        gamma_changes = 0
        for s in range(1, 50):
            [d] = p.step(0, s, {})
            gamma_changes += "gamma" in d.changes  # may stay put only when clipped at a bound
            assert 0.9 <= d.hyperparams.get("gamma", 0.95) <= 0.9999
        assert (gamma_changes > 25) is expect and (gamma_changes == 0) is not expect


def test_replacement_copies_a_better_source_from_the_top_fraction():
    flags = ("--pbt_start_mutation=0", "--pbt_period_env_steps=1", "--pbt_mutation_rate=0.0")
    objectives = {i: 10.0 * i for i in range(10)}
    sources = set()
    for seed in range(40):
        p = make_pbt(*flags, n=10, seed=seed)
        [d] = p.step(1, 5, objectives)  # policy 1 is among the worst 3 of 10
        assert d.kind == "replacement" and d.target == 1 and d.source in (7, 8, 9)
        assert d.hyperparams == p.hyperparams(d.source) == p.hyperparams(1)  # copied (mutation rate 0)
        sources.add(d.source)
    assert sources == {7, 8, 9}
    # Middle and top policies are mutated, not replaced.
    p = make_pbt(*flags, n=10)
    assert p.step(5, 5, objectives)[0].kind == "mutation"
    assert p.step(9, 5, objectives)[0].kind == "mutation"


def test_replacement_mutates_the_copied_hyperparams():
    flags = (*ALL_ON, "--pbt_start_mutation=0", "--pbt_period_env_steps=1", "--pbt_mutation_rate=1.0")
    p = make_pbt(*flags, n=2, seed=1)
    src = p.hyperparams(1)
    [d] = p.step(0, 1, {0: 1.0, 1: 5.0})
    assert d.kind == "replacement" and d.source == 1
    assert p.hyperparams(1) == src  # the source is untouched
    for k, v in d.hyperparams.items():
        ratio = v / src[k]
        assert v in p.bounds[k] or 1.1 <= ratio <= 1.5 or 1 / 1.5 <= ratio <= 1 / 1.1, k


@pytest.mark.parametrize(
    "target, source, rel, absolute, replaced",
    [
        (100.0, 105.0, 0.1, 1e-6, False),  # gap 5 <= 10% of 105
        (100.0, 120.0, 0.1, 1e-6, True),  # gap 20 > 12
        (-20.0, -10.0, 0.1, 1e-6, True),  # relative to |source| = 10
        (-20.0, -10.0, 1.5, 1e-6, False),
        (0.0, 1e-7, 0.0, 1e-6, False),  # only the absolute gap blocks
        (0.0, 1e-7, 0.0, 1e-8, True),
        (-5.0, 0.0, 0.1, 1e-6, True),  # source objective 0: no division, the absolute gap decides
        (-5.0, 0.0, 0.1, 10.0, False),
        (3.0, 3.0, 0.0, 0.0, False),  # equal objectives are never a reason to replace
    ],
)
def test_replacement_respects_both_gaps(target, source, rel, absolute, replaced):
    flags = ("--pbt_start_mutation=0", "--pbt_period_env_steps=1")
    p = make_pbt(*flags, f"--pbt_replace_reward_gap={rel}", f"--pbt_replace_reward_gap_absolute={absolute}", n=2)
    [d] = p.step(0, 1, {0: target, 1: source})
    assert d.kind == ("replacement" if replaced else "mutation")
    assert d.source == (1 if replaced else None)


def test_nan_objectives_never_replaced_nor_sources():
    flags = ("--pbt_start_mutation=0", "--pbt_period_env_steps=1", "--pbt_replace_fraction=0.5")
    nan = math.nan
    for seed in range(30):
        p = make_pbt(*flags, n=4, seed=seed)
        assert p.step(0, 1, {0: nan, 1: 5.0, 2: 6.0, 3: 7.0})[0].kind == "mutation"  # no stats yet
        [d] = p.step(1, 1, {0: 1.0, 1: 0.0, 2: nan, 3: nan})  # ranking only among 0 and 1
        assert d.kind == "replacement" and d.source == 0
        [d] = p.step(2, 1, {0: 1.0, 1: nan, 2: 0.0})  # a missing entry counts as unknown too
        assert d.source == 0
    p = make_pbt(*flags, n=3)
    assert p.step(0, 1, {0: 1.0, 1: nan, 2: nan})[0].kind == "mutation"  # nobody to compare with


def test_history_records_events():
    flags = ("--pbt_start_mutation=0", "--pbt_period_env_steps=10", "--pbt_mutation_rate=1.0")
    p = make_pbt(*flags, n=2)
    old0, src = p.hyperparams(0), p.hyperparams(1)
    [d1] = p.step(0, 10, {0: 1.0, 1: math.nan})
    [d2] = p.step(0, 25, {0: 1.0, 1: 50.0})
    h = p.states[0].history
    assert [e["kind"] for e in h] == ["mutation", "replacement"] and [e["env_steps"] for e in h] == [10, 25]
    assert h[0]["source"] is None and h[1]["source"] == 1
    assert h[0]["objectives"] == {"0": 1.0, "1": None} and h[1]["objectives"] == {"0": 1.0, "1": 50.0}
    assert h[0]["changes"] == d1.changes and h[1]["changes"] == d2.changes
    assert all(c["old"] == old0[k] for k, c in h[0]["changes"].items())
    assert all(c["old"] == d1.hyperparams[k] for k, c in h[1]["changes"].items())
    assert set(d2.hyperparams) == set(src) and p.states[1].history == []


def test_summaries():
    p = make_pbt(n=2, reward_shaping={"kill": 2.0})
    s = p.summaries(1)
    assert s["pbt/learning_rate"] == p.hyperparams(1)["learning_rate"]
    assert "pbt/reward_shaping/kill" in s and len(s) == len(p.hyperparams(1))


def test_apply_hyperparams():
    cfg = make_cfg("--pbt_optimize_gamma")
    learner_cfg = copy.deepcopy(cfg)
    hp = dict(cfg_hyperparams(cfg, {"kill": 1.0}), learning_rate=0.005, gamma=0.95, **{"reward_shaping/kill": 3.0})
    apply_hyperparams(learner_cfg, hp)
    assert learner_cfg.learning_rate == 0.005 and learner_cfg.gamma == 0.95
    assert learner_cfg.reward_shaping == {"kill": 3.0}
    assert cfg.learning_rate != 0.005 and cfg.reward_shaping is None  # only the copy changed
    before = learner_cfg.gamma
    apply_hyperparams(learner_cfg, {"max_grad_norm": 1.0})  # partial sets are fine; gamma left alone
    assert learner_cfg.max_grad_norm == 1.0 and learner_cfg.gamma == before
    with pytest.raises(KeyError):
        apply_hyperparams(learner_cfg, {"batch_size": 3.0})
    assert set(MUTABLE_HYPERPARAMS) <= set(vars(cfg))  # the names are real cfg options


def test_dqn_perturbs_its_own_hyperparameters():
    cfg = parse_cfg(["--env=CartPole-v1", "--algo=DQN"])
    hp = cfg_hyperparams(cfg)
    assert set(hp) == set(DQN_MUTABLE_HYPERPARAMS) <= set(vars(cfg))
    assert "ppo_clip_ratio" not in hp and hp["training_intensity"] == cfg.training_intensity
    learner_cfg = copy.copy(cfg)
    apply_hyperparams(learner_cfg, {**hp, "training_intensity": 16.0, "target_network_update_freq": 900.0})
    assert learner_cfg.training_intensity == 16.0 and learner_cfg.target_network_update_freq == 900.0


def test_json_round_trip_and_atomic_save(tmp_path, monkeypatch):
    flags = ("--pbt_start_mutation=0", "--pbt_period_env_steps=1", "--pbt_optimize_gamma")
    p = make_pbt(*flags, n=3, reward_shaping={"kill": 0.3})
    for s in range(1, 20):
        p.step(s % 3, s, {0: 1.0 * s, 1: math.nan, 2: 0.1})
    for st in p.states:
        assert PolicyPbtState.from_json(st.to_json()) == st
    save_pbt_state(tmp_path, p.states)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["pbt_p0.json", "pbt_p1.json", "pbt_p2.json"]
    json.loads((tmp_path / "pbt_p1.json").read_text())  # strict JSON
    loaded = load_pbt_state(tmp_path, 4, p.cfg)
    assert loaded[:3] == p.states and loaded[3] is None
    assert load_pbt_state(tmp_path / "missing", 2, p.cfg) == [None, None]

    # Resuming continues from the saved states exactly.
    q = PopulationBasedTraining(p.cfg, 3, rng=np.random.default_rng(5), reward_shaping={"kill": 0.3}, states=loaded)
    assert q.states == p.states

    # A failing replace leaves the previous file and no temp files behind.
    good = (tmp_path / "pbt_p0.json").read_text()
    p.step(0, 1000, {})

    def boom(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(pbt.os, "replace", boom)
    with pytest.raises(OSError):
        save_pbt_state(tmp_path, p.states)
    monkeypatch.undo()
    assert (tmp_path / "pbt_p0.json").read_text() == good
    assert sorted(os.listdir(tmp_path)) == ["pbt_p0.json", "pbt_p1.json", "pbt_p2.json"]


def test_load_reconciles_with_current_cfg(tmp_path):
    p = make_pbt("--pbt_optimize_gamma", "--pbt_start_mutation=0", "--pbt_period_env_steps=1", n=2)
    p.step(1, 1, {})
    save_pbt_state(tmp_path, p.states)
    cfg = make_cfg("--pbt_optimize_gamma=False")
    loaded = load_pbt_state(tmp_path, 2, cfg)
    assert all("gamma" not in s.hyperparams for s in loaded)
    q = PopulationBasedTraining(cfg, 2, rng=np.random.default_rng(0), reward_shaping={"new": 1.0}, states=loaded)
    assert q.hyperparams(1)["reward_shaping/new"] == 1.0  # coefficients unknown to the file start at the env value
    assert q.hyperparams(1)["learning_rate"] == p.hyperparams(1)["learning_rate"]
    assert q.states[1].history == p.states[1].history


def test_untrained_policies_are_not_ranked_nor_sources():
    """A policy at version 0 still has its initial random weights: with the versions given, its objective (that of a
    random policy) is left out of the ranking, so it is never copied, and the event says it was left out."""
    flags = ("--pbt_start_mutation=0", "--pbt_period_env_steps=1", "--pbt_replace_fraction=0.25")
    objectives = {0: 10.0, 1: 500.0, 2: 40.0, 3: 30.0}
    for seed in range(10):
        p = make_pbt(*flags, seed=seed)
        # without versions every known objective is ranked: policy 1 is the only one of the k=1 best
        assert p.step(0, 5, objectives)[0].source == 1
        q = make_pbt(*flags, seed=seed)
        [d] = q.step(0, 5, objectives, versions={0: 8, 1: 0, 2: 8, 3: 8})
        assert d.kind == "replacement" and d.source == 2 and d.untrained == [1]
        assert q.states[0].history[-1]["untrained"] == [1] and q.states[0].history[-1]["objectives"]["1"] == 500.0
    # missing versions count as 0; an untrained policy without an objective is not reported as left out
    p = make_pbt(*flags)
    [d] = p.step(0, 5, {0: 10.0, 1: math.nan, 2: 40.0, 3: 30.0}, versions={0: 8, 2: 8, 3: 8})
    assert d.source == 2 and d.untrained == [] and "untrained" not in p.states[0].history[-1]
    # nobody trained but the target: no one to compare with
    assert make_pbt(*flags).step(0, 5, objectives, versions={0: 8})[0].kind == "mutation"


def test_a_due_step_waits_until_the_policy_has_trained_since_its_last_one():
    flags = ("--pbt_start_mutation=0", "--pbt_period_env_steps=1000", "--pbt_mutation_rate=1.0")
    p = make_pbt(*flags, n=2)
    objectives = {0: 1.0, 1: 5.0}
    # never trained: the step waits, the period does not restart, nothing is recorded
    assert p.step(0, 1500, objectives, versions={0: 0, 1: 4}) == []
    assert p.skipped[0] == "its learner has not trained yet (policy version 0)"
    assert p.states[0].last_pbt_env_steps == 0 and p.states[0].history == []
    # trained: the step is taken at once (the period had already elapsed); a replacement's weights are one version on
    [d] = p.step(0, 1600, objectives, versions={0: 3, 1: 4})
    assert d.kind == "replacement" and 0 not in p.skipped
    assert (p.states[0].last_pbt_env_steps, p.states[0].last_pbt_policy_version) == (1600, 4)
    # the replaced weights (version 4) have not trained since: the next due step waits again
    assert p.step(0, 2700, objectives, versions={0: 4, 1: 9}) == []
    assert p.skipped[0] == "its learner has not trained since its last PBT step (policy version 4)"
    assert p.step(0, 2701, objectives) != []  # a caller without versions: no such rule
    # not due: no waiting reason is left over from an earlier call
    assert p.step(0, 2702, objectives, versions={0: 4, 1: 9}) == [] and 0 not in p.skipped
    # the version at the last step survives a save and a resume
    st = PolicyPbtState.from_json(p.states[0].to_json())
    assert st == p.states[0] and st.last_pbt_policy_version == p.states[0].last_pbt_policy_version
    old = json.loads(p.states[0].to_json())
    del old["last_pbt_policy_version"]  # a file written before the field existed
    assert PolicyPbtState.from_json(json.dumps(old)).last_pbt_policy_version == 0
