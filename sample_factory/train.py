"""`python train.py --env=CartPole-v1 --experiment=NAME`: parse the config and run the runner (or, with
--pbt_backend=ray, coordinate a population of such runs)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from sample_factory.config import Config, parse_cfg
from sample_factory.config.parse import normalize_flags
from sample_factory.envs import env_utils  # noqa: F401 - its reader of env spaces: the defaults of any env's spaces
from sample_factory.runtime import fork_server


def auto_tuned_flags(argv: Sequence[str]) -> list[str]:
    """The flags tools/auto_tune.py picks for this command (its progress lines reach the user through stderr)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "sample_factory.tools.auto_tune", *argv]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"train.py: error: --auto_tune failed (exit code {proc.returncode}, see above)")
    return list(json.loads(lines[-1]))


def check_before_start(cfg: Config) -> None:
    """The errors a user makes most, answered in a second, before torch is imported and anything is created: an
    unknown --env (with the closest names) and an experiment another run is training."""
    from sample_factory.envs.env_utils import unknown_env_message
    from sample_factory.experiment.folder import ExperimentError, ExperimentLock, experiment_dir

    why = unknown_env_message(cfg.env or "")
    if why is None and not (cfg.with_pbt and cfg.pbt_backend == "ray"):  # ray members have folders of their own
        try:
            ExperimentLock(experiment_dir(cfg)).check_free()
        except ExperimentError as e:
            why = str(e)
    if why is not None:
        raise SystemExit(f"train.py: error: {why}")


def main(argv: Sequence[str] | None = None, command: bool = False) -> int:
    """Train. `command`: this process is the train.py command itself (nothing ran before this call), so the fork
    server can be a copy of it (runtime/fork_server.py), and it exits when main returns (see below); a script calling
    main gets a fresh fork server and its objects as they were."""
    code = _main(argv, command)
    if command:
        # The interpreter's exit would collect every object torch and the run created, cycles included: 0.35 of the
        # 3.2 CPU-s a short CartPole run cost (benchmarks/notebook.md, "Startup"). Frozen objects are left to the OS;
        # exit handlers (atexit: multiprocessing, wandb) and the refcount frees of module teardown still run.
        gc.freeze()
    return code


def _main(argv: Sequence[str] | None, command: bool) -> int:
    argv = normalize_flags(sys.argv[1:] if argv is None else argv)
    cfg = parse_cfg(argv)
    check_before_start(cfg)
    if cfg.auto_tune:  # trial runs first (or a cached pick), then this run with the picked sampling settings
        argv = [*argv, *auto_tuned_flags(argv)]
        cfg = parse_cfg(argv)
    if cfg.with_pbt and cfg.pbt_backend == "ray":  # a coordinator of separate member runs (pbt/ray_backend.py)
        from sample_factory.pbt.ray_backend import run_population

        return run_population(cfg, argv)
    forked = command and not cfg.serial_mode and fork_server.can_fork_here()
    if not cfg.serial_mode and not forked:
        fork_server.start_early()  # its imports overlap with the runner's (imported only now)
    from sample_factory.runner import run

    if forked:
        fork_server.fork_here()  # a copy of this process as it is now: torch and the runner imported, nothing run
    return run(cfg)


if __name__ == "__main__":
    sys.exit(main(command=True))
