"""PBT in a running system (serial mode, inspectable): with 4 policies and a tiny period on CartPole, mutations and
replacements happen, a replaced policy's weights equal its source's right after the replacement, hyperparameters
stay within their bounds, and the PBT state survives a stop and resume."""

from __future__ import annotations

import json

import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.pbt.population import load_pbt_state
from sample_factory.runner import Runner
from sample_factory.runtime.shared_buffers import SharedWeights
from sample_factory.workers.learner import Learner

ARGV = [
    "--env=CartPole-v1",
    "--serial_mode=True",
    "--num_workers=1",
    "--num_envs_per_worker=32",  # serial mode: larger inference batches, fewer calls per env step
    "--rollout=16",
    "--batch_size=128",
    "--num_policies=4",
    "--with_pbt=True",
    # A PBT step per policy every 1000 of its env steps (--train_for_env_steps counts per policy): a few rounds in a
    # few thousand env steps; each policy has ~50 finished CartPole episodes by 1000, so its objective is known.
    "--pbt_period_env_steps=1000",
    "--pbt_start_mutation=1000",
    "--pbt_replace_fraction=0.25",
    "--pbt_mutation_rate=0.5",
    "--pbt_replace_reward_gap=0.05",
    "--seed=5",
    "--experiment=x",
]


@pytest.mark.timeout(240)
def test_pbt_mutates_replaces_copies_weights_and_resumes(tmp_path, monkeypatch):
    replacements = []
    update = Learner._pbt_update

    def spy(self, hyperparams, source):
        update(self, hyperparams, source)
        if source is not None:  # right after the replacement: the target's weights are the source's
            flat = torch.cat([t.detach().reshape(-1).float() for t in SharedWeights.tensors_of(self.model)])
            src = self.all_weights[source]
            replacements.append((self.policy_id, source, torch.equal(flat, src.flat[int(src.meta[1])])))
        assert dict(vars(self.cfg), **hyperparams) == vars(self.cfg)  # applied to the learner's own cfg

    monkeypatch.setattr(Learner, "_pbt_update", spy)
    cfg = parse_cfg([*ARGV, "--train_for_env_steps=3000", f"--train_dir={tmp_path}"])
    runner = Runner(cfg)
    assert runner.run() == 0
    assert replacements, "no replacement happened"
    assert all(equal for _, _, equal in replacements), replacements
    assert all(target != source for target, source, _ in replacements)

    pbt = runner.parts.pbt.pbt
    kinds = [e["kind"] for st in pbt.states for e in st.history]
    assert "mutation" in kinds and "replacement" in kinds
    for st in pbt.states:
        for name, value in st.hyperparams.items():
            low, high = pbt.bounds[name]
            assert low <= value <= high, (name, value, low, high)

    # the state files hold the same histories; a resumed run starts from them and keeps adding
    saved = load_pbt_state(tmp_path / "x", 4, cfg)
    assert [s.history for s in saved] == [st.history for st in pbt.states]
    before = {p: json.loads((tmp_path / "x" / f"pbt_p{p}.json").read_text()) for p in range(4)}
    cfg2 = parse_cfg([*ARGV, "--train_for_env_steps=4500", f"--train_dir={tmp_path}"])
    resumed = Runner(cfg2)
    assert resumed.run() == 0
    for p in range(4):
        after = json.loads((tmp_path / "x" / f"pbt_p{p}.json").read_text())
        assert after["history"][: len(before[p]["history"])] == before[p]["history"]
    assert sum(len(st.history) for st in resumed.parts.pbt.pbt.states) > sum(len(b["history"]) for b in before.values())


@pytest.mark.timeout(120)
def test_pbt_mutates_reward_shaping_of_the_envs_each_policy_plays(tmp_path):
    argv = [a for a in ARGV if not a.startswith(("--env=", "--num_policies"))]
    argv += ["--env=tests.shaped_env:ShapedCartPole-v0", "--use_rnn=False"]  # no preset: not the default GRU 512
    # PBT steps at ~1000 and ~2000 env steps per policy, the run ends at 2500: the envs have received the last
    # coefficients when it stops (a step at the very end may be the one the actors never get)
    argv += ["--pbt_mutation_rate=1.0", "--num_policies=2", "--train_for_env_steps=2500", f"--train_dir={tmp_path}"]
    runner = Runner(parse_cfg(argv))
    assert runner.run() == 0
    pbt = runner.parts.pbt.pbt
    assert all("reward_shaping/alive_bonus" in st.hyperparams for st in pbt.states)
    mutated = [e for st in pbt.states for e in st.history if "reward_shaping/alive_bonus" in e["changes"]]
    assert mutated
    actor = next(c for c in runner.parts.components if c.role == "actor")
    for split in actor.splits:
        for i, env in enumerate(split.group.envs):
            policy = int(split.col_policy[i])
            want = pbt.states[policy].hyperparams["reward_shaping/alive_bonus"]
            assert env.get_wrapper_attr("coefficients")["alive_bonus"] == pytest.approx(want)
