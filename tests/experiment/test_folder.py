"""sample_factory/experiment/folder.py: undoing a new run that never started."""

import os

from sample_factory.experiment.folder import folder_entries, remove_created


def test_a_folder_the_run_made_is_removed(tmp_path):
    d = tmp_path / "exp"
    before = folder_entries(d)
    assert before is None
    (d / "sub").mkdir(parents=True)
    (d / "cfg.json").write_text("{}")
    remove_created(d, before)
    assert not d.exists()


def test_a_prepared_folder_keeps_what_was_there(tmp_path):
    """A benchmark harness makes the folder and its log first: a failed run removes only its own entries."""
    d = tmp_path / "exp"
    d.mkdir()
    (d / "benchmark.log").write_text("harness")
    (d / "old").mkdir()
    before = folder_entries(d)
    assert before == {"benchmark.log", "old"}
    (d / "cfg.json").write_text("{}")
    (d / ".summary" / "0").mkdir(parents=True)
    (d / "sf_log.txt").write_text("x")
    remove_created(d, before)
    assert sorted(os.listdir(d)) == ["benchmark.log", "old"]
    assert (d / "benchmark.log").read_text() == "harness"


def test_a_config_built_in_code_cannot_escape_train_dir(tmp_path):
    """parse_cfg refuses --experiment=..; a Config made in code must not reach --restart_behavior's rmtree either."""
    import pytest

    from sample_factory.config import parse_cfg
    from sample_factory.experiment.folder import ExperimentError, prepare_experiment_dir

    td = tmp_path / "td"
    (td / "other").mkdir(parents=True)
    (td / "cfg.json").write_text("{}")  # as if train_dir itself held an experiment
    cfg = parse_cfg(["--env=CartPole-v1", f"--train_dir={td}", "--restart_behavior=overwrite"])
    cfg.experiment = "."
    with pytest.raises(ExperimentError, match="not a folder name"):
        prepare_experiment_dir(cfg)
    assert (td / "other").is_dir() and (td / "cfg.json").exists()
