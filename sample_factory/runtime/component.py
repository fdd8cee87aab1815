"""What actor workers, policy workers and learners have in common, and the two ways they are driven:
`process_main` runs one component in its own process; `SerialDriver` runs all of them in one thread.
Components only see channels, so they do not know which of the two drives them."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
import traceback
from typing import Any, NamedTuple

import torch

from sample_factory.runtime.heartbeat import (
    Heartbeat,
    die_with_parent,
    enable_stack_dumps,
    process_alive,
    set_process_name,
)
from sample_factory.runtime.messages import STOP, Channel, Message, Reporter, decode
from sample_factory.runtime.timing import Timing

TERMINATED = "terminated by SIGTERM"  # the error a component reports when SIGTERM ends it


class StopRequested(Exception):
    """Raised inside `init` where the runner's STOP arrived during start-up (`Component.stop_requested`): the
    component finishes and exits as if it had been stopped after starting."""


class ComponentKey(NamedTuple):
    """How the runner and the supervisor tell components apart (reports carry the same two fields)."""

    role: str
    index: Any


class Component:
    """A role with an inbox. Subclasses implement `init`, `on_message`, and optionally `on_idle`/`finish`."""

    role = "component"
    num_threads = 1  # torch threads in this role's process
    niceness: int | None = None  # the process's niceness (set_niceness); None: the runner's
    flushes_denormals = True  # denormal floats computed as zero in this role's process (flush_denormals)

    def __init__(self, index: Any, inbox: Channel, report_channel: Channel):
        self.index = index
        self.inbox = inbox
        self.report = Reporter(report_channel, self.role, index)
        self.stopped = False
        self.activity = "starting"
        self.timing = Timing()  # seconds per activity, reported at the end
        self.initialized = False  # `init` completed: shared-tensor views exist, the component did work
        self.early_messages: list[tuple] = []  # read by `stop_requested` during `init`, handled after it

    @property
    def key(self) -> ComponentKey:
        return ComponentKey(self.role, self.index)

    @property
    def name(self) -> str:
        idx = "_".join(str(i) for i in self.index) if isinstance(self.index, tuple) else str(self.index)
        return f"sf_{self.role}_{idx}"

    def init(self) -> None:
        """Heavy set-up (envs, models) done inside the component's own process."""

    def initialize(self) -> None:
        """`init`, then tell the runner this component is up."""
        self.init()
        self.initialized = True
        self.report("started", os.getpid())
        early, self.early_messages = self.early_messages, []
        if early:
            self.on_messages(early)

    def stop_requested(self) -> bool:
        """For a long `init` (an actor creating its envs one by one) to call between steps: whether STOP has
        arrived, read without waiting. Other messages that came before it are kept and handled once `init` is
        done, in their order. Not for policy workers, whose inbox their policy's other workers share."""
        for msg in self.inbox.get_many(block=False):
            if msg[0] == STOP:
                self.stopped = True
            else:
                self.early_messages.append(msg)
        return self.stopped

    def raise_if_stopped(self) -> None:
        """`stop_requested`, as StopRequested (init unwinds; `finish` releases what it made)."""
        if self.stop_requested():
            raise StopRequested(f"{self.role} {self.index}: stopped while starting")

    def bind_views(self) -> None:
        """(Re)create numpy views of shared tensors; views are not pickled (a copy would no longer be shared)."""

    _view_attrs: tuple[str, ...] = ()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for k in self._view_attrs:
            state[k] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.initialized:
            self.bind_views()

    def on_message(self, msg: Message) -> None:
        raise NotImplementedError

    def on_messages(self, msgs: list[tuple]) -> None:
        for msg in msgs:
            self.handle(decode(msg))

    def handle(self, msg: Message) -> None:
        if msg.kind == STOP:
            self.stopped = True
        else:
            self.on_message(msg)

    def on_idle(self) -> None:
        """Called after every batch of messages (or a poll timeout): periodic work and stall checks."""

    def finish(self) -> None:
        """Release resources; learners save a final checkpoint here."""


def _configure_process(component: Component, runner_pid: int) -> None:
    set_process_name(component.name)
    enable_stack_dumps()
    if os.getppid() == runner_pid:
        # Only where the runner is the parent (spawn): with forkserver the parent is the fork server, whose death
        # (e.g. to the OOM killer) must not take the workers with it. The runner's pid is polled in `_serve`.
        die_with_parent()
    # Ctrl+C reaches the whole process group: children wait for the runner's orderly STOP instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(component.num_threads)
    if component.flushes_denormals:
        flush_denormals()
    if component.niceness is not None:
        set_niceness(component.niceness, component.report)


