"""What a policy worker hands the algorithm and where it writes the answers, for a batch of requests from several
actors and splits. The components run in this process (serial mode), wired with in-process channels."""

from __future__ import annotations

import pytest
import torch

from sample_factory.algo.dqn import q_values
from sample_factory.config import parse_cfg
from sample_factory.runner import Runner
from sample_factory.runtime.messages import decode
from sample_factory.runtime.shared_buffers import SharedWeights

WORKERS, SPLITS, ENVS_PER_SPLIT = 2, 2, 3


@pytest.fixture
def made():
    """Runners set up by a test, closed after it."""
    runners: list[Runner] = []
    yield runners
    for runner in runners:
        runner.parts.summaries.close()
        runner.folder.lock.release()


def pending_batch(made: list[Runner], tmp_path, algo: str, *extra: str):
    """(policy worker, the messages of every split's first request): the components of a serial-mode run."""
    argv = [
        "--env=CartPole-v1",
        f"--algo={algo}",
        "--serial_mode=True",
        f"--num_workers={WORKERS}",
        f"--worker_num_splits={SPLITS}",
        f"--num_envs_per_worker={SPLITS * ENVS_PER_SPLIT}",
        "--decorrelate_envs_on_one_worker=False",
        "--seed=3",
        "--experiment=x",
        f"--train_dir={tmp_path / algo}",
        "--device=cpu",  # (the tests compare with what act returned on the host; a GPU test passes --device=gpu)
        *extra,
    ]
    runner = Runner(parse_cfg(argv))
    runner.setup()
    made.append(runner)
    comps = {c.key: c for c in runner.parts.components}
    worker = comps["policy", (0, 0)]
    for w in range(WORKERS):
        comps["actor", w].initialize()  # each split sends its first request
    worker.initialize()
    msgs = runner.parts.channels.policy[0].get_many(block=False)
    assert len(msgs) == WORKERS * SPLITS
    return worker, msgs


@pytest.fixture
def served(tmp_path, made):
    """(policy worker, requests of one batch, what act() got and returned) for --algo=... ."""

    def make(algo: str, mode: str = "eager"):
        worker, msgs = pending_batch(made, tmp_path, algo)
        calls = []
        act = worker.algo_class.act

        def recording_act(*args, **kwargs):
            result = act(*args, **kwargs)
            calls.append((kwargs.get("agent_rank"), result))
            return result

        recording = type(
            "Recording",
            (),
            {
                "act": staticmethod(recording_act),
                "values": worker.algo_class.values,
                "uses_agent_rank": worker.agent_ranks,
            },
        )
        worker.algo_class = recording  # and the batched inference's
        worker.inference.mode = mode  # "padded": the CUDA graphs' bucket path, without graphs
        worker.inference.sizes = [16]  # (padded) a bucket larger than the batch of 12 rows
        requests = [decode(m) for m in msgs]
        worker.on_messages(msgs)
        assert len(calls) == 1, "one batch for every pending request"
        return worker, requests, calls[0]

    return make


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["eager", "padded"])
@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_answers_land_in_each_requests_split_row(served, algo, mode):
    worker, requests, (_, result) = served(algo, mode)
    assert len(result.actions) == (16 if mode == "padded" else WORKERS * SPLITS * ENVS_PER_SPLIT)  # 12 rows
    b, w, n = worker.buffers, worker.answer_area, ENVS_PER_SPLIT
    for k, r in enumerate(requests):  # rows of the batch in request order
        row = r.actor_idx * SPLITS + r.split_idx
        assert torch.equal(b.answer_actions[w, row], result.actions[k * n : (k + 1) * n])
        assert torch.equal(b.answer_log_probs[w, row], result.log_probs[k * n : (k + 1) * n])
        assert torch.equal(b.answer_values[w, row], result.values[k * n : (k + 1) * n])
        assert b.answer_version[w, row].item() == worker.version


@pytest.mark.timeout(60)
def test_agent_ranks_only_for_algorithms_that_read_them(served):
    _, _, (rank, _) = served("APPO")
    assert rank is None  # APPO samples from its distribution: no per-agent exploration to compute
    _, requests, (rank, _) = served("DQN")
    num_agents = WORKERS * SPLITS * ENVS_PER_SPLIT
    expected = [
        ((r.actor_idx * SPLITS + r.split_idx) * ENVS_PER_SPLIT + c) / (num_agents - 1)
        for r in requests
        for c in range(ENVS_PER_SPLIT)
    ]
    assert torch.allclose(rank, torch.tensor(expected))
    assert rank.min().item() >= 0.0 and rank.max().item() <= 1.0


