"""The processes backend, with real train.py runs: the concurrency limit, a failing run reported (and run again on
a rerun while finished ones are skipped), Ctrl+C stopping every run with nothing left behind, the dry run, and
CUDA_VISIBLE_DEVICES assignment."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sample_factory.launcher.__main__ import main
from sample_factory.launcher.jobs import MARKER_NAME, GpuSlots, Job, StopRequest
from sample_factory.launcher.processes import run_processes
from tests.integration.conftest import is_runner
from tests.launcher.conftest import TINY, load_summary, max_overlap, write_sweep


def _is_train_py(p: psutil.Process) -> bool:
    return p.cmdline()[1:2] == ["train.py"] and is_runner(p)


@pytest.mark.timeout(300)
def test_max_parallel_failures_summary_and_resume(tmp_path, launcher):
    sweep = write_sweep(
        tmp_path / "s.yaml",
        "par",
        [
            # 3 experiments for 2 slots: without the limit the short-lived "bad" would run beside both others
            {"name": "ok", "cmd": TINY, "grid": {"seed": [0, 1]}},
            {"name": "bad", "cmd": TINY + " --no_such_flag=1"},
        ],
    )
    td = tmp_path / "td"
    args = [f"--run={sweep}", f"--train_dir={td}", "--max_parallel=2"]
    run = launcher(args)
    rc = run.wait(timeout=240)
    assert rc == 1, run.output  # one experiment failed
    rows = load_summary(td, "par")
    assert set(rows) == {"ok_seed0", "ok_seed1", "bad"}
    for name in ("ok_seed0", "ok_seed1"):
        row = rows[name]
        assert row["status"] == "finished" and row["exit_code"] == 0, run.output
        assert row["stop_reason"] == "reached 10000 env steps"
        last = (td / name / "progress.csv").read_text().strip().splitlines()[-1]
        header = (td / name / "progress.csv").read_text().splitlines()[0].split(",")
        assert row["final_reward"] == pytest.approx(float(last.split(",")[header.index("reward_p0")]))
        assert row["final_reward"] > 0
        assert (td / name / MARKER_NAME).exists() and (td / name / "checkpoint_p0").is_dir()
    bad = rows["bad"]
    assert bad["status"] == "failed" and bad["exit_code"] == 2 and bad["final_reward"] is None
    assert "no_such_flag" in open(bad["log_path"]).read()
    assert not (td / "bad" / MARKER_NAME).exists()
    # never more than --max_parallel at once, and the limit was used
    assert max_overlap(rows.values()) == 2
    assert "finished" in run.output and "bad" in run.output  # the table was printed

    # A rerun skips the finished experiments and runs the failed one again.
    rerun = launcher(args)
    assert rerun.wait(timeout=120) == 1, rerun.output
    rows2 = load_summary(td, "par")
    assert [rows2[n]["status"] for n in ("ok_seed0", "ok_seed1")] == ["skipped"] * 2
    assert rows2["ok_seed0"]["final_reward"] == rows["ok_seed0"]["final_reward"]
    assert rows2["bad"]["status"] == "failed"
    assert open(rows2["bad"]["log_path"]).read().count("# launcher ") == 2  # started once per launcher run


@pytest.mark.timeout(240)
def test_sigint_stops_every_run_cleanly(tmp_path, launcher):
    long_run = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_seconds=600 --report_interval_sec=1"
    sweep = write_sweep(tmp_path / "s.yaml", "stop", [{"name": "long", "cmd": long_run, "grid": {"seed": [0, 1, 2]}}])
    td = tmp_path / "td"
    run = launcher([f"--run={sweep}", f"--train_dir={td}", "--max_parallel=2", "--stop_timeout=60"])

    def both_training() -> bool:
        return all(
            (td / f"long_seed{s}" / "progress.csv").exists()
            and len((td / f"long_seed{s}" / "progress.csv").read_text().splitlines()) > 2
            for s in (0, 1)
        )

    assert run.wait_for(both_training, timeout=120), run.output
    run.snapshot()
    trains = [p for p in run.alive_descendants() if _is_train_py(psutil.Process(p))]
    assert len(trains) == 2, run.output  # (each under its guard, python -m sample_factory.launcher.guard)
    assert len(run.alive_descendants()) > 4  # the runs' components are recorded too

    run.proc.send_signal(signal.SIGINT)  # what Ctrl+C in the launcher's terminal delivers
    try:
        rc = run.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher did not stop within 60 s\n{run.output}")
    assert rc == 130, run.output
    deadline = time.monotonic() + 15  # helpers of the runs (fork server) exit just after them
    while run.alive_descendants() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run.alive_descendants(), f"left behind: {run.alive_descendants()}\n{run.output}"
    rows = load_summary(td, "stop")
    for s in (0, 1):
        row = rows[f"long_seed{s}"]
        assert row["status"] == "cancelled" and row["exit_code"] == 130, row  # saved, exited as interrupted
        assert row["stop_reason"] == "SIGINT received"
        assert not (td / f"long_seed{s}" / MARKER_NAME).exists()  # stopped early: a rerun must run it
        assert list((td / f"long_seed{s}" / "checkpoint_p0").glob("*.pth"))
    assert rows["long_seed2"]["status"] == "not_started"
    assert "Traceback" not in run.output


@pytest.mark.timeout(180)
def test_killed_launcher_still_stops_its_runs(tmp_path, launcher):
    """SIGKILL to the launcher alone (no handler runs): its runs get SIGTERM through their guard, save, exit."""
    long_run = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_seconds=600 --report_interval_sec=1"
    sweep = write_sweep(tmp_path / "s.yaml", "kill", [{"name": "long", "cmd": long_run}])
    td = tmp_path / "td"
    run = launcher([f"--run={sweep}", f"--train_dir={td}"])
    progress = td / "long" / "progress.csv"
    assert run.wait_for(lambda: progress.exists() and len(progress.read_text().splitlines()) > 2, 90), run.output
    run.snapshot()
    assert len(run.alive_descendants()) >= 5  # guard, train.py and its components
    run.proc.kill()
    deadline = time.monotonic() + 30
    while run.alive_descendants() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not run.alive_descendants(), f"runs outlived the killed launcher: {run.alive_descendants()}"
    log = (td / "sweep_kill" / "logs" / "long.log").read_text()
    assert "stopping: SIGTERM received" in log and "Traceback" not in log, log[-3000:]
    assert list((td / "long" / "checkpoint_p0").glob("*.pth"))
    assert not (td / "long" / MARKER_NAME).exists()


@pytest.mark.timeout(300)
def test_a_run_interrupted_from_outside_is_unfinished_and_the_rerun_resumes_it(tmp_path, launcher):
    """SIGTERM to train.py itself (preemption, a time limit, `kill`): it saves and exits 143, reported interrupted
    with no marker; the rerun runs it again and it resumes from its checkpoint. Before, train.py exited 0, the run
    was marked finished and every rerun skipped it."""
    cmd = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_env_steps=150000 --report_interval_sec=1"
    sweep = write_sweep(tmp_path / "s.yaml", "intr", [{"name": "cp", "cmd": cmd}])
    td = tmp_path / "td"
    args = [f"--run={sweep}", f"--train_dir={td}"]
    run = launcher(args)
    progress = td / "cp" / "progress.csv"
    assert run.wait_for(lambda: progress.exists() and len(progress.read_text().splitlines()) > 2, 90), run.output
    run.snapshot()
    (train,) = [p for p in run.alive_descendants() if _is_train_py(psutil.Process(p))]
    psutil.Process(train).send_signal(signal.SIGTERM)
    assert run.wait(timeout=90) == 1, run.output  # not every experiment finished
    row = load_summary(td, "intr")["cp"]
    assert row["status"] == "interrupted" and row["exit_code"] == 143, row
    assert row["stop_reason"] == "SIGTERM received"
    assert not (td / "cp" / MARKER_NAME).exists() and list((td / "cp" / "checkpoint_p0").glob("*.pth"))

    rerun = launcher(args)
    assert rerun.wait(timeout=240) == 0, rerun.output
    row = load_summary(td, "intr")["cp"]
    assert row["status"] == "finished" and row["exit_code"] == 0, row
    log = open(row["log_path"]).read()
    assert log.count("# launcher ") == 2 and "policy 0 resumed from" in log, log[-3000:]
    assert (td / "cp" / MARKER_NAME).exists()


_SAVES_ON_SIGINT = (
    "import pathlib, signal, sys, time\n"
    "def stop(*_):\n"
    "    pathlib.Path(sys.argv[1]).write_text('saved')\n"
    "    sys.exit(130)\n"
    "signal.signal(signal.SIGINT, stop)\n"
    "print('up', flush=True)\n"
    "time.sleep(120)\n"
)


def _job(tmp_path, name: str, argv: list[str], log_path=None) -> Job:
    return Job(name, argv, str(tmp_path), tmp_path / name, log_path or tmp_path / f"{name}.log", 1)


@pytest.mark.timeout(60)
def test_an_experiment_that_cannot_start_fails_alone(tmp_path):
    """Its log cannot be opened (here a folder is in the way; ENAMETOOLONG, EACCES alike): it is reported failed
    and the other experiment runs to its end. Before, the OSError ended the launcher's loop and its `finally`
    SIGKILLed every running experiment."""
    (tmp_path / "blocked.log").mkdir()
    jobs = [
        _job(tmp_path, "ok", [sys.executable, "-c", "import time; time.sleep(2); print('done')"]),
        _job(tmp_path, "bad", [sys.executable, "-c", "pass"], log_path=tmp_path / "blocked.log"),
    ]
    seen = []
    results = run_processes(jobs, 0, GpuSlots(0, 1), StopRequest(), 10.0, lambda job, r: seen.append(r.status))
    ok, bad = results
    assert ok.status == "finished" and ok.exit_code == 0 and "done" in (tmp_path / "ok.log").read_text()
    assert bad.status == "failed" and "cannot open its log" in bad.error and bad.exit_code is None
    assert sorted(seen) == ["failed", "finished"]


@pytest.mark.timeout(90)
def test_a_failing_launcher_stops_its_runs_like_ctrl_c(tmp_path):
    """An error in the launcher's loop (here: reporting a result raises) must stop the other running experiment
    with SIGINT, so it saves, not SIGKILL its process group."""
    saved = tmp_path / "saved"
    # "short" ends once "long" is up (its SIGINT handler set), not after a fixed 3 s that a slow start could exceed;
    # the long log's header holds its script, so "up" is looked for as a line of its own
    long_log = tmp_path / "long.log"
    up = "import pathlib, time\nend = time.monotonic() + 60\nwhile time.monotonic() < end and 'up' not in "
    up += f"pathlib.Path({str(long_log)!r}).read_text().splitlines():\n    time.sleep(0.05)\n"
    jobs = [
        _job(tmp_path, "long", [sys.executable, "-c", _SAVES_ON_SIGINT, str(saved)]),
        _job(tmp_path, "short", [sys.executable, "-c", up]),
    ]

    def on_result(job, result):
        if job.name == "short":
            raise RuntimeError("boom")

    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="boom"):
        run_processes(jobs, 0, GpuSlots(0, 1), StopRequest(), 30.0, on_result)
    assert saved.read_text() == "saved"  # it got SIGINT and ran its handler
    assert time.monotonic() - t0 < 25  # it was waited for, not for the whole stop timeout
    log = (tmp_path / "long.log").read_text()
    assert "up" in log


def test_dry_run_prints_the_commands_and_runs_nothing(tmp_path, capsys):
    sweep = write_sweep(tmp_path / "s.yaml", "dry", [{"name": "lr", "cmd": TINY, "grid": {"learning_rate": [1, 2]}}])
    td = tmp_path / "td"
    rc = main([f"--run={sweep}", f"--train_dir={td}", "--dry_run", "--num_gpus=1", "--experiments_per_gpu=1"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("run: lr_learning_rate") == 2
    assert f"--learning_rate=2 --experiment=lr_learning_rate2 --train_dir={td}" in out
    assert "CUDA_VISIBLE_DEVICES=0 " in out and "(waits for a GPU)" in out
    assert not td.exists()


def test_cuda_visible_devices_round_robin(tmp_path):
    """Each run sees the GPU its slot gives (no GPU needed: the runs only print what they were given)."""
    script = "import os, time; time.sleep(0.5); print('CVD=' + os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'))"
    jobs = [
        Job(f"j{i}", [sys.executable, "-c", script], str(tmp_path), tmp_path / f"j{i}", tmp_path / f"j{i}.log", 1)
        for i in range(5)
    ]
    results = run_processes(jobs, 0, GpuSlots(2, 2), StopRequest(), 10.0, lambda job, result: None)
    seen = [job.log_path.read_text().rsplit("CVD=", 1)[1].strip() for job in jobs]  # after the log header
    assert seen[:4] == ["0", "1", "0", "1"]  # the 5th waited for a free slot, then got one
    assert seen[4] in ("0", "1")
    rows = [{"start": r.start, "end": r.end} for r in results]
    assert max_overlap(rows) == 4  # 2 GPUs x 2 experiments each, though --max_parallel was unlimited
    assert all(r.status == "finished" for r in results)
    assert json.dumps([r.to_dict() for r in results])  # results are plain data for the summary


def test_guard_passes_exit_codes_and_signals():
    from sample_factory.launcher.guard import guarded

    assert subprocess.call([*guarded(), "sh", "-c", "exit 3"]) == 3
    p = subprocess.Popen(
        [*guarded(), sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "up"
    p.send_signal(signal.SIGINT)  # forwarded: the child dies of it, and the guard reports 128 + SIGINT
    assert p.wait(timeout=10) == 130
    p.stdout.close()
    # started with SIGINT ignored (a background job of a non-interactive shell; dispositions survive exec): the run
    # still gets the default one, so the forwarded Ctrl+C ends it
    p = subprocess.Popen(
        [*guarded(), sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert p.stdout.readline().strip() == "up"
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=10) == 130
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
    # a guard whose starter is not its parent (the starter died before it ran) exits at once
    assert subprocess.call([*guarded(starter_pid=1), "sleep", "30"], timeout=10) == 143
