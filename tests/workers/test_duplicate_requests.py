"""A request answered twice (a re-sent duplicate after a policy-worker restart) must not change the data of a step
the actor has already taken. The components run in this process (serial mode) and the races of a multi-process
run are injected at the points where another process could act: inside a policy worker's forward pass (after it
passed the request filter) and inside the actor's env step (after it read the actions)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sample_factory.algo.base import ActResult
from sample_factory.config import parse_cfg
from sample_factory.runner import Runner
from sample_factory.runtime.messages import ACTIONS_READY, Resend, decode

ARGV = [
    "--env=CartPole-v1",
    "--serial_mode=True",
    "--num_workers=1",
    "--num_envs_per_worker=4",
    "--worker_num_splits=1",
    "--decorrelate_envs_on_one_worker=False",
    "--use_rnn=True",
    "--rnn_size=8",
    "--encoder_mlp_layers=16",
    "--seed=5",
    "--experiment=x",
]


class Recorder:
    """Wraps a policy worker's algorithm: records every answer, and can run `during` inside the forward pass
    (another process acting while this worker computes) and disguise the answer (so two answers always differ)."""

    def __init__(self, worker, disguise: bool):
        self.algo_class, self.disguise = worker.algo_class, disguise
        self.answers: list[ActResult] = []
        self.during = None
        worker.algo_class = self

    def act(self, *args, **kwargs) -> ActResult:
        r = self.algo_class.act(*args, **kwargs)
        if self.disguise:
            r = ActResult(1 - r.actions, r.log_probs - 50.0, r.values + 50.0, r.new_rnn_states + 50.0)
        self.answers.append(r)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return r

    def values(self, *args, **kwargs):
        return self.algo_class.values(*args, **kwargs)


@pytest.fixture
def system(tmp_path):
    """Actor 0 and the policy workers of policy 0, initialized and wired with in-process channels."""

    def make(*extra: str):
        runner = Runner(parse_cfg([*ARGV, f"--train_dir={tmp_path}", *extra]))
        runner.setup()
        made.append(runner)
        comps = {c.key: c for c in runner.parts.components}
        actor = comps["actor", 0]
        workers = [comps["policy", (0, i)] for i in range(runner.cfg.policy_workers_per_policy)]
        for c in (*workers, actor):
            c.initialize()
        executed = []
        group = actor.splits[0].group
        original_step = group.step

        def step(actions):
            executed.append(np.array(actions, copy=True))  # what the envs got
            out = original_step(actions)
            if actor.during_step is not None:
                during, actor.during_step = actor.during_step, None
                during()
            return out

        group.step = step
        actor.during_step = None
        return runner, actor, workers, executed

    made: list[Runner] = []
    yield make
    for runner in made:
        runner.parts.summaries.close()
        runner.folder.lock.release()


def deliver(component) -> list:
    msgs = component.inbox.get_many(block=False)
    component.on_messages(msgs)
    return msgs


def assert_step_data_is(actor, answer: ActResult, executed: np.ndarray, t: int = 0) -> None:
    b, slot = actor.buffers, actor.splits[0].slot
    assert np.array_equal(b.actions[slot, t].numpy(), executed), "stored actions are not those the envs took"
    assert torch.equal(b.actions[slot, t], answer.actions), "stored actions are not the accepted answer's"
    assert torch.equal(b.log_probs[slot, t], answer.log_probs)
    assert torch.equal(b.values[slot, t], answer.values)
    assert torch.equal(b.rnn_states[slot, t + 1], answer.new_rnn_states)


@pytest.mark.timeout(60)
def test_duplicate_answered_by_a_second_worker_while_the_actor_steps(system):
    """Worker B passed the filter with the re-sent copy; before it writes, worker A's answer to the same request
    reaches the actor, which steps its envs with it and requests t + 1. B's late answer must not replace step t's
    actions, log-probs and values, nor the core state at t + 1 (the input of the request now outstanding)."""
    runner, actor, (a, b), executed = system("--policy_workers_per_policy=2")
    rec_a, rec_b = Recorder(a, disguise=False), Recorder(b, disguise=True)
    request = runner.parts.channels.policy[0].get_many(block=False)
    assert len(request) == 1
    duplicate = request * 2  # the original and the copy re-sent after a policy-worker restart
    a.on_messages(duplicate[:1])

    def actor_moves_on():  # A's answer arrives while B computes
        assert [decode(m).kind for m in deliver(actor)] == [ACTIONS_READY]

    rec_b.during = actor_moves_on
    b.on_messages(duplicate[1:])
    assert len(executed) == 1 and actor.splits[0].t == 1
    deliver(actor)  # B's answer reaches the actor late: it is ignored
    assert actor.splits[0].t == 1
    assert_step_data_is(actor, rec_a.answers[0], executed[0])
    assert len(rec_b.answers) == 1  # B did compute: the race happened


@pytest.mark.timeout(60)
def test_duplicate_in_a_later_batch_of_the_same_worker(system):
    """One worker gets the original and the re-sent copy in two batches; the second batch runs while the actor
    steps its envs with the first answer (it has read the actions but not yet sent the next request). The data of
    step t stay the first answer's."""
    runner, actor, (w,), executed = system()
    rec = Recorder(w, disguise=False)
    split = actor.splits[0]
    first = runner.parts.channels.policy[0].get_many(block=False)
    split.request_time -= 1.0  # waited long enough to be re-sent
    actor.handle(decode(Resend.wire()))
    copy = runner.parts.channels.policy[0].get_many(block=False)
    assert copy == first
    w.on_messages(first)
    rec.disguise = True  # a second answer always differs from the first

    def second_batch():
        w.on_messages(copy)

    actor.during_step = second_batch
    deliver(actor)
    assert len(executed) == 1 and split.t == 1
    deliver(actor)
    assert split.t == 1
    assert_step_data_is(actor, rec.answers[0], executed[0])


@pytest.mark.timeout(60)
def test_a_worker_answers_a_request_once(system):
    """Two copies of one request in one batch or in two batches: one answer, one forward pass."""
    runner, actor, (w,), executed = system()
    rec = Recorder(w, disguise=False)
    msgs = runner.parts.channels.policy[0].get_many(block=False)
    w.on_messages(msgs * 2)
    w.on_messages(msgs)
    assert len(rec.answers) == 1
    readies = [decode(m) for m in actor.inbox.get_many(block=False)]
    assert len(readies) == 1 and readies[0].splits == [(0, 1)]


@pytest.mark.timeout(60)
def test_requests_still_flow_after_duplicates(system):
    """The protocol keeps working: 3 env steps with a re-sent duplicate at every step, every step's data intact."""
    runner, actor, (a, b), executed = system("--policy_workers_per_policy=2")
    rec_a, rec_b = Recorder(a, disguise=False), Recorder(b, disguise=True)
    accepted = []
    for _ in range(3):
        req = runner.parts.channels.policy[0].get_many(block=False)
        assert len(req) == 1
        a.on_messages(req)
        accepted.append(rec_a.answers[-1])
        rec_b.during = lambda: deliver(actor)
        b.on_messages(req)
        deliver(actor)  # B's stale answer
    assert actor.splits[0].t == 3 and len(executed) == 3
    for t in range(3):
        assert_step_data_is(actor, accepted[t], executed[t], t)