@pytest.mark.timeout(60)
def test_sde_matrices_are_each_agents_own(made, tmp_path):
    """--use_sde: act gets each row's agent's exploration matrix, from the worker's table, in request order."""
    worker, msgs = pending_batch(made, tmp_path, "APPO", "--env=Pendulum-v1", "--use_sde=True", "--use_rnn=False")
    got = []
    act = worker.algo_class.act

    def recording_act(*args, **kwargs):
        got.append(kwargs.get("sde_eps").clone())
        return act(*args, **kwargs)

    worker.algo_class = type("Recording", (), {"act": staticmethod(recording_act), "values": worker.algo_class.values})
    requests = [decode(m) for m in msgs]
    worker.on_messages(msgs)
    agents = torch.tensor(
        [(r.actor_idx * SPLITS + r.split_idx) * ENVS_PER_SPLIT + c for r in requests for c in range(ENVS_PER_SPLIT)]
    )
    assert len(got) == 1 and got[0].shape == (len(agents), *worker.model.sde_shape)
    assert torch.equal(got[0], worker.sde.eps[agents])
    assert worker.sde.period == worker.cfg.rollout  # --sde_sample_freq=-1
    assert (worker.sde.age[agents] == 1).all()
    assert len({tuple(e.flatten().tolist()) for e in got[0]}) == len(agents)  # a matrix of its own per agent


def test_a_restarted_worker_draws_new_sde_matrices(made, tmp_path):
    """A policy worker restarted (init in a new process) once the learner has published newer weights does not
    repeat the matrices it started with; at the same version (a fresh run of the same seed) it draws the same."""
    worker, _ = pending_batch(made, tmp_path, "APPO", "--env=Pendulum-v1", "--use_sde=True", "--use_rnn=False")
    agents = torch.arange(worker.num_agents)
    first = worker.sde.draw(agents)
    worker.init()
    assert torch.equal(worker.sde.draw(agents), first)
    worker.weights.publish(worker.model, worker.version + 7)
    worker.init()
    assert not torch.equal(worker.sde.draw(agents), first)


@pytest.mark.timeout(60)
def test_new_weights_are_copied_into_the_models_own_tensors(served):
    """The inference step's CUDA graphs read the model's tensors by address: a weight update must copy into them,
    never replace them (the graphs would go on computing with the old weights)."""
    worker, _, _ = served("APPO")
    tensors = SharedWeights.tensors_of(worker.model)
    addresses = [t.data_ptr() for t in tensors]
    new = [torch.randn_like(t) for t in tensors]
    flat = torch.cat([t.reshape(-1) for t in new]).to(worker.weights.flat.dtype)
    worker.weights.publish_flat(flat, worker.version + 1)
    version = worker.version
    worker._maybe_update_weights()
    assert worker.version == version + 1
    tensors = SharedWeights.tensors_of(worker.model)
    assert [t.data_ptr() for t in tensors] == addresses
    assert all(torch.equal(t, n) for t, n in zip(tensors, new, strict=True))


@pytest.mark.timeout(120)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_cuda_graphs_answer_every_request(made, tmp_path, algo):
    """On CUDA the worker replays a captured graph; each answer is what the eager model gives that request's rows:
    the log-prob (APPO) or Q (DQN) of the answered action."""
    worker, msgs = pending_batch(made, tmp_path, algo, "--device=gpu", "--inference_cuda_graphs=True")
    worker.on_messages(msgs)
    assert worker.inference.mode == "graphs" and worker.inference.captures == 1, worker.inference.failure
    b, w, model = worker.buffers, worker.answer_area, worker.model
    for r in map(decode, msgs):
        row = r.actor_idx * SPLITS + r.split_idx
        obs = {k: v[r.slot, r.t].to(worker.device) for k, v in b.obs.items()}
        actions = b.answer_actions[w, row].to(worker.device)
        with torch.inference_mode():
            params, values, _ = model.forward_step(obs, None)
            if algo == "APPO":
                want = model.distribution(params).log_prob(actions)
            else:
                q = q_values(params.float(), values.float(), worker.cfg.dueling)
                want = q.gather(-1, actions.long().view(-1, 1)).squeeze(-1)
        torch.testing.assert_close(b.answer_log_probs[w, row], want.cpu(), atol=1e-4, rtol=1e-4)
