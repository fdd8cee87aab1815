"""Fault injection, continued (tests/reliability/test_faults.py has the helpers): dead multiprocessing helpers (the
fork server, the resource tracker), a policy worker's late answer to a re-sent request, slow learners at shutdown
and a lost checkpoint report. Hooks inside the run's processes come from tests/reliability/hooks/sitecustomize.py,
switched on by environment variables.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import psutil
import pytest

from sample_factory.experiment.exit_codes import interrupted_exit_code
from tests.integration.conftest import (
    COMPONENT_NAMES,
    FORK_SERVER_NAME,
    TrainRun,
    is_fork_server,
    is_resource_tracker,
    progress_samples_trained,
)
from tests.reliability.conftest import hook_env
from tests.reliability.test_faults import (
    CARTPOLE,
    FAULT_MODULE,
    SMALL,
    finish,
    progress,
    progress_time,
    serial_argv,
    wait_component,
)


# ---- helpers -------------------------------------------------------------------------------------------------
def helper_process(run: TrainRun, helper: str) -> psutil.Process:
    """multiprocessing's "forkserver" or "resource_tracker" of the run (a child of the runner)."""
    found: list[psutil.Process] = []

    def find() -> bool:
        for c in psutil.Process(run.proc.pid).children():
            try:
                if is_fork_server(c) if helper == "forkserver" else is_resource_tracker(c):
                    found.append(c)
                    return True
            except psutil.Error:
                continue
        return False

    assert run.wait_until(find, timeout=10), f"no {helper} process\n{run.describe()}"
    return found[-1]


def summary_checkpoint(run: TrainRun) -> str:
    """The checkpoint the final summary names for policy 0."""
    m = re.search(r"^\s*policy 0: .*checkpoint (\S+)$", run.output, re.MULTILINE)
    assert m, run.describe()
    return m.group(1)


def assert_clean_finish_with_checkpoint(run: TrainRun, killed_at: float, died: set[str] = frozenset()) -> None:
    """Exit 0 with no leftovers, training went on after `killed_at`, only the components in `died` died, and
    the final summary names the last checkpoint written."""
    assert finish(run, 90) == 0, run.describe()
    assert "ERROR" not in run.output, run.describe()
    assert set(re.findall(r"(\w+ \S+) died \(", run.output)) == died, run.describe()
    rows = progress(run)
    assert rows[-1][0] >= killed_at + 4 and rows[-1][1] > max(s for t, s in rows if t <= killed_at), rows
    named, written = summary_checkpoint(run), run.checkpoints()
    assert written and named == str(written[-1]), f"summary names {named}, written: {written}\n{run.describe()}"


@pytest.mark.timeout(150)
def test_killed_fork_server_does_not_stop_the_run(tmp_path, start_run):
    """The components are the fork server's children: its death must neither kill them (their parent-death signal
    follows the runner) nor make the runner believe they died (its process handles read the fork server's pipe)."""
    run = start_run([*CARTPOLE, "--train_for_seconds=11"], tmp_path / "td")
    assert run.wait_until(lambda: progress_time(run) >= 3, timeout=60), run.describe()
    for name in COMPONENT_NAMES:
        wait_component(run, name, 10)
    run.snapshot_tree()
    server = helper_process(run, "forkserver")
    assert server.name() == FORK_SERVER_NAME, server  # train.py forks it from itself (runtime/fork_server.py)
    server.kill()
    assert_clean_finish_with_checkpoint(run, progress_time(run))


