"""Supervisor: the runner's process keeper. Starts one process per component, notices processes that died or
stopped sending heartbeats (a silent one is first asked for its threads' stacks), restarts actor and policy workers
(up to --max_worker_restarts each within --worker_restart_window_sec: a crash loop stops the run, sporadic crashes
over a long run do not), and stops everything in order at the end.

Restarting actor worker w safely (its slots may still be referenced by queued messages):
  1. bump buffers.generation[w]: every message of the old worker (requests, ready signals, rollouts, returned
     slots) carries the old generation and is dropped by whoever receives it;
  2. wait a short grace period so a policy worker or learner that read the old generation just before the bump
     finishes touching the slots;
  3. start a new worker with the same index: fresh envs, all of its slots free again.
Restarting a policy worker: start a new one, then tell every actor to re-send requests that have been outstanding
for a while (the dead worker may have taken them); request sequence numbers make duplicates harmless.
A replacement is never started while the process it replaces still runs.

Processes are watched by pid as well as through multiprocessing (`ChildProcess`): with forkserver, a component is
the fork server's child and its multiprocessing handle learns its exit code from the fork server, so once the fork
server itself died (e.g. to the OOM killer) every handle reads "exited, code 255" while the components run on. The
next start of a process (a restart) starts a new fork server.

A killed component cannot end what it started (env processes: VizDoom engines, subprocess envs): its descendants,
listed just before the kill, get LEFT_BEHIND_GRACE_SEC to exit by themselves (envs/process_tree.py), then they
are killed too. At the end of a run the runner waits for the descendants of every component, so it never exits
while a process it started runs on (one that holds a component's inherited fds keeps multiprocessing's fork server
and resource tracker alive with it).
"""

from __future__ import annotations

import collections
import multiprocessing.forkserver
import multiprocessing.util
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from sample_factory.config import Config
from sample_factory.envs.process_tree import LEFT_BEHIND_GRACE_SEC, descendants, end_processes, running
from sample_factory.runtime.component import Component, ComponentKey, process_main
from sample_factory.runtime.heartbeat import HeartbeatMonitor, dump_stacks, process_alive
from sample_factory.runtime.messages import Channels, Resend, Stop
from sample_factory.runtime.shared_buffers import TrajectoryBuffers

RESTARTABLE = ("actor", "policy")
RESTART_GRACE_SEC = 0.5


