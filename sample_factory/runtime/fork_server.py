"""How component processes start: from a fork server that has imported torch and our modules once, so children
start in well under a second, and none inherits a parent that used torch's thread pool (a forked child running a
multi-threaded op after that deadlocks). Kept free of torch imports: `start_early` runs before the launcher imports
anything heavy, so the fork server's imports overlap with the runner's own.

torch._dynamo is not preloaded: nothing on a run's path imports it (1.0-1.1 s on a 2-core machine, as long as
torch's own import). torch.optim's optimizers would, so the learners' Adam is algo/optim.py's `FusedAdam`; only
--torch_compile_* imports it, in the process that compiles. Measured on CartPole (docs/benchmarks.md, "Startup"):
the first trained samples 1.8 s after launch instead of 2.9 s (when the fork server preloaded dynamo)."""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
from typing import Any

PRELOAD = ["torch", "sample_factory.runner"]  # imported once, in the fork server


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
