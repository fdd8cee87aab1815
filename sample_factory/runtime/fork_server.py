"""How component processes start: from a fork server that has imported torch and our modules once, so children
start in well under a second, and none inherits a parent that used torch's thread pool (a forked child running a
multi-threaded op after that deadlocks).

Two ways to start it. On Linux the train.py command forks it from its own process once the runner's imports are done
and before it has run any torch op, opened a file or started a thread (`fork_here`): the fork server then costs no
imports of its own (almost half of a short CartPole run's CPU: benchmarks/notebook.md, "Where the CPU goes").
Elsewhere (a script that calls train's main, another thread running, SF_FORK_SERVER=fresh, not Linux), and for a
fork server started again later (the first one died: the runner has used torch by then), multiprocessing starts a
fresh interpreter that imports PRELOAD; `start_early` launches that one before the launcher imports anything heavy,
so its imports overlap with the runner's. Kept free of torch imports for that.

torch._dynamo is not preloaded: nothing on a run's path imports it (it takes as long as torch's own import).
torch.optim's optimizers would, so the learners' Adam is algo/optim.py's `FusedAdam`; only --torch_compile_* imports
it, in the process that compiles (the first trained samples come about a second sooner: benchmarks/notebook.md,
"Startup")."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

PRELOAD = ["torch", "sample_factory.runner"]  # imported once, in the fork server
NAME = "sf-forkserver"  # a forked fork server's process name: its command line is the launcher's; not sf_*, which
# users signal with SIGUSR1 for stack dumps (docs/troubleshooting.md), a signal that would kill it


def mp_context() -> Any:
    """The multiprocessing context every component process is started from (spawn where fork servers are not
    available)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def start_early() -> None:
    """Launch the fork server now without waiting for it: its preload runs in its own process while this one goes
    on importing and setting up; the first process started through `mp_context()` then finds it ready (or waits
    only for what is left of its imports)."""
    if mp_context().get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()


def can_fork_here() -> bool:
    """Whether `fork_here` may fork the fork server from this process (else the launcher calls `start_early`): Linux,
    and no other Python thread (a copy would hold the locks that thread holds). SF_FORK_SERVER=fresh in the
    environment asks for multiprocessing's own fresh interpreter instead (a way out if a library's state does not
    survive the copy; benchmarks/benchmark_startup.py compares the two)."""
    if os.environ.get("SF_FORK_SERVER") == "fresh" or threading.active_count() > 1:
        return False
    return sys.platform == "linux" and mp_context().get_start_method() == "forkserver"


def fork_here() -> None:
    """Start the fork server as a fork of this process, which has imported PRELOAD already. Only for the train.py
    command itself, before it runs a torch op, opens a file or starts a thread: the fork server and every component
    inherit its memory as it is then. A script that calls train's main may have done any of these first, so it gets
    a fresh fork server. Should CUDA have been queried all the same, the copy replaces itself with a fresh one."""
    if not can_fork_here():
        multiprocessing.forkserver.ensure_running()
        return
    missing = [m for m in PRELOAD if m not in sys.modules]
    assert not missing, f"fork_here: import {missing} first"
    multiprocessing.resource_tracker.ensure_running()  # its own small interpreter, as always
    gc.collect()  # garbage holding an fd (a file object) would close that fd number in a copy, reused there
    for stream in (sys.stdout, sys.stderr):  # or the copies could print again what is still buffered here
        with contextlib.suppress(AttributeError, ValueError, OSError):  # None, closed
            stream.flush()
    spawn = multiprocessing.util.spawnv_passfds

    def fork_instead(path: Any, args: Sequence[Any], passfds: Sequence[int]) -> int:  # typeshed says bytes: a str
        if "multiprocessing.forkserver" not in args[-1]:
            return spawn(path, args, passfds)
        pid = os.fork()
        if pid == 0:
            _serve_forked(path, args, passfds)
        return pid

    # multiprocessing builds the fork server's `python -c PROGRAM` (its socket, its pipes, the preload list) and
    # spawns it through util.spawnv_passfds; the forked copy runs PROGRAM itself.
    multiprocessing.util.spawnv_passfds = fork_instead
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        multiprocessing.util.spawnv_passfds = spawn


def _serve_forked(path: str, args: Sequence[str], passfds: Sequence[int]) -> None:
    """The forked fork server: holds only what a spawned one would (stdio and the fds multiprocessing passes it),
    runs the program it would have run, and exits without this process's exit handlers (they are the runner's)."""
    code = 1
    try:
        keep = sorted({0, 1, 2, *passfds})
        for low, high in zip([-1, *keep], [*keep, os.sysconf("SC_OPEN_MAX")]):
            if high > low + 1:  # os.closerange(0, 0) closes every fd (CPython 3.11 reads high - 1 = -1 as no bound)
                os.closerange(low + 1, high)
        # CUDA's runtime cannot start in a fork of a process that queried it (torch.cuda.is_available() without
        # NVML): become the fresh interpreter multiprocessing would have spawned, same pid and fds
        if getattr(sys.modules["torch"].cuda, "_is_in_bad_fork", lambda: False)():
            for fd in passfds:
                os.set_inheritable(fd, True)
            os.execv(path, list(args))
        with contextlib.suppress(OSError), open("/proc/self/comm", "w") as f:  # a name is a convenience
            f.write(NAME)
        # held by ensure_running while it forked this copy: a process started from here that starts a fork server
        # of its own needs it free
        multiprocessing.forkserver._forkserver._lock = threading.Lock()  # type: ignore[attr-defined]  # private
        exec(args[-1], {"__name__": "__sf_forkserver__"})  # the program of `python -c PROGRAM`
        code = 0
    except SystemExit as e:  # the server's way out: every client closed the "alive" pipe
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)
