"""The actor worker's reported columns: which agents' episodes are the training return. The rank comes from the
algorithm class (`Algorithm.reported_rank`), not from a check of --algo. The worker runs in this process."""

from __future__ import annotations

import numpy as np
import pytest

from sample_factory.algo.appo import APPOAlgorithm
from tests.workers.test_actor_decorrelation import _worker


def _reported_columns(index: int, *flags: str, evaluation_run: bool = False) -> list[np.ndarray] | None:
    worker, _ = _worker(*flags, index=index, evaluation_run=evaluation_run)
    worker.init()
    try:
        return worker.reported_columns
    finally:
        worker.finish()


@pytest.mark.timeout(60)
def test_dqn_reports_the_least_exploring_third_of_the_agents():
    # 2 workers x 2 splits x 2 envs: agents 0..7, ranks i / 7; rank >= 2/3 from agent 5 on (worker 1, split 0, col 1)
    assert [c.tolist() for c in _reported_columns(1, "--algo=DQN")] == [[False, True], [True, True]]
    assert [c.tolist() for c in _reported_columns(0, "--algo=DQN")] == [[False, False], [False, False]]


@pytest.mark.timeout(60)
def test_every_agent_reports_without_a_reported_rank():
    assert APPOAlgorithm.reported_rank is None
    assert _reported_columns(0) is None
    assert _reported_columns(1, "--algo=DQN", evaluation_run=True) is None


@pytest.mark.timeout(60)
def test_the_rank_is_the_algorithm_classes(monkeypatch):
    monkeypatch.setattr(APPOAlgorithm, "reported_rank", 0.5)  # agents 4..7 of 0..7 (rank 4 / 7 >= 0.5)
    assert [c.tolist() for c in _reported_columns(1)] == [[True, True], [True, True]]
    assert [c.tolist() for c in _reported_columns(0)] == [[False, False], [False, False]]
