"""The ray backend on a real two-node Ray cluster on loopback (Ray's own cluster utilities: a head node and a
second node, 2 CPUs each), with real train.py runs: every experiment reserves its CPUs, both nodes run
experiments, the summary is right, a rerun skips finished experiments, and a failing experiment is reported
failed once (no retries).

Everything stays on 127.0.0.1: the nodes are started with that address, and RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
keeps Ray's driver from swapping a loopback address for the machine's outward one (what Ray does on Windows and
macOS, where clusters are single-machine); the launcher connects with --ray_address like on a real cluster."""

from __future__ import annotations

import time

import psutil
import pytest

from tests.launcher.conftest import TINY, load_summary, max_overlap, write_sweep


def _args(sweep, td, address: str) -> list[str]:
    return [f"--run={sweep}", f"--train_dir={td}", "--backend=ray", f"--ray_address={address}", "--max_parallel=0"]


@pytest.mark.timeout(300)
def test_ray_sweep_on_two_nodes_failed_reported_once_and_resume(tmp_path, launcher, ray_cluster):
    address, env = ray_cluster.address, ray_cluster.env
    assert address.startswith("127.0.0.1:")
    experiments = [
        {"name": "cp", "cmd": TINY, "grid": {"seed": [0, 1, 2]}},
        {"name": "bad", "cmd": TINY + " --no_such_flag=1"},
    ]
    sweep = write_sweep(tmp_path / "s.yaml", "ray4", experiments)
    td = tmp_path / "td"
    run = launcher(_args(sweep, td, address), env=env)
    assert run.wait(timeout=240) == 1, run.output  # one experiment failed
    rows = load_summary(td, "ray4")
    assert len(rows) == 4
    for name in ("cp_seed0", "cp_seed1", "cp_seed2"):
        row = rows[name]
        assert row["status"] == "finished" and row["exit_code"] == 0, run.output
        assert row["final_reward"] is not None and row["final_reward"] > 0
        assert row["stop_reason"] == "reached 10000 env steps"
        assert (td / name / "checkpoint_p0").is_dir() and (td / name / "launcher_done.json").exists()
        assert open(row["log_path"]).read().count("# launcher ") == 1
    # the failing experiment is reported failed once, and started once: Ray did not retry it
    bad = rows["bad"]
    assert bad["status"] == "failed" and bad["exit_code"] == 2, run.output
    log = open(bad["log_path"]).read()
    assert log.count("# launcher ") == 1 and "no_such_flag" in log, log
    assert run.output.count("bad: failed") == 1, run.output
    nodes = {row["node"] for row in rows.values()}
    assert len(nodes) == 2, nodes  # both nodes ran experiments
    # Each run reserves --num_workers + 1 = 2 CPUs: one run per 2-CPU node at a time, 2 in the cluster,
    # although all 4 were submitted at once (--max_parallel=0).
    assert max_overlap(rows.values()) == 2
    for node in nodes:
        assert max_overlap([r for r in rows.values() if r["node"] == node]) == 1

    # a rerun skips the finished experiments and runs the failed one again
    rerun = launcher(_args(sweep, td, address), env=env)
    assert rerun.wait(timeout=120) == 1, rerun.output
    rows2 = load_summary(td, "ray4")
    assert [rows2[f"cp_seed{s}"]["status"] for s in range(3)] == ["skipped"] * 3
    assert rows2["bad"]["status"] == "failed" and open(bad["log_path"]).read().count("# launcher ") == 2


@pytest.mark.timeout(180)
def test_ray_killed_launcher_still_stops_its_runs(tmp_path, launcher, ray_cluster):
    """Ray ends a dead driver's actors and SIGKILLs their children: the run's guard takes that, and the run gets
    SIGTERM (saves, stops its components) instead of dying with its components left training."""
    address, env = ray_cluster.address, ray_cluster.env
    long_run = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_seconds=600 --report_interval_sec=1"
    sweep = write_sweep(tmp_path / "s.yaml", "raykill", [{"name": "long", "cmd": long_run}])
    td = tmp_path / "td"
    run = launcher(_args(sweep, td, address), env=env)
    progress = td / "long" / "progress.csv"
    assert run.wait_for(lambda: progress.exists() and len(progress.read_text().splitlines()) > 2, 90), run.output
    # the run's processes (not the launcher's children: Ray's): train.py, found by its folder, and its tree
    trains = [p for p in psutil.process_iter(["cmdline"]) if any(str(td) in a for a in p.info["cmdline"] or [])]
    tree = [t for p in trains for t in [p, *p.children(recursive=True)]]
    assert len(tree) >= 5, tree  # guard, train.py and its components
    run.proc.kill()
    log_path = td / "sweep_raykill" / "logs" / "long.log"
    deadline = time.monotonic() + 60
    while "stopping: SIGTERM received" not in log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    log = log_path.read_text()
    assert "stopping: SIGTERM received" in log and "Traceback" not in log, log[-3000:]
    _, alive = psutil.wait_procs(tree, timeout=max(deadline - time.monotonic(), 1))
    assert not alive, alive
    assert list((td / "long" / "checkpoint_p0").glob("*.pth"))


@pytest.mark.timeout(60)
def test_actor_waits_for_the_runs_leftover_processes(tmp_path):
    """A run's main process ended (killed) while its components still save: the actor returns only once they are
    done, so a restart of the same experiment never shares its folder with them; a straggler is killed."""
    import subprocess
    import sys

    from sample_factory.launcher.ray_backend import wait_for_process_group

    done = tmp_path / "saved"
    child = tmp_path / "child.py"
    child.write_text(f"import time\ntime.sleep(1.5)\nopen({str(done)!r}, 'w').close()\n")
    # the leader exits at once; its child (same process group) "saves" for 1.5 s
    script = f"import subprocess, sys; subprocess.Popen([sys.executable, {str(child)!r}])"
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    leader.wait()
    started = time.monotonic()
    wait_for_process_group(leader.pid, timeout=20)
    assert done.exists() and time.monotonic() - started < 15

    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    started = time.monotonic()
    wait_for_process_group(hung.pid, timeout=1)
    assert hung.wait(timeout=10) == -9 and time.monotonic() - started < 10


def test_collected_exit_codes_tell_finished_from_interrupted():
    """What an actor reports, as the launcher records it (no Ray needed): a run whose train.py was stopped by a
    signal the launcher did not send (143: preemption, a node's shutdown) is interrupted, not finished."""
    from sample_factory.launcher.jobs import Result, StopRequest
    from sample_factory.launcher.ray_backend import _collect

    class FakeRay:
        def __init__(self, out):
            self.out = out

        def get(self, ref):
            return self.out

    out = {"start": 1.0, "end": 2.0, "host": "h", "node_id": "n" * 20}
    for rc, cancelled, status in [(0, False, "finished"), (143, False, "interrupted"), (130, True, "cancelled")]:
        result = Result("e", "running")
        _collect(FakeRay({**out, "exit_code": rc, "cancelled": cancelled}), None, result, StopRequest())
        assert (result.status, result.exit_code) == (status, rc)
    result = Result("e", "running")  # the launcher's stop came as the run reached its budget: it did finish
    _collect(FakeRay({**out, "exit_code": 0, "cancelled": True}), None, result, StopRequest())
    assert result.status == "finished"
