"""The runner's shutdown after a start that failed part way: the original error is what the user reads, and a
resumed experiment's records are left as they were."""

from __future__ import annotations

import re

import pytest

import sample_factory.run_setup as run_setup
import sample_factory.runner as runner_module
from sample_factory.config import parse_cfg
from sample_factory.runner import Runner

ARGV = ["--env=CartPole-v1", "--serial_mode=True", "--num_workers=1", "--num_envs_per_worker=2", "--rollout=16"]


def _boom(*args, **kwargs):
    raise RuntimeError("boom in set-up")


def _run(tmp_path, capfd) -> tuple[Runner, int, str]:
    runner = Runner(parse_cfg([*ARGV, f"--train_dir={tmp_path}", "--experiment=exp", "--train_for_env_steps=1000"]))
    code = runner.run()
    out = capfd.readouterr()
    return runner, code, out.out + out.err


@pytest.mark.timeout(120)
@pytest.mark.parametrize("failing", ["place_components", "PeriodicEvaluator", "SummaryWriters"])
def test_a_setup_that_fails_part_way_reports_its_own_error_and_releases_the_run(failing, tmp_path, monkeypatch, capfd):
    """place_components fails after the channels exist but before the progress tracker (shutdown read
    `self.progress.line()` and raised AttributeError over the real error); the other two after it. Either way the
    run exits 1 naming the set-up's error, and frees the experiment's lock."""
    monkeypatch.setattr(run_setup, failing, _boom)
    runner, code, out = _run(tmp_path, capfd)
    assert code == 1
    assert "ERROR: RuntimeError: boom in set-up" in out and "AttributeError" not in out
    assert runner.folder.lock is not None and runner.folder.lock.fd is None  # released: the same command can run again


@pytest.mark.timeout(120)
def test_a_resume_that_fails_before_its_components_start_leaves_the_records_as_they_were(tmp_path, monkeypatch, capfd):
    """A resumed run that fails before its components start (the sampler nodes unreachable, as here) trained
    nothing: it adds no progress.csv row (one at 0 env steps after the first run's 1,000 read as a drop), and
    reports no 0-step summary."""
    _, code, _ = _run(tmp_path, capfd)
    assert code == 0
    progress = tmp_path / "exp" / "progress.csv"
    before = progress.read_text()
    monkeypatch.setattr(runner_module.Runner, "_start", _boom)
    runner, code, out = _run(tmp_path, capfd)
    assert code == 1 and "ERROR: RuntimeError: boom in set-up" in out
    assert progress.read_text() == before
    assert "done:" not in out, out
    assert runner.folder.lock.fd is None


