"""The learner and the policy workers are generic: a serial-mode CartPole run trains with a test-only algorithm
(tests/algo/a2c.py) registered under --algo, which acts through its own class and gets only the buffers it asks for."""

from __future__ import annotations

import pytest
import torch

from sample_factory.algo import registry
from sample_factory.config import parse_cfg
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.runner import Runner
from tests.algo.a2c import A2CAlgorithm


class SpyA2C(A2CAlgorithm):
    """Records the keys of every batch and counts acting calls. (Module level: serial snapshots pickle it.)"""

    batches: list[set[str]] = []
    acted = 0

    def train(self, batch, policy_version, policy_id=None):
        SpyA2C.batches.append(set(batch))
        return super().train(batch, policy_version, policy_id)

    @classmethod
    def act(cls, *args, **kwargs):
        SpyA2C.acted += 1
        return super().act(*args, **kwargs)


@pytest.mark.timeout(120)
def test_serial_run_with_a_registered_algorithm(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.ALGORITHMS, "A2C", SpyA2C)
    batches = SpyA2C.batches = []
    argv = [
        "--env=CartPole-v1",
        "--serial_mode=True",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--batch_size=256",
        "--num_batches_per_epoch=1",
        "--seed=1",
        "--train_for_env_steps=4096",
        "--experiment=a2c",
        f"--train_dir={tmp_path}",
    ]
    cfg = parse_cfg(argv)
    cfg.algo = "A2C"  # not a choice of --algo: registered by this test only
    assert Runner(cfg).run() == 0

    assert len(batches) >= 4 and SpyA2C.acted > 0
    assert all(keys == set(A2CAlgorithm.required_buffers) for keys in batches)  # no log-probs, versions, ids
    state = torch.load(list_checkpoints(tmp_path / "a2c" / "checkpoint_p0")[-1], weights_only=False)
    assert state["policy_version"] == len(batches)  # one SGD step per batch
    assert isinstance(state["algo"]["optimizer"]["state"], dict) and state["algo"]["optimizer"]["state"]
