"""The throughput auto-tuner: its reading of the timing breakdown, its moves (ordered by the bottleneck, always a
valid config, never touching what the user typed), and a short real run that ends with a command line and the
measured FPS of the defaults and of the pick."""

from __future__ import annotations

import json

import pytest

from sample_factory.tools import tune

SUMMARY = [
    "[10:00:35] done: 100672 env steps in 3.3 s, 30828 FPS overall",
    "  actor (avg of 2): env_step 0.6 s, process_lifetime 3.0 s",
    "  learner (avg of 1): copy_batch 0.0 s, process_lifetime 3.2 s, publish_weights 0.0 s, train 1.6 s",
    "  policy (avg of 1): inference 2.7 s, process_lifetime 3.0 s, weight_update 0.0 s",
    "  policy 0: reward 199.73, 1667 episodes, 100672 env steps (30828 FPS), 0 samples dropped for lag",
]
BASE = {
    "num_workers": 8,
    "num_envs_per_worker": 4,
    "worker_num_splits": 2,
    "policy_workers_per_policy": 1,
    "learner_main_loop_num_cores": 1,
}


def test_busy_fractions_from_the_timing_lines():
    busy = tune.busy_fractions(SUMMARY)
    assert busy == pytest.approx({"actor": 0.2, "learner": 0.5, "policy": 0.9})


def test_moves_start_with_the_bottleneck_and_are_valid():
    ms = tune.moves(BASE, {"policy": 0.9, "learner": 0.5, "actor": 0.2}, cores=16)
    assert ms[0][1]["num_envs_per_worker"] == 8 and "inference" in ms[0][0]
    assert ms[1][1]["policy_workers_per_policy"] == 2
    assert all(tune.valid(s, 16) and s != BASE for _, s in ms)
    learner_first = tune.moves(BASE, {"learner": 0.95, "policy": 0.3}, cores=16)
    assert learner_first[0][1]["num_workers"] == 7
    # on 2 cores: never a second policy worker or learner thread
    small = tune.moves({**BASE, "num_workers": 2}, {"policy": 0.9}, cores=2)
    assert all(s["policy_workers_per_policy"] == 1 and s["learner_main_loop_num_cores"] == 1 for _, s in small)
    assert not tune.valid({**BASE, "num_envs_per_worker": 3}, 16)  # splits must divide the envs


def test_moves_keep_a_presets_learner_threads_on_a_small_machine():
    # the atari preset has 2 learner threads: on 2 cores the search must still move (it found no move at all before)
    atari = {**BASE, "num_workers": 2, "num_envs_per_worker": 16, "learner_main_loop_num_cores": 2}
    ms = tune.moves(atari, {"learner": 0.63, "policy": 0.35, "actor": 0.27}, cores=2)
    assert ms and ms[0][1]["num_workers"] == 1
    assert all(s["learner_main_loop_num_cores"] <= 2 and s["policy_workers_per_policy"] == 1 for _, s in ms)
    assert any(s["learner_main_loop_num_cores"] == 1 for _, s in ms)


@pytest.mark.timeout(300)
def test_tune_cartpole_short(tmp_path, capsys):
    out = tmp_path / "tune.json"
    argv = ["--env=CartPole-v1", "--seconds=4", "--max_trials=1", "--confirm_rounds=1", f"--output={out}"]
    assert tune.main([*argv, "--num_workers=2"]) == 0
    text = capsys.readouterr().out
    assert "defaults:" in text and "pick:" in text and "python train.py --env=CartPole-v1" in text
    result = json.loads(out.read_text())
    assert len(result["trials"]) == 2 and result["trials"][0]["why"] == "defaults"
    assert result["trials"][0]["fps"] > 0 and set(result["trials"][0]["busy"]) == {"actor", "policy", "learner"}
    assert all(t["settings"]["num_workers"] == 2 for t in result["trials"])  # typed by the user: not tuned
    assert result["pick_fps"] >= result["defaults_fps"] * 0.999 or result["pick"] == result["defaults"]


def test_candidates_train_py_would_refuse_cost_no_trial():
    """The synchronous mujoco preset needs its 2,048-sample iteration to be a multiple of a sampling round: 3 workers
    (1,536 per round) are refused by train.py, so the search skips them; 4 workers (2,048) are fine."""
    base = ["--env=HalfCheetah-v5"]
    assert not tune.parses(base, {"num_workers": 3})
    assert tune.parses(base, {"num_workers": 4})
    assert tune.parses(["--env=CartPole-v1"], {"num_workers": 3})  # asynchronous: any worker count
