"""--with_wandb: SummaryWriters mirror every TensorBoard scalar into a W&B run, here in wandb's offline mode (no
network): the run file is read back (tests/experiment/wandb_files.py) to check the rows, the per-policy x axes, the
run's metadata and that a resumed experiment continues the same run."""

from __future__ import annotations

import sys

import pytest

from sample_factory.config import ConfigError, finalize_cfg, parse_cfg
from sample_factory.experiment.progress import ProgressTracker
from sample_factory.experiment.summaries import SummaryWriters
from sample_factory.experiment.wandb_logging import WANDB_ID_FILE, import_wandb
from tests.experiment.wandb_files import history_rows, offline_runs, run_records
from tests.integration.conftest import tensorboard_tags


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B in offline mode, writing under tmp_path; its service process is stopped afterwards (a training run's
    stops when the runner exits)."""
    wandb = pytest.importorskip("wandb")
    wandb_dir = tmp_path / "wandb_dir"
    wandb_dir.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(wandb_dir))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield wandb_dir
    wandb.teardown()


def _cfg(tmp_path, *flags: str):
    return parse_cfg(["--env=CartPole-v1", "--num_workers=1", f"--train_dir={tmp_path}", "--experiment=x", *flags])


def _one_summary_round(cfg, exp_dir, env_steps: tuple[int, int]) -> None:
    progress = ProgressTracker(cfg)
    progress.add_samples(0, env_steps[0], [(10.0, 10)])
    progress.add_samples(1, env_steps[1], [(4.0, 4)])
    summaries = SummaryWriters(exp_dir, 2, cfg=cfg)
    summaries.add_train_stats(0, {"loss": 1.5, "kl_loss": 0.25, "env_steps": env_steps[0]})
    summaries.add_train_stats(1, {"loss": 2.5, "policy_lag_max": 3, "env_steps": env_steps[1]})
    summaries.write(progress)
    summaries.add_scalar(0, "eval/reward_mean", 7.0, env_steps[0])  # outside write: logged at close
    summaries.close()


@pytest.mark.timeout(120)
def test_every_tensorboard_scalar_reaches_an_offline_wandb_run(tmp_path, offline):
    cfg = _cfg(tmp_path, "--with_wandb", "--num_policies=2", "--wandb_tags=ci,loss", "--wandb_project=sf_tests")
    exp_dir = tmp_path / "x"
    exp_dir.mkdir()
    _one_summary_round(cfg, exp_dir, (100, 60))

    [run_file] = offline_runs(offline)
    run_id = (exp_dir / WANDB_ID_FILE).read_text()
    assert run_file.name == f"run-{run_id}.wandb"
    rows = history_rows(run_file)
    p0 = next(r for r in rows if "p0/train/loss" in r)
    assert p0["p0/env_steps"] == 100 and p0["p0/train/kl_loss"] == 0.25 and p0["p0/reward/mean"] == 10.0
    p1 = next(r for r in rows if "p1/train/loss" in r)
    assert p1["p1/env_steps"] == 60 and p1["p1/policy_lag/max"] == 3 and p1["p1/reward/mean"] == 4.0
    assert not any(k.startswith("p1/") for k in p0) and not any(k.startswith("p0/") for k in p1)  # one x axis each
    assert any(r.get("p0/eval/reward_mean") == 7.0 for r in rows)
    # the same tags went to TensorBoard as before
    assert {"train/loss", "train/kl_loss", "reward/mean", "eval/reward_mean"} <= tensorboard_tags(
        exp_dir / ".summary/0"
    )

    [run] = [r.run for r in run_records(run_file) if r.WhichOneof("record_type") == "run"]
    assert (run.run_id, run.project, run.display_name, run.run_group) == (run_id, "sf_tests", "x", "CartPole-v1")
    assert list(run.tags) == ["ci", "loss"] and run.job_type == "SF"

    # a resumed experiment continues the same W&B run
    _one_summary_round(cfg, exp_dir, (200, 120))
    runs = offline_runs(offline)
    assert len(runs) == 2 and all(r.name == f"run-{run_id}.wandb" for r in runs)
    assert (exp_dir / WANDB_ID_FILE).read_text() == run_id


@pytest.mark.timeout(120)
def test_one_policy_logs_unprefixed_tags(tmp_path, offline):
    cfg = _cfg(tmp_path, "--with_wandb")
    exp_dir = tmp_path / "x"
    exp_dir.mkdir()
    progress = ProgressTracker(cfg)
    progress.add_samples(0, 64, [(9.0, 9)])
    summaries = SummaryWriters(exp_dir, 1, cfg=cfg)
    summaries.add_train_stats(0, {"loss": 0.5, "env_steps": 64})
    summaries.write(progress)
    summaries.close()
    rows = history_rows(offline_runs(offline)[0])
    assert any(r.get("train/loss") == 0.5 and r.get("env_steps") == 64 for r in rows)


def test_without_with_wandb_nothing_is_imported_or_written(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # importing wandb would fail
    cfg = _cfg(tmp_path)
    exp_dir = tmp_path / "x"
    exp_dir.mkdir()
    summaries = SummaryWriters(exp_dir, 1, cfg=cfg)
    assert summaries.wandb is None
    summaries.close()
    assert not (exp_dir / WANDB_ID_FILE).exists()


def test_with_wandb_without_the_package_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(SystemExit):
        _cfg(tmp_path, "--with_wandb")
    assert "--with_wandb needs the wandb package" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="wandb package"):
        import_wandb()
    # evaluating a run trained with --with_wandb needs no wandb (enjoy.py writes no summaries)
    cfg = _cfg(tmp_path)
    cfg.with_wandb, cfg.evaluation_run = True, True
    finalize_cfg(cfg)
