"""runtime/reproducible.py: per-request seeds, the actors' state saved at a stop, and a serial sync run that stops
and resumes (its slots kept at the budget must come back when the resumed run's budget is larger)."""

from __future__ import annotations

import signal

import torch

from sample_factory.config import parse_cfg, reproducible
from sample_factory.experiment.checkpoints import list_checkpoints
from sample_factory.runtime.reproducible import (
    StopBetweenIterations,
    load_actor_state,
    request_seed,
    save_actor_state,
)
from tests.policy_helpers import train_tiny


def test_reproducible_means_sync_with_a_seed():
    assert reproducible(parse_cfg(["--env=CartPole-v1", "--async_rl=False", "--seed=1"]))
    assert not reproducible(parse_cfg(["--env=CartPole-v1", "--async_rl=False"]))
    assert not reproducible(parse_cfg(["--env=CartPole-v1", "--seed=1"]))


def test_request_seeds_differ_per_split_and_request():
    seeds = {request_seed(3, p, w, s, q) for p in range(2) for w in range(3) for s in range(2) for q in range(50)}
    assert len(seeds) == 2 * 3 * 2 * 50
    assert request_seed(3, 0, 1, 0, 7) == request_seed(3, 0, 1, 0, 7) != request_seed(4, 0, 1, 0, 7)


def test_saved_actor_state_is_used_only_at_its_point(tmp_path):
    cfg = parse_cfg(["--env=CartPole-v1", "--async_rl=False", "--seed=1"])
    save_actor_state(tmp_path, 0, cfg, ((8,), 4096), {"splits": ["envs"], "rng": None, "shaping": {}})
    state, why = load_actor_state(tmp_path, 0, cfg, ((8,), 4096))
    assert why == "" and state["splits"] == ["envs"]
    assert load_actor_state(tmp_path, 0, cfg, ((9,), 4096))[0] is None  # a checkpoint written after (or before)
    later = parse_cfg(["--env=CartPole-v1", "--async_rl=False", "--seed=1", "--train_for_env_steps=9999"])
    assert load_actor_state(tmp_path, 0, later, ((8,), 4096))[0] is not None  # a budget may change
    other = parse_cfg(["--env=CartPole-v1", "--async_rl=False", "--seed=1", "--learning_rate=0.1"])
    state, why = load_actor_state(tmp_path, 0, other, ((8,), 4096))
    assert state is None and "learning_rate" in why
    assert load_actor_state(tmp_path, 1, cfg, ((8,), 4096)) == (None, "no saved actor state")


def test_ctrl_c_stops_after_an_iteration_no_learner_has_begun():
    sent, lines = [], []
    stop = StopBetweenIterations(2, lambda learner, n: sent.append((learner, n)))
    assert stop.poll(lines.append) is None and not sent  # no Ctrl+C yet
    assert not stop.request(signal.SIGTERM)  # it may have reached every process: not deferred
    stop.iterations = [3, 4]  # learner 1 has reported its 4th iteration: either may be training its 5th
    assert stop.request(signal.SIGINT) and not stop.request(signal.SIGINT)  # a second Ctrl+C stops at once
    assert stop.poll(lines.append) is None and sent == [(0, 6), (1, 6)] and "after iteration 6" in lines[0]
    stop.iterations = [6, 5]
    assert stop.poll(lines.append) is None and len(sent) == 2  # sent once
    stop.iterations = [6, 6]
    assert stop.poll(lines.append) == signal.SIGINT


def test_serial_sync_run_resumes_past_its_budget(tmp_path):
    """A sync run keeps the last iteration's slots at its budget; resumed with a larger one (serial snapshot) it
    must go on, and end where the run that was not stopped ends."""
    sync = ["--async_rl=False"]
    stopped = train_tiny(tmp_path, "stopped", *sync, "--train_for_env_steps=1000")
    train_tiny(tmp_path, "stopped", *sync, "--train_for_env_steps=2000")
    straight = train_tiny(tmp_path, "straight", *sync, "--train_for_env_steps=2000")
    a, b = (list_checkpoints(d / "checkpoint_p0")[-1] for d in (stopped, straight))
    assert a.name == b.name and a.name.endswith("_2048.pth"), (a.name, b.name)
    wa, wb = (torch.load(p, weights_only=False, map_location="cpu")["model"] for p in (a, b))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
