"""train.py's exit codes (docs/troubleshooting.md, "Exit codes"), shared with the launcher, which tells a finished
run (no rerun needed) from an interrupted one (a rerun resumes it) by them. Free of heavy imports: the launcher
reads it.

  0    finished: the run reached its stop condition (--train_for_env_steps, --train_for_seconds, --stop_at_reward)
  1    failed (the log says why)
  2    a bad command line or config: nothing started
  130  interrupted by SIGINT (Ctrl+C), 143 by SIGTERM (kill, Slurm's time limit or scancel, preemption): the run
       stopped in order and saved its final checkpoint, but it has not finished; as a shell reports a command
       killed by the signal (128 + its number)
"""

from __future__ import annotations

import signal

FINISHED, FAILED, BAD_CONFIG = 0, 1, 2
INTERRUPTED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def interrupted_exit_code(signum: int) -> int:
    """The exit code of a run stopped by signal `signum` before its stop condition."""
    return 128 + int(signum)


INTERRUPTED_EXIT_CODES = tuple(interrupted_exit_code(s) for s in INTERRUPTED_SIGNALS)  # (130, 143)


def is_interrupted(exit_code: int | None) -> bool:
    """A run that stopped early on a signal (saved, unfinished), as train.py or a shell reports it."""
    return exit_code in INTERRUPTED_EXIT_CODES
