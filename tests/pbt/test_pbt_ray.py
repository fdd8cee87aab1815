"""PBT across nodes (--pbt_backend=ray) on a real two-node Ray cluster on loopback (the `ray_cluster` fixture, 2 CPUs
per node), with real train.py member runs: decisions are taken and applied (replacements copy checkpoints that the
target then resumes from, the hyperparameters in pbt_p<i>.json are the ones each member's learner trained with),
members run on both nodes, and a member killed in the middle of a segment is restarted from its last checkpoint
while the population goes on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.pbt.members import latest_checkpoint_info
from sample_factory.pbt.population import PopulationBasedTraining, load_pbt_state
from tests.integration.conftest import is_runner

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE = [
    "--env=CartPole-v1",
    "--num_workers=1",
    "--num_envs_per_worker=16",
    # iterations of 1024 samples (2 rollouts of 16 x 32) instead of the preset's 4096: every segment of 3000 env
    # steps trains, so every segment but the last is a PBT step (one without an SGD step would be skipped)
    "--batch_size=1024",
    "--num_batches_per_epoch=1",
    "--with_pbt=True",
    "--pbt_backend=ray",
    "--pbt_cpus_per_member=1",  # 4 members at once on the 2 x 2 CPUs
    "--pbt_period_env_steps=3000",
    "--pbt_start_mutation=3000",
    "--report_interval_sec=1",
    "--seed=11",
    "--experiment=pop",
]
_REPLACED = re.compile(r"member (\d+) replacement from member (\d+) \((\S+) -> member_\d+/(\S+)\)")


class Coordinator:
    """`python train.py ... --pbt_backend=ray` in its own session, output to a file; at exit, every process of the
    test's train_dir (the members, wherever Ray started them) and the coordinator's tree are killed."""

    def __init__(self, argv: list[str], env: dict[str, str], out: Path):
        full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        full_env.pop("SF_DEBUG", None)
        self.out_path = out
        self.out = open(out, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "train.py", *argv],
            cwd=REPO_ROOT,
            env=full_env,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def output(self) -> str:
        return self.out_path.read_text()

    def kill_all(self, marker: str) -> None:
        procs = []
        try:
            procs = psutil.Process(self.proc.pid).children(recursive=True) + [psutil.Process(self.proc.pid)]
        except psutil.Error:
            pass
        procs += member_processes(marker, guards=True)
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        self.proc.wait(timeout=30)
        self.out.close()


def member_processes(marker: str, guards: bool = False, member: int | None = None) -> list[psutil.Process]:
    """The train.py processes (with `guards`: also their launcher guards) whose command line names `marker`
    (and with `member`, that member's experiment)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if member is not None and f"--experiment=member_{member}" not in cmd:
            continue
        if any(marker in a for a in cmd) and (guards or "sample_factory.launcher.guard" not in cmd) and is_runner(p):
            found.append(p)
    return found


@pytest.fixture
def coordinator(tmp_path):
    started: list[Coordinator] = []

    def start(argv: list[str], env: dict[str, str]) -> Coordinator:
        c = Coordinator(argv, env, tmp_path / f"coordinator{len(started)}.log")
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill_all(str(tmp_path))


def _no_member_left(td: Path) -> None:
    deadline = time.monotonic() + 30
    while member_processes(str(td), guards=True) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not member_processes(str(td), guards=True)


def _killed_in_a_resumed_segment(pop: Path, run: Coordinator) -> tuple[int, Path, list[psutil.Process]]:
    """Kill member 1's train.py (SIGKILL, as the OOM killer would) once it trains a segment it resumed (its log's
    last section says "resumed from"); returns (that section's index, the checkpoint it had, the killed tree)."""
    log1 = pop / "logs" / "member_1.log"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.proc.poll() is None:
        info = latest_checkpoint_info(pop / "member_1")
        sections = (log1.read_text() if log1.exists() else "").split("# launcher ")
        if len(sections) >= 3 and "resumed from" in sections[-1]:
            victims = member_processes(str(pop), member=1)  # train.py itself (not its guard)
            if len(victims) == 1:
                try:
                    tree = [victims[0], *victims[0].children(recursive=True)]
                    victims[0].kill()
                except psutil.NoSuchProcess:  # the segment ended just now: wait for the next one
                    continue
                return len(sections) - 1, info[0], tree
        time.sleep(0.1)
    raise AssertionError(f"member 1 was never seen in a resumed segment\n{run.output[-3000:]}")


@pytest.mark.timeout(900)
def test_pbt_population_on_two_nodes_with_a_member_killed(tmp_path, ray_cluster, coordinator):
    """One population run checked for: decisions taken and applied across two nodes (members on both, the
    hyperparameters each learner trained with, replacements resumed from the copied weights), and member 1,
    SIGKILLed in a segment it resumed, restarted from its last checkpoint while the population goes on."""
    address, env = ray_cluster.address, ray_cluster.env
    td = tmp_path / "td"
    flags = [
        *BASE,
        "--num_policies=4",
        "--train_for_env_steps=9000",  # 3 segments per member, a PBT step after each of the first 2
        # Synchronous members: a segment stops only once its learner has trained the iteration that reached the
        # segment's env steps. An asynchronous learner that a loaded machine holds back ends a segment untrained
        # (no PBT step, a longer next segment), and the count of decisions below depends on the load (7 == 8).
        "--async_rl=False",
        "--pbt_replace_fraction=0.5",
        "--pbt_replace_reward_gap=0",  # any better objective replaces the worst: replacements are (nearly) certain
        "--pbt_replace_reward_gap_absolute=0",
        "--pbt_mutation_rate=0.5",
        "--pbt_perturb_min=1.5",
        "--pbt_perturb_max=3",
        f"--train_dir={td}",
    ]
    run = coordinator([*flags, f"--ray_address={address}"], env)
    pop = td / "pop"
    killed_section, resumed_from, tree = _killed_in_a_resumed_segment(pop, run)
    assert run.proc.wait(timeout=600) == 0, run.output[-5000:]
    out = run.output
    summary = json.loads((pop / "population.json").read_text())
    rows = summary["members"]
    assert [r["status"] for r in rows] == ["finished"] * 4, out[-3000:]
    assert all(r["env_steps"] >= 9000 for r in rows), rows
    # member 1's killed segment is run again: one restart, and one more segment, unless the kill landed after the
    # segment's last checkpoint (a loaded machine): the rerun then trains nothing and is no segment of its own
    assert [r["restarts"] for r in rows] == [0, 1, 0, 0], rows
    assert [len(r["segments"]) for r in rows] in ([3, 4, 3, 3], [3, 3, 3, 3]), rows
    assert len({n for r in rows for n in r["nodes"]}) == 2, rows  # members ran on both nodes

    # ---- the killed member: restarted from its last checkpoint, its killed run's processes gone
    died = re.search(r"member 1 died \(exit code 137\): restarting it from its checkpoint (\S+) \(restart 1/3\)", out)
    assert died, out[-3000:]
    # the last checkpoint: the one it had when killed, or a newer one its learner saved on the way out (it gets
    # SIGTERM when train.py dies; the restart waits for the run's remaining processes)
    restart_from = pop / "member_1" / "checkpoint_p0" / died.group(1)
    assert restart_from.name >= resumed_from.name  # zero-padded versions: names sort by version
    restarted = (pop / "logs" / "member_1.log").read_text().split("# launcher ")[killed_section + 1]
    assert f"resumed from {restart_from} " in restarted, restarted[:2000]
    _, alive = psutil.wait_procs(tree, timeout=30)  # the killed run's components followed it
    assert not alive, alive

    # ---- the decisions
    cfg = parse_cfg(flags)
    states = load_pbt_state(pop, 4, cfg)
    bounds = PopulationBasedTraining(cfg, 4).bounds
    events = [e for s in states for e in s.history]
    assert {e["kind"] for e in events} == {"mutation", "replacement"}, out[-3000:]
    assert len(events) == 8  # one PBT step per member after each of its first 2 segments (none for a killed one)
    for i, s in enumerate(states):
        assert s.policy_id == i and [e["env_steps"] for e in s.history] == sorted(e["env_steps"] for e in s.history)
        assert all(bounds[k][0] <= v <= bounds[k][1] for k, v in s.hyperparams.items())
        assert rows[i]["hyperparams"] == s.hyperparams
        # the member's run restored these and its learner trained with them (the learner's cfg in its checkpoint)
        member = json.loads((pop / f"member_{i}" / "pbt_p0.json").read_text())
        assert member["hyperparams"] == s.hyperparams
        ckpt = torch.load(latest_checkpoint_info(pop / f"member_{i}")[0], weights_only=False)
        assert {k: ckpt["cfg"][k] for k in s.hyperparams} == s.hyperparams

    # every replacement wrote the source's weights as the target's newest checkpoint, which the target resumed from
    replaced = _REPLACED.findall(out)
    assert len(replaced) == sum(e["kind"] == "replacement" for e in events) > 0
    for target, source, _, new_file in replaced:
        assert target != source
        log = (pop / "logs" / f"member_{target}.log").read_text()
        assert f"resumed from {pop / f'member_{target}' / 'checkpoint_p0' / new_file}" in log
    _no_member_left(td)