class ChildProcess:
    """A started component process: alive while multiprocessing says so, or else while its pid (checked by start
    time, so a reused pid does not count) runs and is not a zombie."""

    def __init__(self, proc: Any):
        self.proc = proc
        self.orphaned = False  # multiprocessing lost track of it (its fork server died) while it ran
        try:
            self.ps: psutil.Process | None = psutil.Process(proc.pid)
        except psutil.Error:
            self.ps = None  # already gone
        self.descendants: dict[int, psutil.Process] = {}  # what it had started, listed while it ran
        self.killed_at: float | None = None

    def is_alive(self) -> bool:
        if self.proc.is_alive():
            return True
        alive = self.ps is not None and running(self.ps)
        self.orphaned |= alive
        return alive

    def note_descendants(self) -> None:
        """Remember the processes it has started: once it is gone, nothing finds them by their parent."""
        self.descendants.update((p.pid, p) for p in descendants(self.ps))

    def left_behind(self) -> list[psutil.Process]:
        """Its remembered descendants still running after it is gone."""
        return [] if self.is_alive() else [p for p in self.descendants.values() if running(p)]

    @property
    def exit_description(self) -> str:
        if self.orphaned:
            return "exit code unknown: its fork server had died"
        return f"exit code {self.proc.exitcode}"

    def signal(self, sig: int) -> None:
        if self.ps is not None:
            try:
                self.ps.send_signal(sig)  # psutil refuses a pid that was reused meanwhile
            except psutil.Error:
                pass

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL; what it had started is left behind, for `Supervisor.end_left_behind`."""
        self.note_descendants()
        self.signal(signal.SIGKILL)
        if self.killed_at is None:
            self.killed_at = time.monotonic()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.proc.join(timeout)  # returns at once when multiprocessing lost track of it
        while self.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)


# In a runner's multiprocessing temp folder (pymp-*): the runner's pid. When every process of a run dies at once
# (kill -9 of its process group, the OOM killer, a node reboot without /tmp on tmpfs), no one is left to remove the
# folder and its fork-server socket; the next run of any experiment removes the folders whose runner is gone.
RUN_MARKER = "sample_factory_runner.pid"


def mark_temp_dir(tmpdir: str) -> None:
    with open(os.path.join(tmpdir, RUN_MARKER), "w") as f:
        f.write(str(os.getpid()))


def remove_stale_temp_dirs() -> list[Path]:
    """Remove this user's pymp-* folders marked by a runner that no longer runs (other programs' folders carry no
    marker and are left alone; a runner pid taken by another process since keeps its folder, which is harmless)."""
    removed = []
    for d in Path(tempfile.gettempdir()).glob("pymp-*"):
        try:
            if d.stat().st_uid != os.getuid():
                continue
            pid = int((d / RUN_MARKER).read_text())
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and not process_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class Supervisor:
    def __init__(
        self,
        cfg: Config,
        ctx: Any,
        make_component: Callable[[str, Any], Component],
        buffers: TrajectoryBuffers,
        channels: Channels,
        log: Callable[[str], None],
        on_restart: Callable[[str, Any, str, int], None] | None = None,
        lock: Any = None,
    ):
        self.cfg, self.ctx, self.make_component = cfg, ctx, make_component
        self.on_restart = on_restart  # (role, index, reason, restarts): the user's on_worker_restarted hook
        self.buffers, self.channels, self.log = buffers, channels, log
        self.lock = lock  # the experiment lock (experiment/folder.py): every component holds it until it exits
        # torch.compile runs in init (model/compile.py): a minute or more on a small loaded machine
        compiling = cfg.torch_compile_learner or cfg.torch_compile_worker
        self.monitor = HeartbeatMonitor(cfg.heartbeat_timeout_sec, startup_timeout=300.0 if compiling else None)
        self.processes: dict[ComponentKey, ChildProcess] = {}
        self.replaced: list[ChildProcess] = []  # killed, restarted processes whose descendants may still run
        self.fork_server_loss_logged = False
        self.components: dict[ComponentKey, Component] = {}
        self.finished: set[ComponentKey] = set()
        self.restarts: collections.Counter = collections.Counter()  # over the whole run (the hook's count)
        self.restart_times: dict[ComponentKey, collections.deque] = collections.defaultdict(collections.deque)
        self.pending_restarts: dict[ComponentKey, float] = {}  # key -> when to start the replacement
        self.discarded_rollouts = 0
        # The fork server listens on a socket file in the runner's multiprocessing temp dir (pymp-*), which only the
        # runner's exit handlers remove: the components remove it when they find the runner gone.
        self.runner_tmpdir = multiprocessing.util.get_temp_dir() if ctx.get_start_method() == "forkserver" else None
        if self.runner_tmpdir is not None:
            for stale in remove_stale_temp_dirs():
                log(f"removed {stale}: the temp folder of a run whose processes all died at once")
            mark_temp_dir(self.runner_tmpdir)

    def start(self, component: Component) -> None:
        key = component.key
        proc = self.ctx.Process(
            target=process_main,
            args=(
                component,
                self.cfg.heartbeat_interval,
                os.getpid(),
                self.runner_tmpdir,
                None if self.lock is None else self.lock.for_child(),
            ),
            name=component.name,
            daemon=False,
        )
        proc.start()
        if key in self.processes and self.processes[key].descendants:
            self.replaced.append(self.processes[key])
        self.processes[key] = ChildProcess(proc)
        self.components[key] = component
        self.finished.discard(key)
        self.monitor.seen(key, "starting")

    def on_finished(self, key: ComponentKey, exit_code: int) -> None:
        if exit_code == 0:  # otherwise _on_death still needs the last activity
            self.monitor.forget(key)
            self.finished.add(key)

    def check(self, stopping: bool) -> str | None:
        """Handle dead and silent processes; returns why the run must stop, if it must."""
        self.end_left_behind()
        now = time.monotonic()
        for key, proc in list(self.processes.items()):
            if key in self.pending_restarts or key in self.finished or proc.is_alive():
                continue
            fatal = self._on_death(key, proc.exit_description, stopping)
            if fatal:
                return fatal
        if self.runner_tmpdir and any(p.orphaned for p in self.processes.values()):
            if not self.fork_server_loss_logged:
                self.fork_server_loss_logged = True
                self.log("the multiprocessing fork server died: the components run on, a new one starts now")
            # Started now, in its own process (returns at once while it imports torch), rather than by the next
            # restart, which would wait for those imports in this loop (no reports, no stop checks meanwhile).
            multiprocessing.forkserver.ensure_running()
        for key, silent_for, activity in self.monitor.stale():
            why = f"silent for {silent_for:.0f} s"
            if key in self.processes and self.processes[key].is_alive():
                # where it hung: the activity is only what its last heartbeat said
                self.log(f"{key.role} {key.index} {why}: the stacks of its threads follow on stderr")
                dump_stacks(self.processes[key].proc.pid)
            if key.role not in RESTARTABLE or stopping:
                return f"{key.role} {key.index} {why} (last activity: {activity})"
            self.log(f"{key.role} {key.index} {why} (last activity: {activity}): killing it")
            self.processes[key].kill()
            self.processes[key].join(2.0)
            fatal = self._on_death(key, why, stopping)
            if fatal:
                return fatal
        for key, when in list(self.pending_restarts.items()):
            if now >= when and not stopping:
                if self.processes[key].is_alive():  # never beside the process it replaces (same slots, answers)
                    self.processes[key].kill()
                    continue
                del self.pending_restarts[key]
                self.start(self.make_component(key.role, key.index))
                if key.role == "policy":
                    for ch in self.channels.actor:
                        ch.put(Resend.wire())
        return None

    def _on_death(self, key: ComponentKey, why: str, stopping: bool) -> str | None:
        role, index = key
        activity = self.monitor.last_activity(key)
        self.monitor.forget(key)
        self.processes[key].join(0.1)
        if role not in RESTARTABLE:
            return f"{role} {index} died ({why}, last activity: {activity})"
        if stopping:  # the run ends anyway: the learners still save their final checkpoints
            self.log(f"{role} {index} died while the run stops ({why}): not restarted")
            self.finished.add(key)  # nothing more to do for it
            return None
        recent = self._recent_restarts(key)
        if len(recent) >= self.cfg.max_worker_restarts:
            within = f" in {time.monotonic() - recent[0]:.0f} s" if recent else ""
            window = self.cfg.worker_restart_window_sec
            per = f" (per --worker_restart_window_sec={window:g})" if window > 0 else ""
            return (
                f"{role} {index} crashed {len(recent) + 1} times{within} ({why}); "
                f"--max_worker_restarts={self.cfg.max_worker_restarts} reached{per}"
            )
        recent.append(time.monotonic())
        self.restarts[key] += 1
        self.log(
            f"{role} {index} died ({why}, last activity: {activity}); restarting it "
            f"({len(recent)} of {self.cfg.max_worker_restarts}{self._window_text()})"
        )
        if self.on_restart is not None:
            self.on_restart(role, index, why, self.restarts[key])
        if role == "actor":
            self.buffers.generation[index] += 1
            self.discarded_rollouts += self.cfg.worker_num_splits  # its half-finished rollouts
        self.pending_restarts[key] = time.monotonic() + RESTART_GRACE_SEC
        return None

    def _recent_restarts(self, key: ComponentKey) -> collections.deque:
        """The monotonic times of `key`'s restarts that count now: those within the window (all with window 0)."""
        times = self.restart_times[key]
        window = self.cfg.worker_restart_window_sec
        while window > 0 and times and time.monotonic() - times[0] > window:
            times.popleft()
        return times

    def _window_text(self) -> str:
        window = self.cfg.worker_restart_window_sec
        return f" within {window:g} s" if window > 0 else ""

    def _finishing(self, key: ComponentKey) -> bool:
        """A learner still running after the shutdown timeout is finishing an SGD step before it saves its final
        checkpoint (it asks for STOP between steps): it gets the time the run allows a silent component, that is
        until --heartbeat_timeout_sec after its last report, as one long step would have got during the run."""
        if key.role == "learner" and isinstance(key.index, tuple):  # rank r >= 1 of a group: while its rank 0 is
            leader = ComponentKey("learner", key.index[0])  # finishing (it may need the rank for its last step)
            return leader in self.processes and self.processes[leader].is_alive() and self._finishing(leader)
        seen = self.monitor.last_seen.get(key)
        return (
            key.role == "learner"
            and key not in self.finished
            and seen is not None
            and time.monotonic() - seen.time < self.cfg.heartbeat_timeout_sec
        )

    def stop_all(self, order: tuple[str, ...], drain: Callable[[float], None], timeout: float, hurry) -> None:
        """STOP every component (by role order), wait up to `timeout` while draining reports (longer for a
        learner that is finishing: `_finishing`), then terminate and finally kill what is left. `hurry()`
        returning True (a second Ctrl+C) skips the wait."""
        deadline = time.monotonic() + timeout
        keys = sorted(self.processes, key=lambda k: order.index(k.role))
        for proc in self.processes.values():
            proc.note_descendants()
        for key in keys:
            if not self.processes[key].is_alive():
                continue  # a dead process's queue may be unusable: never write to it
            try:
                self.components[key].inbox.put(Stop.wire(), timeout=1.0)
            except Exception:
                pass  # a full inbox: the process is terminated below
        for key in keys:
            proc, extended = self.processes[key], False
            while proc.is_alive() and not hurry():
                if time.monotonic() >= deadline:
                    if not self._finishing(key):
                        break
                    if not extended:
                        extended = True
                        activity = self.monitor.last_activity(key)
                        self.log(f"{key.role} {key.index} is still busy ({activity}): waiting for its final checkpoint")
                drain(0.05)
            if proc.is_alive() and key not in self.finished:
                self.log(f"{key.role} {key.index} did not stop in time, terminating it")
                proc.terminate()
        for proc in self.processes.values():
            proc.join(2.0)
            if proc.is_alive():
                proc.kill()
                proc.join(2.0)
        drain(0.0)
        self.end_left_behind(final=True)

    def end_left_behind(self, final: bool = False) -> None:
        """Kill what components left running (`ChildProcess.left_behind`) once it had LEFT_BEHIND_GRACE_SEC to
        exit by itself, counted from the component's kill; at the end of the run (`final`), wait for all of it
        (from now for a component that exited by itself)."""
        self.replaced = [p for p in self.replaced if p.descendants]
        start = time.monotonic()
        for proc in [*self.processes.values(), *self.replaced]:
            if not proc.descendants or (proc.killed_at is None and not final):
                continue
            left = proc.left_behind()
            if not left and proc.is_alive():
                continue  # its descendants are its own business while it runs
            since = start if proc.killed_at is None else proc.killed_at
            grace = since + LEFT_BEHIND_GRACE_SEC - time.monotonic()
            if left and grace > 0 and not final:
                continue
            killed = end_processes(left, max(grace, 0.0))
            if killed:
                self.log(f"{proc.proc.name} left {len(killed)} processes running: killed them ({', '.join(killed)})")
            proc.descendants.clear()
