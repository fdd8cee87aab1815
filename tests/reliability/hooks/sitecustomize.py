"""Test-only fault hooks (tests/reliability/test_process_faults.py): with this folder first on PYTHONPATH, Python
imports this module at start-up in every process of a run (the runner, the fork server and through it every
component). Each hook is off unless its environment variable is set:

- SF_TEST_SLOW_SGD_STEP_SEC=s: every APPO SGD step takes s seconds longer (a big model on a slow machine).
- SF_TEST_CHECK_ECHOED_ACTIONS=1: before training, the learner checks that every stored action is the one the env
  took (envs of fault_envs.EchoAction-v0 write it into the next observation) and raises if not.
- SF_TEST_HOLD_ANSWER_FILE=path: policy worker (0, 0) holds its 50th batch: it computes the answer, creates `path`,
  waits until an actor has moved on from one of the batch's requests (answered by another policy worker), and only
  then writes its now late answer (and creates `path`.late), like a worker that was descheduled at the worst moment.
  Once per run (a replacement of the worker does not hold again); it gives up holding after 30 s.
- SF_TEST_SLOW_SAVE_SEC=s: every checkpoint write takes s seconds longer (a large replay buffer on a slow disk).
- SF_TEST_SLOW_DQN_STEP_SEC=s: every DQN SGD step takes s seconds longer (a conv net on a loaded CPU).
- SF_TEST_ENV_GROUP_STEP_SEC=s: every step of an actor's env group (a split's envs, one by one or batched) takes s
  seconds longer, as if the envs were simulators that wait. The fault tests' runs are paced this way by default
  (tests/reliability/conftest.py): what they check is how the run handles a fault, not how fast it samples, and a
  run sampling at full speed for its whole --train_for_seconds spends CPU that a slower VM needs for the other tests.
"""

import os


def _slow_down(owner, name: str, variable: str) -> None:
    """owner.name (a method or module function) sleeps float($variable) seconds before it runs."""
    import functools
    import time

    delay, original = float(os.environ[variable]), getattr(owner, name)

    @functools.wraps(original)
    def slow(*args, **kwargs):
        time.sleep(delay)
        return original(*args, **kwargs)

    setattr(owner, name, slow)


if os.environ.get("SF_TEST_ENV_GROUP_STEP_SEC"):
    from sample_factory.envs.env_group import EnvGroup
    from sample_factory.envs.envpool_group import EnvPoolGroup  # imports envpool only when one is made
    from sample_factory.envs.vector_group import VectorEnvGroup

    for group in (EnvGroup, VectorEnvGroup, EnvPoolGroup):  # every env_backend's group
        _slow_down(group, "step", "SF_TEST_ENV_GROUP_STEP_SEC")

if os.environ.get("SF_TEST_SLOW_DQN_STEP_SEC"):
    from sample_factory.algo.dqn import DQNAlgorithm

    _slow_down(DQNAlgorithm, "sgd_step", "SF_TEST_SLOW_DQN_STEP_SEC")

if os.environ.get("SF_TEST_SLOW_SAVE_SEC"):
    from sample_factory.experiment import checkpoints

    _slow_down(checkpoints, "_atomic_save", "SF_TEST_SLOW_SAVE_SEC")

if os.environ.get("SF_TEST_SLOW_SGD_STEP_SEC"):
    from sample_factory.algo.appo import APPOAlgorithm

    _slow_down(APPOAlgorithm, "minibatch_loss", "SF_TEST_SLOW_SGD_STEP_SEC")

if os.environ.get("SF_TEST_CHECK_ECHOED_ACTIONS"):
    from sample_factory.algo.appo import APPOAlgorithm

    _train = APPOAlgorithm.train

    def _checked_train(self, batch, policy_version, policy_id=None):
        T = batch["dones"].shape[1]
        took = batch["obs"]["obs"][:, 1:, -1]  # [M, T] the action the env took at t, echoed in obs t + 1
        stored = batch["actions"][:, :T].float()  # [M, T]
        wrong = ~batch["dones"] & (took != stored)  # after an episode end obs t + 1 starts the next one
        if wrong.any():
            raise RuntimeError(f"{int(wrong.sum())} stored actions are not the actions the envs took")
        return _train(self, batch, policy_version, policy_id)

    APPOAlgorithm.train = _checked_train

if os.environ.get("SF_TEST_HOLD_ANSWER_FILE"):
    import time

    from sample_factory.workers.policy_worker import PolicyWorker

    _serve = PolicyWorker._serve

    class _HeldAnswer:
        def __init__(self, worker, requests):
            self.algo, self.worker, self.requests = worker.algo_class, worker, requests

        def act(self, *args, **kwargs):
            answer = self.algo.act(*args, **kwargs)
            open(os.environ["SF_TEST_HOLD_ANSWER_FILE"], "w").close()
            seq, deadline = self.worker.request_seq, time.monotonic() + 30
            while all(seq[r.actor_idx, r.split_idx] == r.seq for r in self.requests) and time.monotonic() < deadline:
                time.sleep(0.002)
            if time.monotonic() < deadline:  # the answer is late indeed: the test can tell the fault happened
                open(os.environ["SF_TEST_HOLD_ANSWER_FILE"] + ".late", "w").close()
            return answer

        def values(self, *args, **kwargs):
            return self.algo.values(*args, **kwargs)

    def _serve_holding_once(self, requests):
        self.hook_batches = getattr(self, "hook_batches", 0) + 1
        if self.index != (0, 0) or self.hook_batches != 50 or os.path.exists(os.environ["SF_TEST_HOLD_ANSWER_FILE"]):
            return _serve(self, requests)  # once per run: not in the replacement of a worker that held
        algo_class, self.algo_class = self.algo_class, _HeldAnswer(self, requests)
        try:
            return _serve(self, requests)
        finally:
            self.algo_class = algo_class

    PolicyWorker._serve = _serve_holding_once
