"""`python train.py --with_pbt=True --num_policies=N --pbt_backend=ray [--ray_address=HOST:PORT] ...`: population-
based training with each policy a separate train.py run (a member) placed by Ray, possibly on another node.

This process is the coordinator. It runs every member in segments of --pbt_period_env_steps: a segment is one
train.py run (members.member_argv) that resumes the member's folder and exits, saving a checkpoint, once the member
has the segment's env steps. Each segment runs in a Ray actor (the launcher's ExperimentActor) that reserves the
member's CPUs/GPUs for the segment's duration, on a node Ray picks (SPREAD), so a population larger than the
cluster takes turns. When a segment ends, the coordinator reads the member's objective (its progress.csv), gives the
pure PBT logic (population.py: the same object, flags and rules as in-process PBT) one step for it with the latest
objective of every member, and applies the decision before the member's next segment: a replacement copies the
source's latest checkpoint into the target's folder (members.copy_member_weights), and the new hyperparameters go to
member_<i>/pbt_p0.json, which the member's run restores into its learner. Members never wait for each other.
The PBT logic gets each member's policy version (from its checkpoint's name): a member that never trained is not a
source, and a segment that ended before the member's learner trained since its last PBT step is no PBT step; the
member runs a longer segment instead (its collected but untrained env steps are lost when it resumes).

Why segments rather than members that keep running and poll for commands: a member between two segments is a
folder on disk (checkpoint + pbt_p0.json), so a decision needs no live process and no new message path into the
runner, a replacement is a file write into a stopped run, and a member that died is simply run again: train.py's
resume restarts it from its last checkpoint (at most --pbt_max_member_restarts times per member; a member out of
restarts leaves the population, which goes on, and the exit code is 1). The cost is one run start per segment
(a few seconds), small next to a useful PBT period.

Requirements as for the launcher's ray backend (docs/scale-out.md): train_dir on a folder every node sees at the
same path, the same interpreter and sample_factory importable on every node. Ray is optional: the [ray] extra.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sample_factory.config import Config
from sample_factory.experiment.folder import prepare_experiment_dir
from sample_factory.launcher.jobs import Job, LauncherError, StopRequest
from sample_factory.launcher.ray_backend import ExperimentActor, _check_feasible, _import_ray, stop_actors, submit
from sample_factory.launcher.ray_init import init_ray
from sample_factory.pbt.members import (
    copy_member_weights,
    latest_checkpoint_info,
    member_argv,
    member_dir,
    read_progress,
    write_member_state,
)
from sample_factory.pbt.population import PopulationBasedTraining, load_pbt_state, save_pbt_state

WAIT_S = 0.5
STOP_TIMEOUT_S = 60.0


def log(msg: str) -> None:
    print(f"[pbt] {msg}", flush=True)


@dataclass
class Member:
    index: int
    exp_dir: Path
    env_steps: int = 0
    objective: float = math.nan
    target: int = 0  # env steps the running / next segment trains to
    version: int = 0  # policy version of its newest checkpoint (0: initial weights), what its next segment resumes
    ckpt_env_steps: int = 0  # env steps of that checkpoint: where its next segment's env-step counter starts
    restarts: int = 0
    status: str = "training"  # training, finished, stopped (before its budget, by its own stop rule), failed
    segments: list[dict[str, Any]] = field(default_factory=list)


class RayPopulation:
    def __init__(self, cfg: Config, argv: Sequence[str], pop_dir: Path, reward_shaping: dict[str, float] | None):
        self.cfg, self.argv, self.pop_dir = cfg, list(argv), pop_dir
        n = cfg.num_policies
        self.pbt = PopulationBasedTraining(
            cfg, n, reward_shaping=reward_shaping, states=load_pbt_state(pop_dir, n, cfg)
        )
        save_pbt_state(pop_dir, self.pbt.states)
        self.members = [Member(i, member_dir(pop_dir, i)) for i in range(n)]
        self.budget = int(cfg.train_for_env_steps)
        assert cfg.num_workers is not None, "parse_cfg resolves --num_workers"
        self.cpus = cfg.pbt_cpus_per_member if cfg.pbt_cpus_per_member > 0 else cfg.num_workers + 1
        self.env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {}
        # A resumed population: each member is taken up where its files are (all read before any decision).
        started = []
        for m in self.members:
            write_member_state(m.exp_dir, self.pbt.states[m.index])
            steps, objective = read_progress(cfg, m.exp_dir)
            info = latest_checkpoint_info(m.exp_dir)
            if steps is not None and info is not None:
                m.env_steps, m.objective, m.version, m.ckpt_env_steps = steps, objective, info[1], info[2]
                started.append(m)
            else:
                m.target = min(self.pbt.states[m.index].last_pbt_env_steps + self.pbt.period, self.budget)
        for m in started:
            self._after_segment(m)

    # ---- decisions (between two segments of a member) ---------------------------------------------------------
    def objectives(self) -> dict[int, float]:
        return {m.index: (m.objective if m.status != "failed" else math.nan) for m in self.members}

    def versions(self) -> dict[int, int]:
        return {m.index: m.version for m in self.members}

    def _after_segment(self, m: Member, segment_start: int | None = None) -> None:
        """Member `m` is stopped at m.env_steps: one PBT step for it, then its next segment's target (or done).
        `segment_start`: the env steps its ended segment started from (its checkpoint's); None when no segment
        ended (a resumed coordinator takes the member up)."""
        if m.env_steps >= self.budget:
            m.status = "finished"  # like in-process PBT: no decision for a policy that stops training
            return
        if segment_start is not None and m.env_steps < m.target:
            m.status = "stopped"  # exit 0 before its target: its own stop rule (--stop_at_reward, time budget)
            log(f"member {m.index} stopped at {m.env_steps} env steps, before its budget (see its log)")
            return
        state = self.pbt.states[m.index]
        for d in self.pbt.step(m.index, m.env_steps, self.objectives(), self.versions()):
            origin = ""
            if d.source is not None:
                src_file, new_file = copy_member_weights(
                    self.members[d.source].exp_dir, m.exp_dir, self.cfg.keep_checkpoints
                )
                info = latest_checkpoint_info(m.exp_dir)
                assert info is not None  # copy_member_weights has just written one
                m.version = info[1]
                origin = f" from member {d.source} ({src_file.name} -> {m.exp_dir.name}/{new_file.name})"
            write_member_state(m.exp_dir, state)
            save_pbt_state(self.pop_dir, [state])
            changed = ", ".join(f"{k} {v['old']:.4g}->{v['new']:.4g}" for k, v in d.changes.items()) or "no change"
            unranked = f" (not ranked, never trained: member {', '.join(map(str, d.untrained))})" if d.untrained else ""
            log(f"member {m.index} {d.kind}{origin} at {m.env_steps} env steps: {changed}{unranked}")
        save_pbt_state(self.pop_dir, [state])  # last_pbt_env_steps moves even without a decision
        m.target = min(max(state.last_pbt_env_steps + self.pbt.period, m.env_steps + 1), self.budget)
        why = self.pbt.skipped.get(m.index)
        if why is not None:
            # Its next segment restarts its counter at its checkpoint's env steps: it gets the length of the one
            # that did not train plus a period, so that segments grow until its learner trains.
            length = m.env_steps - (m.ckpt_env_steps if segment_start is None else segment_start)
            m.target = min(max(m.target, m.ckpt_env_steps + length + self.pbt.period), self.budget)
            log(
                f"member {m.index}: no PBT step at {m.env_steps} env steps: {why}; its next segment trains to "
                f"{m.target} env steps"
            )

    def _on_segment_end(self, m: Member, segment: dict[str, Any]) -> bool:
        """Returns True when the member trains on (a next segment, or the same one again after a failure)."""
        m.segments.append(segment)
        steps, objective = read_progress(self.cfg, m.exp_dir)
        info = latest_checkpoint_info(m.exp_dir)
        if segment.get("exit_code") == 0 and steps is not None and info is not None:
            start = m.ckpt_env_steps
            m.env_steps, m.version, m.ckpt_env_steps = steps, info[1], info[2]
            if math.isfinite(objective):  # a segment without a finished episode keeps the last known objective
                m.objective = objective
            self._after_segment(m, start)
            return m.status == "training"
        m.restarts += 1
        why = segment.get("error") or f"exit code {segment.get('exit_code')}"
        if m.restarts > self.cfg.pbt_max_member_restarts:
            m.status = "failed"
            log(f"member {m.index} failed ({why}) after {m.restarts - 1} restarts: it leaves the population")
            return False
        since = f"its checkpoint {info[0].name}" if info is not None else "scratch"
        log(
            f"member {m.index} died ({why}): restarting it from {since} "
            f"(restart {m.restarts}/{self.cfg.pbt_max_member_restarts})"
        )
        return True

    # ---- running on Ray ---------------------------------------------------------------------------------------
    def job(self, m: Member) -> Job:
        return Job(
            name=m.exp_dir.name,
            argv=member_argv(self.cfg, self.argv, self.pop_dir, m.index, m.target),
            cwd=os.getcwd(),
            exp_dir=m.exp_dir,
            log_path=self.pop_dir / "logs" / f"{m.exp_dir.name}.log",
            num_cpus=self.cpus,
            num_gpus=self.cfg.pbt_gpus_per_member,
            env=dict(self.env),
        )

    def run(self, ray, stop: StopRequest) -> None:
        todo = [m for m in self.members if m.status == "training"]
        _check_feasible(ray, [self.job(m) for m in todo])
        actor_cls = ray.remote(max_concurrency=2)(ExperimentActor)
        pending = deque(todo)
        in_flight: dict[Any, tuple[Member, Any, float]] = {}
        stopping_since: float | None = None
        try:
            while pending or in_flight:
                while pending and not stop.requested:
                    m = pending.popleft()
                    actor, ref = submit(actor_cls, self.job(m))
                    in_flight[ref] = (m, actor, time.time())
                if stop.requested:
                    pending.clear()
                    if stopping_since is None:
                        stopping_since = time.monotonic()
                        log("stopping: every running member saves and exits")
                        for _, actor, _ in in_flight.values():
                            actor.stop.remote()
                    elif time.monotonic() - stopping_since > STOP_TIMEOUT_S:
                        for _, actor, _ in in_flight.values():
                            ray.kill(actor)
                        in_flight.clear()
                if not in_flight:
                    continue
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_S)
                for ref in ready:
                    m, actor, submitted = in_flight.pop(ref)
                    segment = self._collect(ray, ref, m, submitted)
                    ray.kill(actor)  # frees its CPUs for the next segment
                    if stop.requested:
                        m.segments.append(segment)
                        continue
                    if self._on_segment_end(m, segment):
                        pending.append(m)
        except BaseException:
            if in_flight:  # the coordinator itself fails: its members save and exit as on Ctrl+C
                stop_actors(ray, {ref: actor for ref, (_, actor, _) in in_flight.items()}, STOP_TIMEOUT_S)
            raise

    def _collect(self, ray, ref, m: Member, submitted: float) -> dict[str, Any]:
        segment: dict[str, Any] = {"target": m.target, "submitted": submitted}
        try:
            out = ray.get(ref)
        except Exception as e:  # noqa: BLE001 - the actor or its node died: the member is restarted
            segment["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            segment["exit_code"] = None
            return segment
        segment.update(
            exit_code=out["exit_code"], node=out["node_id"], host=out["host"], start=out["start"], end=out["end"]
        )
        return segment

    # ---- report -----------------------------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        rows = []
        for m in self.members:
            st = self.pbt.states[m.index]
            rows.append(
                {
                    "member": m.index,
                    "status": m.status,
                    "env_steps": m.env_steps,
                    "objective": m.objective if math.isfinite(m.objective) else None,
                    "restarts": m.restarts,
                    "replacements": sum(1 for e in st.history if e["kind"] == "replacement"),
                    "mutations": sum(1 for e in st.history if e["kind"] == "mutation"),
                    "nodes": sorted({s["node"] for s in m.segments if s.get("node")}),
                    "segments": m.segments,
                    "hyperparams": st.hyperparams,
                }
            )
        return {"population": str(self.pop_dir), "budget_env_steps": self.budget, "members": rows}


def format_summary(summary: dict[str, Any]) -> str:
    lines = ["member  status     env_steps  objective  restarts  replaced  mutated  nodes"]
    for r in summary["members"]:
        obj = f"{r['objective']:.2f}" if r["objective"] is not None else "-"
        nodes = ",".join(n[:8] for n in r["nodes"]) or "-"
        lines.append(
            f"{r['member']:>6}  {r['status']:<9} {r['env_steps']:>10}  {obj:>9}  {r['restarts']:>8}  "
            f"{r['replacements']:>8}  {r['mutations']:>7}  {nodes}"
        )
    return "\n".join(lines)


def _reward_shaping(cfg: Config) -> dict[str, float] | None:
    """The env's tunable reward coefficients, which PBT perturbs per member as it does per policy in-process."""
    from sample_factory.envs.env_utils import probe_env

    return probe_env(cfg, False).reward_shaping


def run_population(cfg: Config, argv: Sequence[str]) -> int:
    """The coordinator's main: 0 when every member reached its budget (or stopped by its own rule), 1 when one
    failed for good, 130 when stopped by Ctrl+C / SIGTERM, 2 when Ray cannot be reached."""
    try:
        ray = _import_ray()
    except LauncherError as e:
        print(f"train.py: error: --pbt_backend=ray: {e}", flush=True)
        return 2
    pop_dir, what, lock = prepare_experiment_dir(cfg)
    try:
        population = RayPopulation(cfg, argv, pop_dir, _reward_shaping(cfg))
        log(f"{what}: population of {cfg.num_policies} members in {pop_dir}, {population.cpus} CPUs each")
        try:
            if cfg.ray_address:
                init_ray(ray, cfg.ray_address, log_to_driver=False, configure_logging=False)
            else:
                init_ray(ray, None, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            print(f"train.py: error: cannot start or reach Ray ({cfg.ray_address or 'local'}): {e}", flush=True)
            return 2
        stop = StopRequest()
        stop.install()
        try:
            population.run(ray, stop)
        except LauncherError as e:
            print(f"train.py: error: {e}", flush=True)
            return 2
        finally:
            stop.restore()
            ray.shutdown()
        summary = population.summary()
        tmp = pop_dir / ".population.json.tmp"
        tmp.write_text(json.dumps(summary, indent=1))
        os.replace(tmp, pop_dir / "population.json")
        log(f"done:\n{format_summary(summary)}\nsummary: {pop_dir / 'population.json'}")
        if stop.requested:
            return 130
        return 1 if any(r["status"] == "failed" for r in summary["members"]) else 0
    finally:
        lock.release()
