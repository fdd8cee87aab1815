"""Remote samplers (--sampler_nodes) on a real two-node Ray cluster on loopback (tests/ray_cluster.py): real
train.py runs whose rollouts come from a sampler node's actor and policy workers through Ray's object store.

- a run sampled only by the remote node (--local_samplers=False) learns CartPole;
- the remote node's processes killed mid-run: the run logs one line and goes on with its local samplers, or with
  its other sampler node; a node whose actor is stopped (hung) is lost after --heartbeat_timeout_sec; without local
  samplers the run stops with one line once the last node is lost;
- after every run no process of the sampler node (its Ray actor, its components) is left, nor /dev/shm objects.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

from sample_factory.distributed.remote_samplers import START_TIMEOUT_S
from tests.integration.conftest import REPO_ROOT, lag_triples, progress_env_steps, shm_entries

pytest.importorskip("ray", reason="Ray is not installed: pip install -e .[ray]")

_NODE_LINE = re.compile(r"sampler node (\d+): Ray node \S+ \(.*actor pid (\d+), component pids \[([\d, ]+)\]\)")
_SUMMARY = re.compile(r"remote samplers: (\d+) rollouts in (\d+) transfers")
_SHARE = re.compile(r"sampler nodes: 1 of 1 alive, [\d,]+ env steps/s from them \((\d+)% of all\)")
_IMPORTED = re.compile(r"sampler nodes: 1 of 1 alive, .*, (\d+) rollouts imported")
BASE = ["--num_workers=1", "--num_envs_per_worker=8", "--sampler_nodes=1", "--report_interval_sec=1", "--seed=3"]


def _node_pids(run, node: int = 0) -> tuple[int, list[int]]:
    """(the sampler actor's pid, its component pids) of sampler node `node` from the run's log."""

    def found():
        return next((m for m in _NODE_LINE.finditer(run.output) if int(m.group(1)) == node), None)

    # A node starts a Ray worker that imports torch and spawns its components: 1-2 min on a loaded 2-core VM.
    assert run.wait_until(found, timeout=START_TIMEOUT_S), run.describe()
    m = found()
    return int(m.group(2)), [int(p) for p in m.group(3).split(",")]


def _node_shares(run) -> list[int]:
    """The sampler node's share (%) of the run's env steps, one per progress interval, from its first non-zero."""
    shares = [int(x) for x in _SHARE.findall(run.output)]
    first = next((i for i, x in enumerate(shares) if x > 0), len(shares))
    return shares[first:]


def _imported(run) -> int:
    """How many rollouts the run has imported from its sampler node, by its last progress line (0 before any)."""
    counts = _IMPORTED.findall(run.output)
    return int(counts[-1]) if counts else 0


def _assert_gone(pids: list[int], timeout: float = 20.0) -> None:
    """The processes exited (zombies count as exited), and left no pid-tagged /dev/shm object."""
    deadline = time.monotonic() + timeout

    def alive() -> list[int]:
        out = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                pass
        return out

    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(), f"sampler node processes still alive: {alive()}"
    tags = {str(p) for p in pids}
    left = [n for n in shm_entries() if (m := re.match(r"^(?:pym-|torch_)(\d+)[-_]", n)) and m.group(1) in tags]
    assert not left, left


def _args(cluster, *extra: str) -> list[str]:
    return [*BASE, f"--ray_address={cluster.address}", *extra]


@pytest.mark.timeout(560)
def test_remote_sampler_node_alone_learns_cartpole(tmp_path, train_run, ray_cluster):
    # The budget is env steps (the outcome may not depend on the machine's speed: 28 s in CI, 168 s beside a full
    # test suite on the same 2 cores); the seconds only catch a hang.
    flags = ["--local_samplers=False", "--stop_at_reward=150", "--train_for_env_steps=1000000"]
    run = train_run(
        _args(ray_cluster, *flags, "--train_for_seconds=480"),
        tmp_path,
        extra_env=ray_cluster.env,
    )
    actor_pid, component_pids = _node_pids(run)
    assert run.wait(timeout=520) == 0, run.describe()
    out = run.output
    assert "stopping: mean reward reached 150.0" in out, run.describe()
    rollouts, transfers = map(int, _SUMMARY.search(out).groups())
    assert rollouts > 0 and transfers > 0, run.describe()
    # every sample the learner trained on came from the sampler node: the local node had no actor worker
    assert "sf_actor_0" not in run.names_seen()
    # versions travelled with the rollouts: the learner measured the lag of remote samples
    lags = lag_triples(run)
    assert lags and all(0 <= lo <= hi for lo, _, hi in lags), run.describe()
    run.assert_no_leftovers()
    _assert_gone([actor_pid, *component_pids])
    # The experiment is an ordinary one: a parallel evaluation (its cfg.json says --local_samplers=False and
    # --sampler_nodes=1) plays on this machine, without Ray.
    p = subprocess.run(
        [sys.executable, "enjoy.py", "--experiment=x", f"--train_dir={tmp_path}", "--num_workers=2"]
        + ["--max_num_episodes=4", "--no_render=True"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads((tmp_path / "x" / "eval_results.json").read_text())["episodes"] == 4


@pytest.mark.timeout(420)
def test_lost_sampler_node_run_goes_on_with_local_samplers(tmp_path, train_run, ray_cluster):
    run = train_run(_args(ray_cluster, "--train_for_seconds=300"), tmp_path, extra_env=ray_cluster.env)
    actor_pid, component_pids = _node_pids(run)
    # The bug this guards (seen: the node sampled 3% of the run): Ray's worker niceness 15, inherited by the node's
    # components, lost them every core they share with the learner. Checked at its cause, which does not depend on
    # the machine's speed (a share threshold did: 10.5% median on a loaded CI VM where a quiet one reads ~50%).
    if os.geteuid() == 0:  # the node may lower its niceness only as root (or with CAP_SYS_NICE)
        assert [psutil.Process(p).nice() for p in component_pids] == [0] * len(component_pids)
    # ... and the node keeps taking part: it goes on delivering after its first rollouts. Counted in rollouts, not
    # in 1-s shares: on a loaded VM a node delivers in bursts (seen on CI: 6, 0, 0, 0, 0, 21 %).
    assert run.wait_until(lambda: _imported(run) >= 1, timeout=120), run.describe()
    first = _imported(run)
    assert run.wait_until(lambda: _imported(run) >= first + 20, timeout=120), (_node_shares(run), run.describe())
    psutil.Process(actor_pid).kill()  # the sampler node's Ray actor: its components must follow
    assert run.wait_until(lambda: "sampler node 0 lost" in run.output, timeout=60), run.describe()
    _assert_gone(component_pids)
    lost_lines = [ln for ln in run.output.splitlines() if "sampler node 0 lost" in ln]
    assert len(lost_lines) == 1 and "continuing with 0 sampler node(s) and the local samplers" in lost_lines[0]
    steps_at_loss = progress_env_steps(run) or 0
    assert run.wait_until(lambda: (progress_env_steps(run) or 0) > steps_at_loss + 5000, timeout=60), run.describe()
    run.signal(signal.SIGINT)
    assert run.wait(timeout=90) == 130, run.describe()
    assert "stopping: SIGINT received" in run.output
    assert int(_SUMMARY.search(run.output).group(1)) > 0, run.describe()
    run.assert_no_leftovers()
    _assert_gone([actor_pid])


@pytest.mark.timeout(480)
def test_lost_then_hung_sampler_nodes_without_local_samplers_stop_the_run(tmp_path, train_run, ray_cluster):
    """Two sampler nodes and no local samplers, one run for both ways a node is lost: node 0's actor killed (Ray
    reports the error: the run logs it and goes on with node 1), then node 1's actor stopped (SIGSTOP: alive,
    silent), so its next_batch never returns: declared lost after --heartbeat_timeout_sec like a silent local worker.
    With no sampler left the run stops with one line, no traceback, nothing of either node left."""
    args = [a for a in BASE if a != "--sampler_nodes=1"] + ["--sampler_nodes=2", f"--ray_address={ray_cluster.address}"]
    args += ["--local_samplers=False", "--train_for_seconds=300", "--heartbeat_timeout_sec=15"]
    run = train_run(args, tmp_path, extra_env=ray_cluster.env)
    (killed, killed_components), (hung, hung_components) = _node_pids(run, 0), _node_pids(run, 1)
    assert run.wait_until(lambda: (progress_env_steps(run) or 0) > 0, timeout=60), run.describe()
    psutil.Process(killed).kill()
    assert run.wait_until(lambda: "sampler node 0 lost" in run.output, timeout=60), run.describe()
    _assert_gone([killed, *killed_components])
    steps_at_loss = progress_env_steps(run) or 0
    assert run.wait_until(lambda: (progress_env_steps(run) or 0) > steps_at_loss + 2000, timeout=60), run.describe()
    actor = psutil.Process(hung)
    actor.suspend()  # SIGSTOP
    stopped_at = time.monotonic()
    try:
        assert run.wait(timeout=120) == 1, run.describe()
    finally:
        try:
            actor.resume()
        except psutil.Error:
            pass
    took = time.monotonic() - stopped_at
    out = run.output
    lost = [ln for ln in out.splitlines() if re.search(r"sampler node \d lost \(", ln)]
    assert len(lost) == 2, run.describe()
    assert "sampler node 0 lost (" in lost[0] and "continuing with 1 sampler node(s)" in lost[0], lost
    assert "sampler node 1 lost (next_batch silent for" in lost[1], lost
    assert "over --heartbeat_timeout_sec=15); no sampler left" in lost[1], lost
    assert "stopping: every sampler node was lost (--local_samplers=False)" in out, run.describe()
    assert "Traceback" not in out and took >= 15, (took, run.describe())
    run.assert_no_leftovers()
    _assert_gone([killed, *killed_components, hung, *hung_components])