def flush_denormals() -> None:
    """Denormal floats (below 1.2e-38) computed as zero on this CPU (FTZ/DAZ; no effect on CUDA). Adam's moment
    estimates of weights whose gradient stays zero (dead ReLU units) decay into that range, where x86 arithmetic is
    many times slower: the fused Adam step of the classic_control_dqn network took 0.45 ms with them against 0.06 ms
    flushed. Values that small carry nothing a network or a return can use. The learner and policy worker processes
    only: the actor workers' envs (numpy, MuJoCo, Box2D physics in the same threads) keep IEEE arithmetic, so they
    step exactly as the env package does on its own; serial mode, which steps envs in the runner's process, too."""
    torch.set_flush_denormal(True)


def set_niceness(niceness: int, report: Reporter) -> None:
    """This process's niceness to `niceness`; lowering it needs root or CAP_SYS_NICE, and without either the process
    keeps the niceness it has and says so."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if niceness == current:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except OSError:
        report("note", f"niceness {niceness} not allowed (needs root or CAP_SYS_NICE): running at {current}")


def process_main(
    component: Component,
    heartbeat_interval: float,
    runner_pid: int,
    runner_tmpdir: str | None = None,
    experiment_lock: Any = None,
) -> None:
    """Entry point of a spawned component process. `runner_tmpdir`: the runner's multiprocessing temp dir (where
    the fork server's socket lives), removed here if the runner dies without its own cleanup (SIGKILL, OOM).
    `experiment_lock`: the experiment folder's lock (folder.InheritedLock), held by this process until it exits, so
    no new run of the experiment starts while this one can still write (a final checkpoint after the runner died)."""
    terminated: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: terminated.append(True))
    _configure_process(component, runner_pid)
    exit_code = 1
    try:
        with component.timing.add("process_lifetime"):
            try:
                exit_code = _serve(component, heartbeat_interval, runner_pid, terminated)
            finally:
                component.finish()
        component.report("timing", dict(component.timing))
        component.report("finished", exit_code)
    except Exception as e:
        quiet = getattr(e, "user_facing", False) and not os.environ.get("SF_DEBUG")  # a full disk: its one line
        component.report("error", (f"{type(e).__name__} in finish: {e}", "" if quiet else traceback.format_exc()))
        exit_code = 1
    finally:
        sys.stdout.flush()
        # Whichever way this component ended (the runner's pid gone, or its channels broken first), a dead runner's
        # exit handlers never ran: every component that outlives it tries, the first one wins.
        if runner_tmpdir and not process_alive(runner_pid):
            shutil.rmtree(runner_tmpdir, ignore_errors=True)
    sys.exit(exit_code)


def _serve(component: Component, heartbeat_interval: float, runner_pid: int, terminated: list[bool]) -> int:
    """Initialize, then handle messages until STOP; returns the process's exit code. Errors are reported here."""
    heartbeat = Heartbeat(component.report, heartbeat_interval)
    next_runner_check = 0.0
    try:
        try:
            component.initialize()
        except StopRequested:
            return 0  # an orderly stop: the caller's `finish` releases what `init` made
        while not component.stopped:
            msgs = component.inbox.get_many(timeout=0.05)
            if msgs:
                component.on_messages(msgs)
            component.on_idle()
            heartbeat.beat(component.activity)
            if terminated:
                # Killed from outside (not asked to STOP by the runner): counts as a crash, so it is restarted.
                component.report("error", (TERMINATED, ""))
                return 1
            now = time.monotonic()
            if now > next_runner_check:
                next_runner_check = now + 0.5
                if not process_alive(runner_pid):
                    break
    except Exception as e:
        # Errors whose message says it all (user_facing) travel without a traceback unless SF_DEBUG is set.
        quiet = getattr(e, "user_facing", False) and not os.environ.get("SF_DEBUG")
        # fatal: restarting the worker would fail the same way (a user hook raised): the run stops instead
        fatal = bool(getattr(e, "fatal", False))
        component.report("error", (f"{type(e).__name__}: {e}", "" if quiet else traceback.format_exc(), fatal))
        return 1
    return 0


class SerialDriver:
    """Runs every component in the calling thread, in a fixed order (deterministic with a fixed seed)."""

    def __init__(self, components: list[Component]):
        self.components = components

    def init(self) -> None:
        for c in self.components:
            c.initialize()

    def step(self) -> bool:
        """Deliver every pending message once; returns whether anything happened."""
        busy = False
        for c in self.components:
            msgs = c.inbox.get_many(block=False)
            if msgs:
                busy = True
                c.on_messages(msgs)
            c.on_idle()
        return busy

    def finish(self) -> None:
        for c in self.components:
            c.finish()
            c.report("timing", dict(c.timing))
            c.report("finished", 0)