@pytest.mark.timeout(150)
def test_actor_restarted_after_the_fork_server_died(tmp_path, start_run):
    """A worker that crashes after the fork server died is restarted through a new fork server."""
    run = start_run([*CARTPOLE, "--train_for_seconds=20"], tmp_path / "td")
    assert run.wait_until(lambda: progress_time(run) >= 3, timeout=60), run.describe()
    actor = wait_component(run, "sf_actor_1", 10)
    run.snapshot_tree()
    fork_server = helper_process(run, "forkserver")
    fork_server.kill()
    assert run.wait_until(lambda: not fork_server.is_running() or fork_server.status() == psutil.STATUS_ZOMBIE, 5)
    killed_at = progress_time(run)
    assert run.wait_until(lambda: progress_time(run) >= killed_at + 2, timeout=30), run.describe()
    # a new fork server started at once, not by the next restart (which would wait for its imports in the runner)
    new_server = helper_process(run, "forkserver")
    assert new_server.pid != fork_server.pid
    assert new_server.name() != FORK_SERVER_NAME  # a fresh interpreter: the runner has used torch by now
    actor.kill()  # an orphan now (its parent was the fork server): found before, by pid
    new_actor = wait_component(run, "sf_actor_1", 30, exclude=(actor.pid,))
    assert new_actor.parent().pid == new_server.pid, "restarted through the dead fork server?"
    assert_clean_finish_with_checkpoint(run, killed_at, died={"actor 1"})
    assert re.search(r"actor 1 died \(.*restarting it \(1 of 3 within 3600 s\)", run.output), run.describe()


@pytest.mark.timeout(150)
def test_killed_resource_tracker_leaves_nothing_behind(tmp_path, start_run):
    """The resource tracker dies (e.g. to the OOM killer); a worker restart after that starts a new one; the run
    ends cleanly and leaves no shared-memory object behind."""
    run = start_run([*CARTPOLE, "--train_for_seconds=12"], tmp_path / "td")
    assert run.wait_until(lambda: progress_time(run) >= 3, timeout=60), run.describe()
    actor = wait_component(run, "sf_actor_1", 10)
    run.snapshot_tree()
    helper_process(run, "resource_tracker").kill()
    killed_at = progress_time(run)
    assert run.wait_until(lambda: progress_time(run) >= killed_at + 2, timeout=30), run.describe()
    actor.kill()
    wait_component(run, "sf_actor_1", 30, exclude=(actor.pid,))
    assert_clean_finish_with_checkpoint(run, killed_at, died={"actor 1"})  # also: no /dev/shm leftovers


@pytest.mark.timeout(150)
def test_an_actor_killed_as_the_run_stops_leaves_no_process_behind(tmp_path, start_run):
    """An actor that does not stop in time is killed; the processes its envs started (here a server each, in CI two
    VizDoom engines) must not outlive the run: the runner kills them and exits only once they are gone. (A doom run
    exited 0 and left two engines, and with them the fork server and the resource tracker: the engines held fds
    the actor had inherited.)"""
    args = [*SMALL, "--num_workers=1", "--num_envs_per_worker=4", "--train_for_seconds=3", "--shutdown_timeout_sec=2"]
    run = start_run(args, tmp_path / "td", env_id=f"{FAULT_MODULE}:ServerHangsOnClose-v0")
    assert run.wait(timeout=120) == 0, run.describe()
    assert "actor 0 did not stop in time, terminating it" in run.output, run.describe()
    killed = re.search(r"sf_actor_0 left 4 processes running: killed them \(([^)]*)\)", run.output)
    assert killed, run.describe()
    killed_pids = {int(pid) for pid in re.findall(r"sleep (\d+)", killed.group(1))}
    with run._lock:
        servers = [sp for sp in run.seen.values() if "sleep" in sp.names]
    # the actor's 4 envs' servers; the probe env's server lives only until the probe closes it, so the process-tree
    # poller sees it on a loaded machine and misses it on a fast one (it was once counted as a fifth)
    assert len(killed_pids) == 4 and killed_pids <= {sp.pid for sp in servers}, run.describe()
    left = [sp.pid for sp in servers if sp.handle() is not None]
    assert not left, f"env servers outlived the run: {left}\n{run.describe()}"
    run.assert_no_leftovers()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("env", ["SlowStart-v0", "SlowFirstReset-v0"])
