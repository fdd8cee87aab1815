"""--decorrelate_experience_max_seconds: each split of an actor worker draws a delay in [0, max] and sends its first
inference request only once it has passed (the worker keeps serving its loop meanwhile: no sleep). The worker runs
in this process on local channels, stepped by hand."""

from __future__ import annotations

import time

import gymnasium as gym
import pytest

from sample_factory.config import parse_cfg
from sample_factory.runtime.messages import REQUEST, Channels
from sample_factory.runtime.shared_buffers import TrajectoryBuffers, make_buffer_spec
from sample_factory.workers.actor_worker import ActorWorker

MAX_S = 0.4


def _worker(
    *flags: str, gen: int = 0, index: int = 0, resumed: bool = False, evaluation_run: bool = False
) -> tuple[ActorWorker, Channels]:
    cfg = parse_cfg(
        [
            "--env=CartPole-v1",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--worker_num_splits=2",
            "--rollout=8",
            "--use_rnn=False",
            "--set_workers_cpu_affinity=False",  # the worker runs in the test process: leave its affinity alone
            "--force_envs_single_thread=False",
            "--seed=1",
            *flags,
        ]
    )
    cfg.evaluation_run = evaluation_run
    env = gym.make(cfg.env)
    spec = make_buffer_spec(cfg, env.observation_space, env.action_space, 0, 1)
    env.close()
    buffers = TrajectoryBuffers(spec, share=False)
    buffers.generation[index] = gen
    channels = Channels(cfg.num_workers, cfg.num_policies, "local")
    return ActorWorker(cfg, index, buffers, channels, resumed=resumed), channels


def _requested_splits(channels: Channels) -> list[int]:
    return [msg[2] for msg in channels.policy[0].get_many(block=False) if msg[0] == REQUEST]


@pytest.mark.timeout(60)
def test_each_split_waits_its_drawn_delay_before_the_first_request():
    worker, channels = _worker(f"--decorrelate_experience_max_seconds={MAX_S}")
    t0 = time.monotonic()
    worker.init()
    try:
        delays = {s.index: s.start_at - t0 for s in worker.splits}
        assert all(0.0 <= d <= MAX_S + 0.05 for d in delays.values()), delays
        assert len({round(d, 6) for d in delays.values()}) == 2  # drawn per split
        assert _requested_splits(channels) == []  # nothing sent at start
        assert worker.activity == "decorrelating experience"
        sent_at: dict[int, float] = {}
        while len(sent_at) < 2 and time.monotonic() - t0 < MAX_S + 5:
            worker.on_idle()
            now = time.monotonic()
            for s in _requested_splits(channels):
                sent_at[s] = now
            time.sleep(0.005)
        assert sorted(sent_at) == [0, 1]
        for s, at in sent_at.items():
            assert at - t0 >= delays[s] - 0.001, (s, at - t0, delays[s])  # not before its delay
            assert at - t0 <= delays[s] + 0.25, (s, at - t0, delays[s])  # and soon after it
        assert worker.activity == "stepping envs" and all(s.start_at == 0.0 for s in worker.splits)
        worker.on_idle()
        assert _requested_splits(channels) == []  # one first request per split, not one per idle call
    finally:
        worker.finish()


@pytest.mark.timeout(60)
def test_another_worker_draws_other_delays():
    a, _ = _worker(f"--decorrelate_experience_max_seconds={MAX_S}", index=0)
    b, _ = _worker(f"--decorrelate_experience_max_seconds={MAX_S}", index=1)
    for w in (a, b):
        w.init()
    try:
        assert [s.start_at for s in a.splits] != [s.start_at for s in b.splits]
    finally:
        a.finish()
        b.finish()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "flags, gen",
    [
        ((), 0),  # default 0: no delay
        ((f"--decorrelate_experience_max_seconds={MAX_S}", "--serial_mode=True"), 0),  # one thread: never stall it
        ((f"--decorrelate_experience_max_seconds={MAX_S}",), 1),  # a restarted worker joins at once
    ],
)
def test_first_requests_go_out_at_once(flags, gen):
    worker, channels = _worker(*flags, gen=gen)
    worker.init()
    try:
        assert sorted(_requested_splits(channels)) == [0, 1]
        assert all(s.start_at == 0.0 for s in worker.splits)
    finally:
        worker.finish()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "flags, gen, resumed, decorrelated",
    [
        ((), 0, False, True),  # a new run: random steps spread the episodes
        ((), 0, True, False),  # a resumed run: its policy has trained, its episodes count from the first step
        ((), 1, False, False),  # a replacement worker: the other workers' episodes are spread already
        (("--decorrelate_envs_on_one_worker=False",), 0, False, False),
    ],
)
def test_random_decorrelation_steps_only_before_the_policy_has_trained(monkeypatch, flags, gen, resumed, decorrelated):
    from sample_factory.envs.env_group import EnvGroup
    from sample_factory.envs.vector_group import VectorEnvGroup

    calls = []
    for cls in (EnvGroup, VectorEnvGroup):
        original = cls.random_steps
        monkeypatch.setattr(
            cls,
            "random_steps",
            lambda self, counts, *a, _f=original, **k: calls.append(counts) or _f(self, counts, *a, **k),
        )
    worker, channels = _worker(*flags, gen=gen, resumed=resumed)
    worker.init()
    try:
        assert len(calls) == (2 if decorrelated else 0)  # one call per split
        assert sorted(_requested_splits(channels)) == [0, 1]
    finally:
        worker.finish()
