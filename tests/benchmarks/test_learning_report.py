"""benchmarks.learning_report: the markdown tables and the plots of a learning benchmark's record, from synthetic
records."""

from __future__ import annotations

from benchmarks import learning_report as lr
from benchmarks.learning_suites import NOT_FILLED

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_mean_curve_over_the_common_range():
    x, y = lr.mean_curve([([0, 10], [0, 10]), ([0, 5, 20], [10, 10, 10])], n=3)
    assert x == [0, 5, 10] and y == [5, 7.5, 10]
    assert lr.mean_curve([([0, 1], [1, 1]), ([2, 3], [1, 1])]) == ([], [])


def _record(env: str, seed: int, final: float, reached_at: int | None) -> dict:
    return {
        "env": env,
        "seed": seed,
        "rc": 0,
        "stop_reason": "reached 1000 env steps",
        "complete": True,
        "final_reward": final,
        "best_reward": final + 1,
        "env_steps": 1000,
        "wall_s": 120.0,
        "reached": reached_at is not None,
        "env_steps_to_threshold": reached_at,
        "wall_s_to_threshold": None if reached_at is None else 60.0,
        "fps": 500.0,
        "curve": [[100, 1.0, 1.0], [1000, 120.0, final]],
    }


def _doc() -> dict:
    env = {
        "threshold": 10.0,
        "threshold_source": "src-thr",
        "budget": {"env_steps": 1000, "seconds": 60, "seeds": 2},
        "budget_source": "src-budget",
        "extra_flags": [],
        "references": [{"label": "paper", "value": None, "source": NOT_FILLED}],
    }
    return {
        "suite": "demo",
        "budget": "ci",
        "commands": ["python -m benchmarks.benchmark_learning --suite=demo"],
        "machine": {"cpu": "Test CPU", "cpu_count": 2, "ram_gib": 4.0, "torch": "t", "gymnasium": "g"},
        "envs": {"E-v0": env},
        "runs": {"E-v0/s0": _record("E-v0", 0, 12.0, 800), "E-v0/s1": _record("E-v0", 1, 8.0, None)},
    }


def test_render_markdown_table():
    md = lr.render_markdown(_doc(), {"E-v0": "demo_E-v0.png"})
    assert "--suite=demo" in md and "Test CPU" in md and "GPU: none" in md
    row = next(line for line in md.splitlines() if line.startswith("| E-v0 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # env, seeds, budget, final, threshold, reached, median steps, median minutes, fps, published, last evaluation
    assert cells == [
        "E-v0",
        "2",
        "1,000 env steps or 60 s",
        "10.0 ± 2.8 (8.0..12.0)",
        "10",
        "1/2",
        "800",
        "1.00",
        "500",
        "paper: not filled",
        "n/a",
    ]
    assert "src-thr" in md and "src-budget" in md and "![E-v0" in md and "(demo_E-v0.png)" in md
    seed_rows = [line for line in md.splitlines() if line.startswith(("| 0 |", "| 1 |"))]
    assert len(seed_rows) == 2 and "| 800 | 1.00 |" in seed_rows[0] and "| n/a | n/a |" in seed_rows[1]
    assert "Passed with `--extra`" not in md


def test_periodic_evaluations_in_the_tables():
    """The tables show each seed's last evaluation and their mean over seeds (a protocol such as --eval_epsilon=0.1
    can differ from the training episodes')."""
    doc = _doc()
    doc["runs"]["E-v0/s0"]["evals"] = [[500_000, 2.0, 100], [1_000_000, 4.0, 100]]
    doc["runs"]["E-v0/s1"]["evals"] = [[990_000, 6.0, 100]]
    md = lr.render_markdown(doc, {})
    row = next(line for line in md.splitlines() if line.startswith("| E-v0 |"))
    assert row.endswith("| 5.0 ± 1.4 (2 seed(s), at 990,000+ env steps) |")
    seed_rows = [line for line in md.splitlines() if line.startswith(("| 0 |", "| 1 |"))]
    assert seed_rows[0].endswith("| 4.0 at 1,000,000 env steps (100 episodes) |")
    assert seed_rows[1].endswith("| 6.0 at 990,000 env steps (100 episodes) |")


def test_an_interrupted_run_is_left_out_of_the_statistics():
    """A run stopped by a signal (rerunning the suite resumes it) must not pull the seeds' final reward toward its
    unfinished value: the table counts it as unfinished; its own row still shows where it stopped."""
    doc = _doc()
    stopped = {**_record("E-v0", 2, 1.0, None), "rc": 130, "stop_reason": "SIGINT received", "complete": False}
    doc["runs"]["E-v0/s2"] = stopped
    md = lr.render_markdown(doc, {})
    row = next(line for line in md.splitlines() if line.startswith("| E-v0 |"))
    assert "| 2 (+1 unfinished) |" in row and "| 10.0 ± 2.8 (8.0..12.0) |" in row and "| 1/2 |" in row
    assert any(line.startswith("| 2 | 130 | SIGINT received |") for line in md.splitlines())


def test_render_markdown_names_the_extra_flags_and_a_budget_they_override():
    doc = _doc()
    doc["envs"]["E-v0"]["passthrough_flags"] = ["--train_for_env_steps=5000", "--lr_schedule=linear_decay"]
    md = lr.render_markdown(doc, {})
    row = next(line for line in md.splitlines() if line.startswith("| E-v0 |"))
    assert "| 1,000 env steps or 60 s, overridden by --train_for_env_steps=5000 |" in row
    assert (
        "- Passed with `--extra` (after the flags above): --train_for_env_steps=5000 --lr_schedule=linear_decay" in md
    )


def test_write_report_plots(tmp_path):
    paths = lr.write_report(_doc(), tmp_path)
    assert sorted(p.name for p in paths) == ["demo.md", "demo_E-v0.png"]
    assert (tmp_path / "demo_E-v0.png").read_bytes()[:8] == PNG_SIGNATURE
