"""An actor worker seeds env `id` with seed * 1000 + env_seed_offset + id, whichever backend steps its envs: the
python envs one by one, EnvPool and gymnasium's batched CartPole with the split's base seed and env ids (they add the
ids themselves). The group makers are replaced by recorders: no env is made."""

from __future__ import annotations

import gymnasium as gym
import pytest

import sample_factory.envs.envpool_group as envpool_group
import sample_factory.envs.vector_group as vector_group
from sample_factory.config import parse_cfg
from sample_factory.runtime.messages import Channels
from sample_factory.runtime.shared_buffers import TrajectoryBuffers, make_buffer_spec
from sample_factory.workers.actor_worker import ActorWorker

SEED, OFFSET, N_ENVS, N_SPLITS = 3, 7, 6, 2


def _worker(backend: str, index: int) -> ActorWorker:
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            "--num_workers=2",
            f"--num_envs_per_worker={N_ENVS}",
            f"--worker_num_splits={N_SPLITS}",
            "--use_rnn=False",
            f"--env_backend={backend}",
            f"--seed={SEED}",
            f"--env_seed_offset={OFFSET}",
        ]
    )
    env = gym.make(cfg.env)
    spec = make_buffer_spec(cfg, env.observation_space, env.action_space, 0, 1)
    env.close()
    buffers = TrajectoryBuffers(spec, share=False)
    return ActorWorker(cfg, index, buffers, Channels(cfg.num_workers, cfg.num_policies, "local"))


def _expected_ids(index: int, split: int) -> list[int]:
    n = N_ENVS // N_SPLITS
    first = (index * N_SPLITS + split) * n
    return list(range(first, first + n))


@pytest.mark.parametrize("backend, module", [("envpool", envpool_group), ("gymnasium_vector", vector_group)])
@pytest.mark.parametrize("index", [0, 1])
def test_batched_backends_get_the_run_base_seed_and_the_split_env_ids(monkeypatch, backend, module, index):
    calls = []
    name = "make_envpool_group" if backend == "envpool" else "make_vector_group"
    monkeypatch.setattr(module, name, lambda cfg, n, base_seed, ids, **kw: calls.append((n, base_seed, ids)))
    worker = _worker(backend, index)
    for s in range(N_SPLITS):
        worker._make_group(s, SEED * 1000 + OFFSET)
    n = N_ENVS // N_SPLITS
    assert calls == [(n, SEED * 1000 + OFFSET, _expected_ids(index, s)) for s in range(N_SPLITS)]


@pytest.mark.parametrize("index", [0, 1])
def test_python_envs_are_seeded_with_base_seed_plus_env_id(index):
    worker = _worker("gymnasium", index)
    for s in range(N_SPLITS):
        group = worker._make_group(s, SEED * 1000 + OFFSET)
        try:
            assert group.seeds == [SEED * 1000 + OFFSET + i for i in _expected_ids(index, s)]
        finally:
            group.close()
