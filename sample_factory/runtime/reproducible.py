"""Reproducible synchronous runs: with --async_rl=False and a --seed, two runs of the same command end with the same
weights, whatever the process scheduling. What each component does for it:

- actor workers: each split fills its own slots, in a fixed order, and reports its samples tagged with
  (split, rollout number), so nothing depends on which split finished first (`ActorWorker`);
- policy workers: one forward pass per request, its random draws seeded from (seed, policy, worker, split,
  request number), so an action never depends on which requests were batched together (`PolicyWorker._serve`);
- learners: the slots of an iteration in (worker, split, rollout) order, and no iteration past the env-step budget
  (`Learner`);
- the runner: samples counted and progress rows written per complete iteration
  (experiment/progress.py::IterationSamples);
- every process that runs the model: kernels picked without timing, torch's deterministic algorithms on a GPU
  (model/activations.py::pin_kernels);
- at a stop, the actor workers' envs and counters are saved, so that a resumed run continues the same trajectory
  (`save_actor_state`); a Ctrl+C stops between two iterations for that (`StopBetweenIterations`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from sample_factory.config import Config


def request_seed(seed: int, policy_id: int, actor_idx: int, split_idx: int, seq: int) -> int:
    """The seed of the random draws (action sampling, exploration) answering one request: the same for the same
    split's same request in every run, however the requests were batched. Ints hash the same in every process."""
    return hash((seed, policy_id, actor_idx, split_idx, seq)) & (2**63 - 1)


# ---- resume: the actor workers' state at the stop ---------------------------------------------------------------
# A reproducible run stops at the end of an iteration: the learners keep the slots of the last one, so every split is
# parked with its envs where the next iteration starts. Each actor worker saves its splits (envs, carried position,
# request numbers) and random state there; a resumed run restores them instead of fresh envs, if they belong to the
# checkpoint it resumes (the same policy versions and env steps). Weights, optimizer and learner RNG come from the
# checkpoint, so the resumed run goes on exactly as the uninterrupted one would have.

SYNC_STATE_DIR = "sync_state"


def actor_state_path(exp_dir: Path, worker: int) -> Path:
    return exp_dir / SYNC_STATE_DIR / f"actor_{worker}.pth"


def save_actor_state(exp_dir: Path, worker: int, cfg: Config, point: tuple, state: dict) -> Path:
    """point: (published policy versions, env steps of all policies trained): what the checkpoints will say."""
    from sample_factory.runtime.serial_snapshot import _fingerprint, write_signed

    path = actor_state_path(exp_dir, worker)
    path.parent.mkdir(exist_ok=True)
    write_signed(path, {"cfg": _fingerprint(cfg), "point": point, **state})
    return path


def load_actor_state(exp_dir: Path, worker: int, cfg: Config, point: tuple) -> tuple[dict | None, str]:
    """(state, "") if worker's saved state belongs to `point` (the checkpoints this run resumes) and cfg differs from
    the saved one only in flags safe to change; else (None, why not)."""
    from sample_factory.runtime.serial_snapshot import changed_flags, read_signed

    state, why = read_signed(actor_state_path(exp_dir, worker), "saved actor state")
    if state is None:
        return None, why
    if changed := changed_flags(state["cfg"], cfg):
        return None, f"configuration changed since the stop ({', '.join(changed)})"
    if tuple(state["point"]) != tuple(point):
        return None, f"saved at {state['point']}, not at the checkpoints' {point} (policy versions, env steps)"
    return state, ""


class StopBetweenIterations:
    """The runner's Ctrl+C in a reproducible multi-process run: a stop inside an iteration would save weights trained
    on part of it, or actors halfway through collecting the next one, and the resume could not continue the
    uninterrupted run's trajectory. Instead every learner keeps the slots of the same iteration, one none has begun
    (ParkAfter), as at the end of its budget; once all have, the run stops like at a signal, and the actors save
    their envs. A second Ctrl+C stops at once (inside an iteration: the resume starts fresh envs)."""

    def __init__(self, num_learners: int, send: Callable[[int, int], None]):
        self.iterations = [0] * num_learners  # each learner's iterations of this session, as last reported
        self.send = send  # (learner, iteration): the ParkAfter message
        self.signum: int | None = None  # the Ctrl+C being deferred
        self.target: int | None = None  # the iteration after which the learners keep their slots

    def request(self, signum: int) -> bool:
        """From the signal handler: True if the stop is deferred to the end of an iteration (the first SIGINT)."""
        if signum != signal.SIGINT or self.signum is not None:  # SIGTERM may have reached every process already
            return False
        self.signum = signum
        return True

    def poll(self, log: Callable[[str], None]) -> int | None:
        """From the main loop: the signal to stop with now that every learner keeps its slots, else None."""
        if self.signum is None:
            return None
        if self.target is None:
            # Two past the newest reported: a learner may have finished the next one, its report still queued.
            self.target = max(self.iterations) + 2
            log(
                f"{signal.Signals(self.signum).name} received: stopping after iteration {self.target} of this "
                "session, for an exact resume (Ctrl+C again: stop now)"
            )
            for learner in range(len(self.iterations)):
                self.send(learner, self.target)
        return self.signum if min(self.iterations) >= self.target else None