@pytest.mark.timeout(120)
def test_a_serial_snapshot_that_cannot_be_written_still_leaves_the_final_checkpoint(tmp_path, monkeypatch, capfd):
    """The snapshot's key folder cannot be made ($XDG_CONFIG_HOME is a file): the snapshot is an extra, so the run
    warns once, still saves its final checkpoint (the run is shorter than --save_every_sec: it is the only one) and
    exits 0."""
    not_a_folder = tmp_path / "config"
    not_a_folder.write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(not_a_folder))
    runner, code, out = _run(tmp_path, capfd)
    assert code == 0, out
    warnings = [ln for ln in out.splitlines() if "serial snapshot could not be saved" in ln]
    assert len(warnings) == 1 and "WARNING" in warnings[0], out
    ckpts = list((tmp_path / "exp" / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert len(ckpts) == 1, ckpts
    assert "checkpoint None" not in out and "ERROR" not in out, out
    assert not list((tmp_path / "exp").glob(".serial_state.pth.tmp"))


def _train(tmp_path, capfd, *extra: str) -> tuple[int, str]:
    cfg = parse_cfg([*ARGV, f"--train_dir={tmp_path}", "--experiment=exp", "--train_for_env_steps=1000", *extra])
    code = Runner(cfg).run()
    out = capfd.readouterr()
    return code, out.out + out.err


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "bad",
    [
        ["--callbacks=tests.no_such_module:Hooks"],  # fails in set-up, after the env check
        ["--replay_proportion=0.5", "--replay_buffer_num_slots=128"],  # the saved buffer has 64 slots: refused
    ],
)
def test_a_resume_that_fails_to_start_puts_cfg_json_back(bad, tmp_path, capfd):
    """A refused or failed resume wrote its flags into cfg.json before failing, so the original command (which no
    longer types them) was refused the same way. cfg.json is now as it was, and the original command resumes."""
    first = ["--replay_proportion=0.5", "--replay_buffer_num_slots=64", "--save_replay_buffer=True", "--batch_size=32"]
    code, out = _train(tmp_path, capfd, *first)
    assert code == 0, out
    cfg_json = tmp_path / "exp" / "cfg.json"
    before = cfg_json.read_bytes()
    code, out = _train(tmp_path, capfd, "--train_for_env_steps=2000", *bad)
    assert code == 1 and "ERROR" in out, out
    assert cfg_json.read_bytes() == before
    assert "cfg.json is as it was before this command" in out, out
    code, out = _train(tmp_path, capfd, "--train_for_env_steps=2000")
    assert code == 0 and "resuming" in out, out


@pytest.mark.timeout(180)
def test_a_new_experiment_that_fails_to_start_leaves_no_folder(tmp_path, capfd):
    """A new experiment that fails after the env check (a bad --callbacks) leaves nothing, so the corrected command
    starts a new experiment instead of resuming the failed one's flags."""
    code, out = _train(tmp_path, capfd, "--callbacks=tests.no_such_module:Hooks")
    assert code == 1 and "ERROR" in out, out
    assert not (tmp_path / "exp").exists()
    code, out = _train(tmp_path, capfd)
    assert code == 0 and "new experiment" in out, out


@pytest.mark.timeout(180)
def test_after_a_kill_the_resumed_progress_never_goes_back(tmp_path, capfd):
    """A run killed after its last checkpoint leaves progress.csv rows past it (here one row appended, as the
    killed session wrote it, and no serial snapshot). The resume drops them, so the env-step column only grows."""
    code, out = _train(tmp_path, capfd, "--batch_size=32")
    assert code == 0, out
    exp = tmp_path / "exp"
    (exp / "serial_state.pth").unlink()
    progress = exp / "progress.csv"
    rows = progress.read_text().splitlines()
    last = rows[-1].split(",")
    progress.write_text("\n".join([*rows, ",".join([last[0], "999999", *last[2:]])]) + "\n")
    code, out = _train(tmp_path, capfd, "--train_for_env_steps=2000")
    assert code == 0, out
    assert re.search(
        r"progress.csv continues from the resumed [1-9]\d* env steps \([12] rows past them dropped\)", out
    ), out
    steps = [int(r.split(",")[1]) for r in progress.read_text().splitlines()[1:]]
    assert 999999 not in steps and steps == sorted(steps) and steps[-1] >= 2000, steps


@pytest.mark.timeout(180)
def test_half_written_checkpoints_of_a_killed_run_are_removed_at_the_next_start(tmp_path, capfd):
    """A run killed while saving leaves `.checkpoint_*.pth.tmp` (gigabytes with a replay buffer) that nothing
    removed. The next run of the experiment (which holds its lock) removes them, saying so."""
    code, out = _train(tmp_path, capfd)
    assert code == 0, out
    ckpts = tmp_path / "exp" / "checkpoint_p0"
    partial = [ckpts / ".checkpoint_000000099_99999.pth.tmp", ckpts / "milestones" / ".checkpoint_000000098_1.pth.tmp"]
    for p in partial:
        p.parent.mkdir(exist_ok=True)
        p.write_bytes(b"PK\x03\x04 half a zip")
    code, out = _train(tmp_path, capfd, "--train_for_env_steps=2000")
    assert code == 0, out
    assert not any(p.exists() for p in partial)
    assert all(f"removed {p}: a checkpoint whose write never finished" in out for p in partial), out
