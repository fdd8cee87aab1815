"""The slurm backend on a real single-node Slurm (Debian's slurm-wlm + munge, slurmctld and slurmd on this host,
set up by sample_factory/launcher/slurm_local.sh, which installs what is missing): a sweep submitted with sbatch,
followed with squeue, collected from the exit-code files its job scripts write (no accounting configured), the
summary right, and a rerun skipping the finished experiments. Skips, saying why, where Slurm cannot be set up
(not root, no apt-get); on this project's machines it runs. Also the sbatch template rendering, without Slurm."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from sample_factory.launcher.jobs import Job, LauncherError
from sample_factory.launcher.slurm import (
    DEFAULT_TEMPLATE,
    SlurmOptions,
    SlurmRun,
    _Tracked,
    parse_exit_file,
    render,
    script_values,
)
from tests.launcher.conftest import TINY, load_summary, write_sweep

SCRIPT = Path(__file__).resolve().parents[2] / "sample_factory" / "launcher" / "slurm_local.sh"
CANNOT = 3  # slurm_local.sh: cannot be set up on this machine


@pytest.fixture(scope="module")
def slurm_env():
    p = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=300)
    if p.returncode == CANNOT:
        pytest.skip(f"no Slurm here: {p.stderr.strip().splitlines()[-1]}")
    assert p.returncode == 0, f"slurm_local.sh start failed:\n{p.stdout}\n{p.stderr}"
    conf = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True, check=True)
    env = {"SLURM_CONF": conf.stdout.strip().split("=", 1)[1]}
    yield env
    if p.stdout.strip() == "started":  # stop only what this fixture started
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, timeout=60)


@pytest.mark.timeout(300)
def test_slurm_sweep_collect_and_resume(tmp_path, launcher, slurm_env):
    sweep = write_sweep(
        tmp_path / "s.yaml",
        "sl",
        [{"name": "cp", "cmd": TINY, "grid": {"seed": [0, 1]}}, {"name": "bad", "cmd": TINY + " --no_such_flag=1"}],
    )
    td = tmp_path / "td"
    # 1 CPU each: the two runs share this machine's 2 cores, as with --max_parallel=2 locally
    args = [f"--run={sweep}", f"--train_dir={td}", "--backend=slurm", "--max_parallel=0"]
    args += ["--cpus_per_experiment=1", "--slurm_poll_s=1", "--slurm_time=10:00"]
    run = launcher(args, env=slurm_env)
    assert run.wait(timeout=240) == 1, run.output
    rows = load_summary(td, "sl")
    for name in ("cp_seed0", "cp_seed1"):
        row = rows[name]
        assert row["status"] == "finished" and row["exit_code"] == 0, run.output
        assert row["job_id"].isdigit() and row["node"], row
        assert row["final_reward"] is not None and row["final_reward"] > 0
        assert row["stop_reason"] == "reached 10000 env steps"
        assert (td / name / "launcher_done.json").exists()
        script = (td / "sweep_sl" / "slurm" / f"{name}.sbatch").read_text()
        assert "#SBATCH --cpus-per-task=1" in script and "#SBATCH --time=10:00" in script
        assert "--partition" not in script and "--gpus" not in script  # empty: the lines are left out
        log = open(row["log_path"]).read()
        assert f"# slurm job {row['job_id']}" in log and "done:" in log
    bad = rows["bad"]
    assert bad["status"] == "failed" and bad["exit_code"] == 2, run.output
    assert "slurm: " in run.output and "running" in run.output  # squeue-based progress lines
    job_ids = {rows[n]["job_id"] for n in rows}
    assert len(job_ids) == 3

    rerun = launcher(args, env=slurm_env)
    assert rerun.wait(timeout=120) == 1, rerun.output
    rows2 = load_summary(td, "sl")
    assert rows2["cp_seed0"]["status"] == rows2["cp_seed1"]["status"] == "skipped"
    assert rows2["bad"]["status"] == "failed" and rows2["bad"]["job_id"] not in job_ids  # submitted again


@pytest.mark.timeout(240)
def test_slurm_rerun_attaches_and_ctrl_c_cancels(tmp_path, launcher, slurm_env):
    # A launcher killed outright leaves its job queued or running: the rerun waits for that job, not a new one.
    sweep = write_sweep(tmp_path / "a.yaml", "att", [{"name": "cp", "cmd": TINY}])
    td = tmp_path / "td"
    args = [f"--run={sweep}", f"--train_dir={td}", "--backend=slurm", "--cpus_per_experiment=1", "--slurm_poll_s=1"]
    first = launcher(args, env=slurm_env)
    assert first.wait_for(lambda: "submitted cp: slurm job" in first.output, timeout=60), first.output
    job_id = first.output.split("submitted cp: slurm job ")[1].split()[0]
    first.kill()
    second = launcher(args, env=slurm_env)
    assert second.wait(timeout=120) == 0, second.output
    row = load_summary(td, "att")["cp"]
    assert row["status"] == "finished" and row["job_id"] == job_id, second.output  # collected, not submitted again
    assert "submitted" not in second.output

    # Ctrl+C while waiting cancels the jobs (Slurm sends train.py SIGTERM: it saves and exits); no marker.
    long_run = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_seconds=600 --report_interval_sec=1"
    sweep = write_sweep(tmp_path / "c.yaml", "cancel", [{"name": "long", "cmd": long_run}])
    run = launcher([f"--run={sweep}", *args[1:]], env=slurm_env)
    progress = td / "long" / "progress.csv"
    assert run.wait_for(lambda: progress.exists() and len(progress.read_text().splitlines()) > 2, 90), run.output
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(timeout=90) == 130, run.output
    row = load_summary(td, "cancel")["long"]
    assert row["status"] == "cancelled", run.output
    assert not (td / "long" / "launcher_done.json").exists()
    squeue = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%T", "-j", row["job_id"]],
        capture_output=True,
        text=True,
        env={**os.environ, **slurm_env},
    )
    assert squeue.stdout.strip() in ("CANCELLED", ""), squeue.stdout
    assert "stopping: SIGTERM received" in open(row["log_path"]).read()


def _job(tmp_path: Path) -> Job:
    argv = ["/v/bin/python", "train.py", "--env=CartPole-v1", "--experiment=it's"]
    return Job("e1", argv, str(tmp_path / "my repo"), tmp_path / "td" / "e1", tmp_path / "logs" / "e1.log", 3)


def test_render_template(tmp_path):
    job = _job(tmp_path)
    exit_file = tmp_path / "e1.exit"
    opts = SlurmOptions(partition="gpu", time="", gpus_per_job=1)
    text = render(DEFAULT_TEMPLATE.read_text(), script_values(job, opts, exit_file))
    lines = text.splitlines()
    assert "#SBATCH --partition=gpu" in lines and "#SBATCH --gpus=1" in lines
    assert "#SBATCH --cpus-per-task=3" in lines and f"#SBATCH --output={job.log_path}" in lines
    assert not any(line.startswith("#SBATCH --time") for line in lines)  # no --slurm_time: partition default
    assert f"cd '{tmp_path}/my repo' || exit 1" in lines  # quoted in the body
    assert "/v/bin/python train.py --env=CartPole-v1 '--experiment=it'\"'\"'s'" in lines
    assert "{{" not in text
    # the script the template makes runs, and records the exit code the launcher reads
    workdir = Path(job.cwd)
    workdir.mkdir()
    job.argv = ["sh", "-c", "exit 7"]
    script = tmp_path / "s.sh"
    script.write_text(render(DEFAULT_TEMPLATE.read_text(), script_values(job, opts, exit_file)))
    env = {**os.environ, "SLURM_JOB_ID": "42"}
    assert subprocess.run(["bash", str(script)], env=env, capture_output=True).returncode == 7
    rc, start, end, host = parse_exit_file(exit_file.read_text())
    assert rc == 7 and end >= start and host
    assert parse_exit_file("0\n") == (0, None, None, None)  # a custom template may write only the code
    with pytest.raises(LauncherError, match="unknown placeholders"):
        render("#!/bin/bash\n{{nope}}\n", script_values(job, opts, exit_file))


def test_a_job_cut_by_its_time_limit_is_unfinished(tmp_path):
    """Slurm's time limit sends SIGTERM to every process of the job, the job script too: the script must outlive
    its command to record the exit code (the trap), and 143 (train.py: saved, interrupted) reads as interrupted,
    never finished (before, train.py exited 0 and the job got a finished marker, so reruns skipped it). A job
    that ended with no exit code written in a time-limit state is interrupted too."""
    job = _job(tmp_path)
    Path(job.cwd).mkdir()
    exit_file = tmp_path / "e1.exit"
    # the command saves and exits 143 on SIGTERM, as train.py does; "up" once its handler is in place
    job.argv = [
        "python3",
        "-c",
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(143)); print('up', flush=True);"
        " time.sleep(60)",
    ]
    script = tmp_path / "s.sh"
    script.write_text(render(DEFAULT_TEMPLATE.read_text(), script_values(job, SlurmOptions(), exit_file)))
    p = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        while "up" not in p.stdout.readline():
            pass
        os.killpg(p.pid, signal.SIGTERM)  # what Slurm does at the time limit: every process of the job
        assert p.wait(timeout=20) == 143
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        p.stdout.close()
    assert parse_exit_file(exit_file.read_text())[0] == 143

    slurm = SlurmRun.__new__(SlurmRun)  # only _finish is used: no Slurm tools needed
    t = _Tracked(job, "7", exit_file)
    t.state = "TIMEOUT"
    slurm._finish(t)
    assert t.result.status == "interrupted" and t.result.exit_code == 143
    exit_file.unlink()  # a template without the trap: the script died with its command, nothing written
    t = _Tracked(job, "8", exit_file)
    t.state = "TIMEOUT"
    slurm._finish(t)
    assert t.result.status == "interrupted" and "TIMEOUT" in t.result.error
    t = _Tracked(job, "9", exit_file)
    t.state = "FAILED"
    slurm._finish(t)
    assert t.result.status == "failed"


def test_a_rerun_whose_squeue_fails_submits_nothing_again(tmp_path, monkeypatch):
    """A failing squeue read as "no job of the earlier launcher is running": the rerun submitted them again, two
    copies of each experiment ran into one folder and the first one's result was no longer watched. Now squeue is
    asked again, and if it keeps failing the rerun stops with one line, submitting nothing."""
    from sample_factory.launcher import slurm

    calls = []
    monkeypatch.setattr(slurm, "squeue_states", lambda ids: calls.append(list(ids)))  # always fails (None)
    monkeypatch.setattr(slurm.time, "sleep", lambda s: None)
    run = SlurmRun.__new__(SlurmRun)  # no Slurm tools needed for attach
    run.known, run.dir = {"e1": "41"}, tmp_path / "slurm"
    with pytest.raises(LauncherError, match=r"squeue failed 3 times: .*\(41\) still run, so none is submitted again"):
        run.attach([_job(tmp_path)])
    assert calls == [["41"]] * 3
    # squeue answering on a retry: the running job is attached, not submitted again
    answers = iter([None, {"41": ("RUNNING", "node1")}])
    monkeypatch.setattr(slurm, "squeue_states", lambda ids: next(answers))
    attached, rest = run.attach([_job(tmp_path)])
    assert [t.job_id for t in attached] == ["41"] and rest == []
