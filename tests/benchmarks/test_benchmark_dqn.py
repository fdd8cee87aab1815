"""The DQN side-by-side benchmark's summary over seeds (the runs themselves take minutes: not in CI)."""

from __future__ import annotations

import ast

from benchmarks import benchmark_dqn


def run(solved_s, steps_per_s, solved_steps=1000):
    return {"solved_s": solved_s, "solved_steps": solved_steps if solved_s else None, "steps_per_s": steps_per_s}


def test_summary_medians_over_solved_seeds_and_ratio():
    runs = {
        1: {"sample_factory_dqn": run(100.0, 1000.0), "sb3_dqn": run(None, 400.0)},
        2: {"sample_factory_dqn": run(120.0, 1200.0), "sb3_dqn": run(900.0, 500.0)},
        3: {"sample_factory_dqn": run(None, 1100.0), "sb3_dqn": run(700.0, 450.0)},
    }
    s = benchmark_dqn.summarize(runs)
    assert s["sample_factory_dqn"]["solved"] == "2/3" and s["sb3_dqn"]["solved"] == "2/3"
    assert s["sample_factory_dqn"]["median_solved_s"] == 110.0 and s["sb3_dqn"]["median_solved_s"] == 800.0
    assert abs(s["speedup_to_solve"] - 800.0 / 110.0) < 1e-9
    assert abs(s["steps_per_s_ratio"] - 1100.0 / 450.0) < 1e-9


def test_no_ratio_when_one_side_never_solved():
    runs = {1: {"sample_factory_dqn": run(100.0, 1000.0), "sb3_dqn": run(None, 400.0)}}
    s = benchmark_dqn.summarize(runs)
    assert s["sb3_dqn"]["solved"] == "0/1" and s["speedup_to_solve"] is None


def test_sb3_script_is_valid_python():
    ast.parse(benchmark_dqn.SB3_SCRIPT)
