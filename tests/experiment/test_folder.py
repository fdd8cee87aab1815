"""sample_factory/experiment/folder.py: undoing a new run that never started, the experiment name, the lock."""

import os

import pytest

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


def _hold_until(lock, release_file: str) -> None:
    """A component process: it holds the inherited lock until told to exit."""
    import time
    from pathlib import Path

    while not Path(release_file).exists():
        time.sleep(0.02)


def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_the_lock_is_held_until_the_last_process_of_the_run_exits(tmp_path, method):
    """A runner killed outright (here: its lock released, its pid dead) leaves its component processes running for
    a while (a learner saving): a new run waits for them, says so, then takes the lock; with a deadline it refuses,
    naming them. Before, the lock went with the runner and a new run wrote beside the old learner."""
    import multiprocessing
    import time

    from sample_factory.experiment.folder import ExperimentError, ExperimentLock, lock_holders

    d = tmp_path / "exp"
    release = tmp_path / "release"
    old = ExperimentLock(d)
    old.acquire()
    child = multiprocessing.get_context(method).Process(target=_hold_until, args=(old.for_child(), str(release)))
    child.start()
    try:
        time.sleep(0.5)  # the child has its descriptor once it runs
        deadline = time.monotonic() + 20
        while child.pid not in lock_holders(d / ".lock") and time.monotonic() < deadline:
            time.sleep(0.1)
        old.release()  # the runner is gone: its pid in the file is a dead one
        (d / ".lock").write_text(str(_dead_pid()))
        lines: list[str] = []
        with pytest.raises(ExperimentError, match=rf"still hold the lock .* after 1 s.*kill {child.pid}"):
            ExperimentLock(d).acquire(wait_s=1.0, log=lines.append)
        assert len(lines) == 1 and f"pids {child.pid}" in lines[0] and "waiting up to 1 s" in lines[0], lines

        new = ExperimentLock(d)
        t0 = time.monotonic()
        import threading

        threading.Timer(1.0, release.touch).start()
        new.acquire(wait_s=30.0, log=lines.append)
        waited = time.monotonic() - t0
        child.join(10)
        assert waited >= 0.9 and not child.is_alive()  # taken only once the child had exited
        assert (d / ".lock").read_text() == str(os.getpid())
        new.release()
    finally:
        release.touch()
        child.join(10)


def test_a_live_runner_is_refused_at_once(tmp_path):
    import time

    from sample_factory.experiment.folder import ExperimentError, ExperimentLock

    held = ExperimentLock(tmp_path / "exp")
    held.acquire()
    t0 = time.monotonic()
    with pytest.raises(ExperimentError, match=f"already being trained by pid {os.getpid()}"):
        ExperimentLock(tmp_path / "exp").acquire(wait_s=30.0)
    assert time.monotonic() - t0 < 5
    held.release()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c.update(num_envs_per_worker="8"), "key 'num_envs_per_worker' is '8', not a int"),
        (lambda c: c.update(rollout=None), "key 'rollout' is None, not a int"),
        (lambda c: c.update(use_rnn="yes"), "key 'use_rnn' is 'yes', not a bool"),
        (lambda c: c.update(encoder_mlp_layers=[64, "x"]), "key 'encoder_mlp_layers' is [64, 'x'], not a int list"),
        (lambda c: c.update(rollout=0), "--rollout must be >= 1, got 0 (with the saved values of"),
        (lambda c: [1, 2], "it is not a JSON object of flag values"),
    ],
)
def test_saved_values_are_checked_with_one_line_naming_file_and_key(tmp_path, edit, message):
    """cfg.json's values were used unchecked on resume: a string num_envs_per_worker, a null rollout or a list file
    failed later with errors that named neither the file nor the key."""
    import json

    from sample_factory.config import parse_cfg
    from sample_factory.experiment.folder import ExperimentError, prepare_experiment_dir

    argv = ["--env=CartPole-v1", f"--train_dir={tmp_path}", "--experiment=x"]
    _, _, lock = prepare_experiment_dir(parse_cfg(argv))
    lock.release()
    path = tmp_path / "x" / "cfg.json"
    saved = json.loads(path.read_text())
    edited = edit(saved)
    path.write_text(json.dumps(saved if edited is None else edited))
    with pytest.raises(ExperimentError) as e:
        prepare_experiment_dir(parse_cfg(argv))
    assert str(path) in str(e.value) and message in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


def test_a_resume_with_another_budget_says_what_anneals_over_it(tmp_path):
    """The classic_control_dqn preset decays the learning rate over --train_for_env_steps, and prioritized replay's
    beta rises over it: resumed with a larger budget, the run does not continue the one that was never stopped."""
    from sample_factory.config import parse_cfg
    from sample_factory.experiment.folder import prepare_experiment_dir

    def resume_line(*flags: str) -> str:
        _, what, lock = prepare_experiment_dir(parse_cfg(["--env=CartPole-v1", f"--train_dir={tmp_path}", *flags]))
        lock.release()
        return what

    resume_line("--experiment=dqn", "--algo=DQN", "--train_for_env_steps=8000")
    what = resume_line("--experiment=dqn", "--algo=DQN", "--train_for_env_steps=16000")
    assert what == (
        "resuming (overriding --train_for_env_steps, over which --lr_schedule=linear_decay and prioritized replay's "
        "beta now anneal)"
    ), what
    assert "anneal" not in resume_line("--experiment=dqn", "--algo=DQN", "--train_for_env_steps=16000")  # same one
    resume_line("--experiment=appo", "--train_for_env_steps=8000")  # CartPole's APPO: a constant learning rate
    assert (
        resume_line("--experiment=appo", "--train_for_env_steps=16000") == "resuming (overriding --train_for_env_steps)"
    )
