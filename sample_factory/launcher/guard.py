"""`python -m sample_factory.launcher.guard STARTER_PID COMMAND...`: runs COMMAND (a train.py run) as its child so
that the run stops cleanly however the process that started it (the launcher, or a Ray actor) ends.

- SIGINT / SIGTERM / SIGHUP sent to the guard are forwarded to the run (the launcher's Ctrl+C goes this way).
- When the starter dies, the kernel sends the guard SIGTERM (PR_SET_PDEATHSIG), which it forwards.
- When the guard itself is killed outright (Ray SIGKILLs an actor's child processes when the actor goes, e.g. once
  its driver died), the kernel sends the run SIGTERM the same way.
SIGTERM makes train.py save a checkpoint, stop its components and exit, so no run is left training unwatched.
The guard exits with the run's exit code (128 + N when the run died of signal N). Linux only (prctl); elsewhere
the command just runs under the guard without those ties.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1


def _die_with_parent(expected_parent: int) -> None:
    """SIGTERM to this process when its parent dies; exit at once if the parent is already gone."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != expected_parent:
        os._exit(128 + signal.SIGTERM)


def guarded(starter_pid: int | None = None) -> list[str]:
    """The argv prefix that runs a command under the guard, tied to `starter_pid` (default: this process)."""
    return [sys.executable, "-m", "sample_factory.launcher.guard", str(starter_pid or os.getpid())]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print("usage: python -m sample_factory.launcher.guard STARTER_PID COMMAND...", file=sys.stderr)
        return 2
    _die_with_parent(int(args[0]))
    me = os.getpid()
    child: subprocess.Popen | None = None
    early: list[int] = []  # signals that came while the child was being started

    def forward(signum: int, frame: object) -> None:
        if child is None:
            early.append(signum)
            return
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    # Handlers first, then the child: a signal that comes while the child starts is passed on once it exists, not
    # taken by Python's default handler (which would end the guard and leave the run behind). The child's
    # dispositions then start as the default ones (exec resets handled signals), even where the guard was started
    # with SIGINT ignored (a background job of a non-interactive shell).
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, forward)
    # the guard is single-threaded, so a preexec_fn is safe here
    child = subprocess.Popen(args[1:], preexec_fn=lambda: _die_with_parent(me))
    for signum in early:
        forward(signum, None)
    rc = child.wait()
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main())
