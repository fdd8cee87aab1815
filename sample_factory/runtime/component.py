"""What actor workers, policy workers and learners have in common, and the two ways they are driven:
`process_main` runs one component in its own process; `SerialDriver` runs all of them in one thread.
Components only see channels, so they do not know which of the two drives them."""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from typing import Any

import torch

from sample_factory.runtime.heartbeat import (
    Heartbeat,
    die_with_parent,
    enable_stack_dumps,
    process_alive,
    set_process_name,
)
from sample_factory.runtime.messages import STOP, Channel, Reporter
from sample_factory.runtime.timing import Timing


class Component:
    """A role with an inbox. Subclasses implement `init`, `on_message`, and optionally `on_idle`/`finish`."""

    role = "component"
    num_threads = 1  # torch threads in this role's process

    def __init__(self, index: Any, inbox: Channel, report_channel: Channel):
        self.index = index
        self.inbox = inbox
        self.report = Reporter(report_channel, self.role, index)
        self.stopped = False
        self.activity = "starting"
        self.timing = Timing()  # seconds per activity, reported at the end

    @property
    def name(self) -> str:
        idx = "_".join(str(i) for i in self.index) if isinstance(self.index, tuple) else str(self.index)
        return f"sf_{self.role}_{idx}"

    def init(self) -> None:
        """Heavy set-up (envs, models) done inside the component's own process."""

    def bind_views(self) -> None:
        """(Re)create numpy views of shared tensors; views are not pickled (a copy would no longer be shared)."""

    _view_attrs: tuple[str, ...] = ()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for k in self._view_attrs:
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if any(k in state for k in ("groups", "model")):  # an initialized component: views existed
            self.bind_views()

    def on_message(self, msg: tuple) -> None:
        raise NotImplementedError

    def on_messages(self, msgs: list) -> None:
        for msg in msgs:
            if msg[0] == STOP:
                self.stopped = True
            else:
                self.on_message(msg)

    def on_idle(self) -> None:
        """Called after every batch of messages (or a poll timeout): periodic work and stall checks."""

    def finish(self) -> None:
        """Release resources; learners save a final checkpoint here."""


def _configure_process(component: Component) -> None:
    set_process_name(component.name)
    enable_stack_dumps()
    die_with_parent()
    # Ctrl+C reaches the whole process group: children wait for the runner's orderly STOP instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(component.num_threads)


def process_main(component: Component, heartbeat_interval: float, runner_pid: int) -> None:
    """Entry point of a spawned component process."""
    terminated = []
    signal.signal(signal.SIGTERM, lambda *_: terminated.append(True))
    _configure_process(component)
    heartbeat = Heartbeat(component.report, heartbeat_interval)
    exit_code = 0
    start = time.perf_counter()
    next_runner_check = 0.0
    try:
        component.init()
        component.report("started", os.getpid())
        while not component.stopped:
            msgs = component.inbox.get_many(timeout=0.05)
            if msgs:
                component.on_messages(msgs)
            component.on_idle()
            heartbeat.beat(component.activity)
            if terminated:
                # Killed from outside (not asked to STOP by the runner): counts as a crash, so it is restarted.
                component.report("error", ("terminated by SIGTERM", ""))
                exit_code = 1
                break
            now = time.monotonic()
            if now > next_runner_check:
                next_runner_check = now + 0.5
                if not process_alive(runner_pid):
                    break
    except Exception as e:
        # Errors whose message says it all (user_facing) travel without a traceback unless SF_DEBUG is set.
        quiet = getattr(e, "user_facing", False) and not os.environ.get("SF_DEBUG")
        component.report("error", (f"{type(e).__name__}: {e}", "" if quiet else traceback.format_exc()))
        exit_code = 1
    finally:
        try:
            component.finish()
            component.timing["process_lifetime"] = time.perf_counter() - start
            component.report("timing", dict(component.timing))
            component.report("finished", exit_code)
        except Exception as e:
            component.report("error", (f"{type(e).__name__} in finish: {e}", traceback.format_exc()))
            exit_code = 1
        sys.stdout.flush()
    sys.exit(exit_code)


class SerialDriver:
    """Runs every component in the calling thread, in a fixed order (deterministic with a fixed seed)."""

    def __init__(self, components: list[Component]):
        self.components = components

    def init(self) -> None:
        for c in self.components:
            c.init()
            c.report("started", os.getpid())

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
