"""Callbacks for the DQN fault tests (tests/reliability/test_dqn_faults.py), imported in every process of a run
through `--callbacks=tests.reliability.dqn_log:DQNLog`: the learner appends one JSON line per training iteration
(env steps, replay size, SGD steps, samples, its pid) and the runner one per worker restart, to
<SF_TEST_DQN_LOG_DIR>/<pid>.jsonl. These are the learner's raw per-iteration numbers, not TensorBoard's averages.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from sample_factory.experiment.callbacks import Callbacks

LOG_DIR_VAR = "SF_TEST_DQN_LOG_DIR"
TRAIN_KEYS = ("env_steps", "replay_size", "sgd_steps", "samples", "version")


def _append(**fields) -> None:
    directory = os.environ.get(LOG_DIR_VAR)
    if directory:
        line = json.dumps({"pid": os.getpid(), "t": time.time(), **fields})
        with open(Path(directory) / f"{os.getpid()}.jsonl", "a") as f:
            f.write(line + "\n")


class DQNLog(Callbacks):
    def on_training_result(self, policy_id, result):
        _append(hook="train", **{k: result[k] for k in TRAIN_KEYS})

    def on_worker_restarted(self, role, index, reason, restarts):
        _append(hook="restart", role=role, index=str(index))


def read_log(directory: Path) -> list[dict]:
    """Every line written so far, oldest first (a partly written last line is skipped)."""
    rows = []
    for path in Path(directory).glob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return sorted(rows, key=lambda r: r["t"])


def train_rows(directory: Path) -> list[dict]:
    return [r for r in read_log(directory) if r["hook"] == "train"]