def test_ctrl_c_while_an_actor_starts_its_envs_stops_it_at_once(tmp_path, start_run, env):
    """Ctrl+C while the actor still starts its envs (32 of 1 s each, in the constructor or on the first reset as
    VizDoom's engines; a doom run's actors used to be killed this way): it reads STOP between two envs, closes the
    ones it made (each stops its server) and exits by itself, long before the --shutdown_timeout_sec (20 s) after
    which it would be terminated."""
    args = [*SMALL, "--num_workers=1", "--num_envs_per_worker=32", "--shutdown_timeout_sec=20"]
    run = start_run(args, tmp_path / "td", env_id=f"{FAULT_MODULE}:{env}")
    actor = wait_component(run, "sf_actor_0", 60)

    def servers_started() -> int:
        try:
            return sum(c.name() == "sleep" for c in actor.children())
        except psutil.Error:
            return 0

    assert run.wait_until(lambda: servers_started() >= 2, timeout=60), run.describe()
    run.signal(signal.SIGINT)
    stopped_at = time.monotonic()
    assert run.wait(timeout=120) == interrupted_exit_code(signal.SIGINT), run.describe()
    shutdown_s = run.exited_at - stopped_at
    assert "did not stop in time" not in run.output and "ERROR" not in run.output, run.describe()
    assert "processes running: killed them" not in run.output, run.describe()  # the actor closed its envs
    assert shutdown_s < 10, f"{shutdown_s:.1f} s from Ctrl+C to exit\n{run.describe()}"
    run.assert_no_leftovers()


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "epochs, batches, step_sec", [(4, 4, 0.75), (1, 1, 14.0)], ids=["16-steps-of-0.75s", "one-step-of-14s"]
)
def test_slow_learner_saves_its_final_checkpoint(tmp_path, start_run, epochs, batches, step_sec):
    """The stop comes while the learner trains: an iteration of 12 s (it must stop between SGD steps), or one SGD
    step of 14 s (the stop at 6 s of sampling lands well inside the first step, whatever the start-up time: the
    runner must wait for it beyond --shutdown_timeout_sec). Either way the final checkpoint is
    written and named in the summary; no periodic one exists."""
    extra_env = hook_env(SF_TEST_SLOW_SGD_STEP_SEC=str(step_sec))
    args = [f"--num_epochs={epochs}", f"--num_batches_per_epoch={batches}"]
    args += ["--shutdown_timeout_sec=1", "--save_every_sec=1000", "--train_for_seconds=6"]
    run = start_run([*CARTPOLE, *args], tmp_path / "td", extra_env=extra_env)
    assert finish(run, 120) == 0, run.describe()
    out = run.output
    assert "did not stop in time" not in out and "ERROR" not in out, run.describe()
    written = run.checkpoints()
    assert len(written) == 1 and summary_checkpoint(run) == str(written[0]), f"{written}\n{run.describe()}"
    if step_sec > 1:
        assert re.search(r"learner 0 is still busy \(.*\): waiting for its final checkpoint", out), run.describe()


@pytest.mark.timeout(150)
def test_late_answer_of_a_policy_worker_changes_no_step(tmp_path, start_run):
    """Policy worker 0_0 holds a computed answer (hook); policy worker 0_1 is killed, the actors re-send their
    outstanding requests to its replacement, which answers them, and the actors step on; only then does 0_0 write
    its late answer. The learner checks every batch (hook): each stored action is the one the env took."""
    held = tmp_path / "held"
    extra_env = hook_env(SF_TEST_HOLD_ANSWER_FILE=str(held), SF_TEST_CHECK_ECHOED_ACTIONS="1")
    args = [*SMALL, "--policy_workers_per_policy=2", "--train_for_seconds=15"]
    run = start_run(args, tmp_path / "td", env_id=f"{FAULT_MODULE}:EchoAction-v0", extra_env=extra_env)
    assert run.wait_until(held.exists, timeout=60), run.describe()
    # Actors re-send only requests older than 0.2 s when a policy worker is replaced (younger ones are still being
    # answered). On a fast VM the kill, the restart and the re-send once came within 0.2 s of the held request: it
    # was not re-sent, policy worker 0_0 held it for its whole 30 s, and the run's stop had to terminate everyone.
    time.sleep(0.5)
    wait_component(run, "sf_policy_0_1", 5).kill()
    assert finish(run, 90) == 0, run.describe()
    assert "ERROR" not in run.output, run.describe()
    assert Path(f"{held}.late").exists(), "policy worker 0_0 never wrote its late answer during the run"
    assert re.search(r"policy \(0, 1\) died \(exit code -9.*restarting it", run.output), run.describe()
    assert progress_samples_trained(run) > 0, run.describe()


