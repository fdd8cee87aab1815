"""Fixtures shared by several test packages.

`ray_cluster`: the Ray cluster the Ray tests (launcher, PBT across nodes, remote samplers) run on: two real nodes
on loopback (sample_factory/distributed/local_cluster.py), 2 CPUs each, one per test module; skips without Ray.

Also here: the two test tiers (below)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CPUS_PER_NODE = 2


@pytest.fixture(autouse=True)
def _close_run_log():
    """The runner's log is a module global: a test that set up an experiment folder leaves its sf_log.txt open."""
    yield
    from sample_factory.experiment.run_log import log

    log.close()


@pytest.fixture(scope="module")
def ray_cluster():
    """A LoopbackCluster: .address (for --ray_address), .env (what a driver of it needs), .cluster."""
    pytest.importorskip("ray", reason="Ray is not installed: pip install -e .[ray]")
    from sample_factory.distributed.local_cluster import loopback_cluster

    with loopback_cluster(num_nodes=2, num_cpus=CPUS_PER_NODE) as cluster:
        yield cluster


# ---------------------------------------------------------------------------------------------------------------------
# Two tiers (docs/testing.md): `make check` runs `pytest tests --unit`, the tests that start no process; `make test`
# runs everything. A test starts processes when it is in PROCESS_TESTS (a folder, a file or file::test under tests/,
# parameters aside), uses one of PROCESS_FIXTURES, or is marked @pytest.mark.process: it is marked `process`. With
# --unit those are deselected and a guard fails any other test that starts a process (subprocess, multiprocessing,
# os.fork, Ray), so the fast tier stays fast and a new test lands in the right one.
# ---------------------------------------------------------------------------------------------------------------------

PROCESS_TESTS = (
    "integration/",  # whole runs
    "reliability/",  # faults injected into whole runs
    "test_readme.py",
    "test_examples.py",
    "test_runner.py",
    "test_train.py",
    "test_makefile.py",
    # files and tests elsewhere that start a run, a subprocess or a helper process
    "experiment/test_summaries.py::test_a_full_disk_stops_the_summaries_with_one_error_instead_of_blocking",
    "experiment/test_checkpoint_safety.py::test_the_runner_reads_the_weights_of_the_checkpoint_not_its_replay_buffer",
    "runtime/test_supervisor.py::test_temp_folders_of_runs_that_died_whole_are_removed",
    "runtime/test_heartbeat.py::test_a_zombie_is_not_alive",
    "launcher/test_run.py",
    "algo/test_data_parallel.py",
    "algo/test_optim.py::test_a_learner_never_imports_dynamo",
    "benchmarks/test_benchmark_channels.py",
    "benchmarks/test_benchmark_gpu.py",
    "benchmarks/test_benchmark_hooks.py::test_benchmark_hooks_small",
    "benchmarks/test_benchmark_learning.py::test_ci_run_writes_record_table_and_plot",
    "benchmarks/test_benchmark_learning.py::test_rerun_skips_the_recorded_run_then_plot_only_regenerates",
    "benchmarks/test_benchmark_sf2.py::test_make_venv_reuse_and_probe",
    "benchmarks/test_benchmark_sf2.py::test_offline_install_and_run_beside_our_pythonpath",
    "benchmarks/test_benchmark_sf2.py::test_stop_group_leaves_nothing",
    "benchmarks/test_benchmark_startup.py",
    "benchmarks/test_time_to_score.py::test_cartpole_reaches_its_target_and_reports_the_time",
    "config/test_machine.py::test_a_run_pinned_to_one_core_sizes_itself_by_that_core",
    "config/test_space_presets.py::test_an_env_without_a_family_preset_gets_the_defaults_of_its_spaces",
    "distributed/test_rollouts.py::test_default_run_setup_does_not_import_ray",
    "envs/test_doom.py",
    "envs/test_env_utils.py::test_a_hung_env_probe_leaves_no_process_behind",
    "envs/test_env_utils.py::test_probe_env_subprocess",
    "envs/test_env_utils.py::test_probe_env_subprocess_unknown_env",
    "envs/test_envpool.py::test_mujoco_spaces_equal_gymnasium_pipeline",
    "envs/test_integrations.py::test_ale_banner_is_not_printed",
    "envs/test_integrations.py::test_mujoco_make_reset_step",
    "evaluation/test_enjoy.py::test_cli_renders_headless_when_no_window_can_open",
    "evaluation/test_enjoy.py::test_documented_video_command_is_silent_headless",
    "evaluation/test_enjoy.py::test_missing_experiment_or_checkpoint",
    "evaluation/test_enjoy.py::test_parallel_evaluation_through_runner",
    "evaluation/test_enjoy.py::test_save_video",
    "evaluation/test_periodic_eval.py",
    "experiment/test_callbacks.py::test_a_raising_hook_stops_the_run_with_one_line",
    "experiment/test_callbacks.py::test_a_statistic_that_is_not_a_number_stops_the_run",
    "experiment/test_callbacks.py::test_every_hook_runs_in_its_process_and_episode_stats_are_logged",
    "experiment/test_callbacks.py::test_worker_restart_hook",
    "experiment/test_checkpoint_safety.py::test_a_crafted_checkpoint_is_refused_by_every_loader",
    "experiment/test_checkpoint_safety.py::test_a_full_disk_keeps_the_old_checkpoint_with_one_clear_error",
    "experiment/test_checkpoint_safety.py::test_a_planted_serial_snapshot_is_not_unpickled",
    "experiment/test_checkpoint_safety.py::test_a_run_on_a_full_disk_stops_with_one_error_line",
    "experiment/test_checkpoints_resume.py::test_resume_after_sigint",
    "experiment/test_checkpoints_resume.py::test_resume_refuses_architecture_change",
    "experiment/test_folder.py::test_the_lock_is_held_until_the_last_process_of_the_run_exits",
    "experiment/test_summaries.py::test_a_short_run_has_a_curve",
    "experiment/test_wandb_logging.py::test_every_tensorboard_scalar_reaches_an_offline_wandb_run",
    "experiment/test_wandb_logging.py::test_one_policy_logs_unprefixed_tags",
    "launcher/test_launcher_processes.py::test_a_failing_launcher_stops_its_runs_like_ctrl_c",
    "launcher/test_launcher_processes.py::test_an_experiment_that_cannot_start_fails_alone",
    "launcher/test_launcher_processes.py::test_cuda_visible_devices_round_robin",
    "launcher/test_launcher_processes.py::test_guard_passes_exit_codes_and_signals",
    "launcher/test_launcher_ray.py::test_actor_waits_for_the_runs_leftover_processes",
    "launcher/test_launcher_slurm.py::test_a_job_cut_by_its_time_limit_is_unfinished",
    "launcher/test_launcher_slurm.py::test_render_template",
    "launcher/test_ray_init.py::test_a_locally_started_ray_listens_on_loopback_only",
    "launcher/test_slurm_local.py",
    "runtime/test_channels.py::test_many_producers_across_processes",
    "runtime/test_component.py::test_learner_and_policy_processes_flush_denormals_actor_processes_do_not",
    "runtime/test_fork_server.py",
    "runtime/test_supervisor.py::test_what_a_killed_worker_started_is_killed_after_a_grace",
    "tools/test_auto_tune.py::test_a_hand_edited_cache_changes_only_tuned_settings_the_user_did_not_type",
    "tools/test_auto_tune.py::test_first_run_tunes_and_trains_with_the_pick_the_second_reuses_it",
    "tools/test_tune.py::test_tune_cartpole_short",
)
# The lab's tests (benchmarks/: timed learner loops, side-by-sides) start no process but take minutes: `make test` only.
LAB_TESTS = ("benchmarks/",)
PROCESS_FIXTURES = frozenset({"train_run", "ray_cluster", "launcher", "start_run"})
_TESTS = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--unit",
        action="store_true",
        help="the unit tier (make check): only tests that start no process, and fail one that starts a process",
    )


