"""What a policy worker hands the algorithm and where it writes the answers, for a batch of requests from several
actors and splits. The components run in this process (serial mode), wired with in-process channels."""

from __future__ import annotations

import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.runner import Runner
from sample_factory.runtime.messages import decode

WORKERS, SPLITS, ENVS_PER_SPLIT = 2, 2, 3


@pytest.fixture
def served(tmp_path):
    """(policy worker, requests of one batch, what act() got and returned) for --algo=... ."""
    made: list[Runner] = []

    def make(algo: str):
        argv = [
            "--env=CartPole-v1",
            f"--algo={algo}",
            "--serial_mode=True",
            f"--num_workers={WORKERS}",
            f"--worker_num_splits={SPLITS}",
            f"--num_envs_per_worker={SPLITS * ENVS_PER_SPLIT}",
            "--decorrelate_envs_on_one_worker=False",
            "--seed=3",
            "--experiment=x",
            f"--train_dir={tmp_path / algo}",
        ]
        runner = Runner(parse_cfg(argv))
        runner.setup()
        made.append(runner)
        comps = {c.key: c for c in runner.components}
        worker = comps["policy", (0, 0)]
        for w in range(WORKERS):
            comps["actor", w].initialize()  # each split sends its first request
        worker.initialize()
        calls = []
        act = worker.algo.act

        def recording_act(*args, **kwargs):
            result = act(*args, **kwargs)
            calls.append((kwargs.get("agent_rank"), result))
            return result

        recording = type(
            "Recording",
            (),
            {"act": staticmethod(recording_act), "values": worker.algo.values, "uses_agent_rank": worker.agent_ranks},
        )
        worker.algo = worker.runner.algo = recording
        msgs = runner.channels.policy[0].get_many(block=False)
        requests = [decode(m) for m in msgs]
        assert len(requests) == WORKERS * SPLITS
        worker.on_messages(msgs)
        assert len(calls) == 1, "one batch for every pending request"
        return worker, requests, calls[0]

    yield make
    for runner in made:
        runner.summaries.close()
        runner.lock.release()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_answers_land_in_each_requests_split_row(served, algo):
    worker, requests, (_, result) = served(algo)
    b, w, n = worker.buffers, worker.answer_area, ENVS_PER_SPLIT
    for k, r in enumerate(requests):  # rows of the batch in request order
        row = r.actor_idx * SPLITS + r.split_idx
        assert torch.equal(b.answer_actions[w, row], result.actions[k * n : (k + 1) * n])
        assert torch.equal(b.answer_log_probs[w, row], result.log_probs[k * n : (k + 1) * n])
        assert torch.equal(b.answer_values[w, row], result.values[k * n : (k + 1) * n])
        assert b.answer_version[w, row].item() == worker.version


@pytest.mark.timeout(60)
def test_agent_ranks_only_for_algorithms_that_read_them(served):
    _, _, (rank, _) = served("APPO")
    assert rank is None  # APPO samples from its distribution: no per-agent exploration to compute
    _, requests, (rank, _) = served("DQN")
    num_agents = WORKERS * SPLITS * ENVS_PER_SPLIT
    expected = [
        ((r.actor_idx * SPLITS + r.split_idx) * ENVS_PER_SPLIT + c) / (num_agents - 1)
        for r in requests
        for c in range(ENVS_PER_SPLIT)
    ]
    assert torch.allclose(rank, torch.tensor(expected))
    assert rank.min().item() >= 0.0 and rank.max().item() <= 1.0