@pytest.mark.timeout(150)
def test_policy_worker_that_holds_requests_is_replaced_and_they_are_answered(tmp_path, start_run):
    """The only policy worker holds a batch of requests without dying (hook: a hang inside inference). After
    --heartbeat_timeout_sec of silence it is killed, a new one starts, the actors re-send the requests the hung one
    had taken, and sampling goes on with no actor restarted (an actor whose request was lost would wait for its
    actions until it gives up, 2 x --heartbeat_timeout_sec, and be restarted). The hung worker's answer is never
    written (`held`.late)."""
    held = tmp_path / "held"
    extra_env = hook_env(SF_TEST_HOLD_ANSWER_FILE=str(held), SF_TEST_CHECK_ECHOED_ACTIONS="1")
    args = [*SMALL, "--train_for_seconds=300", "--heartbeat_timeout_sec=5"]
    run = start_run(args, tmp_path / "td", env_id=f"{FAULT_MODULE}:EchoAction-v0", extra_env=extra_env)
    assert run.wait_until(held.exists, timeout=60), run.describe()
    hung = wait_component(run, "sf_policy_0_0", 5)
    restarted = r"policy \(0, 0\) died \(silent for \d+ s.*restarting it"
    assert run.wait_until(lambda: re.search(restarted, run.output), timeout=60), run.describe()
    assert re.search(r"policy \(0, 0\) silent for \d+ s \(last activity: [^)]+\): killing it", run.output)
    # before the kill, its stack dump shows where it hung (the heartbeat's activity predates the hang)
    assert re.search(r"the stacks of its threads follow on stderr\n(.*\n)*.*sitecustomize\.py.* in act\n", run.output)
    wait_component(run, "sf_policy_0_0", 30, exclude=(hung.pid,))
    restart_t, steps_at_restart = progress(run)[-1]
    # past the time an actor whose request was lost would have given up (10 s), and sampling went on; 5 s, not less:
    # the actors' 10 s also covers the replacement's start-up on a loaded machine
    assert run.wait_until(lambda: progress_time(run) > restart_t + 12, timeout=60), run.describe()
    assert progress(run)[-1][1] > steps_at_restart + 1000, run.describe()
    run.signal(signal.SIGINT)
    assert finish(run, 60) == interrupted_exit_code(signal.SIGINT), run.describe()
    assert not Path(f"{held}.late").exists(), "the hung policy worker answered: it was not killed in time"
    assert "stored actions are not the actions" not in run.output, run.describe()
    # the hang cost one restart: no actor gave up waiting for its actions (2 x --heartbeat_timeout_sec) and died
    assert not re.search(r"actor \d+ died", run.output), run.describe()


# ---- the checkpoint named in the summary (in-process, serial mode) -------------------------------------------
@pytest.mark.timeout(120)
def test_summary_names_the_checkpoint_on_disk_when_its_report_is_lost(tmp_path, monkeypatch, capsys):
    """A learner killed right after saving, or a lost report: the summary still names the checkpoint written."""
    from sample_factory.experiment.checkpoints import list_checkpoints
    from sample_factory.runner import Runner
    from sample_factory.train import main

    monkeypatch.setattr(Runner, "_on_checkpoint", lambda self, report: None)  # every "checkpoint" report lost
    assert main(serial_argv(tmp_path, "--train_for_env_steps=2048")) == 0
    out = capsys.readouterr().out
    written = list_checkpoints(tmp_path / "serial" / "checkpoint_p0")
    assert written and f"checkpoint {written[-1]}\n" in out, out