def _rel(item: pytest.Item) -> str:
    path = item.path.resolve()
    return path.relative_to(_TESTS).as_posix() if path.is_relative_to(_TESTS) else ""


def _starts_processes(item: pytest.Item) -> bool:
    rel = _rel(item)
    test = f"{rel}::{item.nodeid.split('::', 1)[-1].split('[')[0]}"
    listed = any(p in (rel, test) or (p.endswith("/") and rel.startswith(p)) for p in PROCESS_TESTS)
    return listed or bool(PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lab = set()
    for item in items:
        if _starts_processes(item):
            item.add_marker(pytest.mark.process)
        if _rel(item).startswith(LAB_TESTS):
            lab.add(item)
    if config.getoption("--unit"):
        skip = ("process", "slow")
        out = {i for i in items if i in lab or any(i.get_closest_marker(m) for m in skip)}
        keep = [i for i in items if i not in out]
        deselected = [i for i in items if i in out]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
            items[:] = keep


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "process: starts processes (runs, subprocesses, Ray): `make test` runs it, `make check` does not"
    )


class ProcessStarted(RuntimeError):
    pass


def _refuse(what: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ProcessStarted(
            f"the unit tier (make check, pytest --unit) starts no process, but this test does ({what}): mark it "
            "@pytest.mark.process or list its file in PROCESS_TESTS (tests/conftest.py); `make test` runs it"
        )

    return refuse


def _guards() -> list[tuple[Any, str, str]]:
    import multiprocessing.process
    import multiprocessing.util
    import os
    import subprocess

    return [
        (subprocess.Popen, "_execute_child", "subprocess"),
        (multiprocessing.process.BaseProcess, "start", "multiprocessing"),
        (multiprocessing.util, "spawnv_passfds", "a multiprocessing helper process"),
        (os, "fork", "os.fork"),
        (os, "posix_spawn", "os.posix_spawn"),
        (os, "posix_spawnp", "os.posix_spawnp"),
        (os, "system", "os.system"),
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    return (yield from _guarded(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    return (yield from _guarded(item))


def _guarded(item: pytest.Item) -> Any:
    """Each phase of a test (fixtures included) with process starts refused, under --unit; pytest's own machinery
    (xdist workers, reports) runs between the phases, unguarded."""
    if not item.config.getoption("--unit"):
        return (yield)
    import platform

    platform.uname()  # cached once per process: it may run `uname -p`, which is pytest's business, not the test's
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in _guards() if hasattr(owner, name)]
    for owner, name, what in _guards():
        if hasattr(owner, name):
            setattr(owner, name, _refuse(what))
    try:
        return (yield)
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
