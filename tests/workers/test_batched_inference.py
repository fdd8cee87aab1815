"""The policy worker's inference step (workers/batched_inference.py): buckets, padding, staging and slicing give the
same answers as one direct call of the algorithm's `act` on the unpadded batch; failures fall back to eager.

The CPU tests run the bucket path without graphs (mode "padded": what a graph replays); the CUDA tests (skipped
without a GPU) capture and replay graphs: `pytest tests/workers/test_batched_inference.py -k cuda` (~20 s).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.algo.appo import APPOAlgorithm
from sample_factory.algo.dqn import DQNAlgorithm
from sample_factory.config import parse_cfg
from sample_factory.envs.spaces import ACTION_MASK_KEY
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runtime.shared_buffers import SharedWeights
from sample_factory.workers.batched_inference import (
    MAX_BUCKET,
    BatchedInference,
    bucket_sizes,
    obs_spec_of,
    resolve_mode,
)

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
A = 5  # discrete actions
OBS = 6  # float observation size


def setup(
    algo: str = "APPO",
    rnn: bool = False,
    mask: bool = True,
    device: str = "cpu",
    atari: bool = False,
    extra: tuple[str, ...] = (),
):
    """(cfg, model, algo class, obs spec) for a Dict observation {obs [6] float, action_mask [5]} (or Atari frames)."""
    env = "atari_pong" if atari else "CartPole-v1"
    argv = [f"--env={env}", f"--algo={algo}", f"--use_rnn={rnn}", "--rnn_size=16", "--rnn_num_layers=2", *extra]
    cfg = parse_cfg(argv)
    if atari:
        spaces = {"obs": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)}
    else:
        spaces = {"obs": gym.spaces.Box(-1, 1, (OBS,), np.float32)}
    if mask:
        spaces[ACTION_MASK_KEY] = gym.spaces.Box(0, 1, (A,), np.int8)
    obs_space = gym.spaces.Dict(spaces)
    torch.manual_seed(0)
    model = ActorCritic(cfg, obs_space, gym.spaces.Discrete(A)).to(device).eval()
    with torch.no_grad():  # well-separated logits: argmax does not flip on rounding differences between batch sizes
        model.policy_head.weight.normal_(0, 1.0)
    spec = {k: (sp.shape, torch.from_numpy(np.zeros(1, sp.dtype)).dtype) for k, sp in spaces.items()}
    algo_cls = {"APPO": APPOAlgorithm, "DQN": DQNAlgorithm}[algo]
    return cfg, model, algo_cls, spec


def fill(x, seed: int, masked: bool = True) -> None:
    """Random inputs into staging rows x; the mask forbids action 0 in every row (and 1 in odd rows)."""
    g = torch.Generator().manual_seed(seed)
    n = x.obs["obs"].shape[0]
    if x.obs["obs"].dtype == torch.uint8:
        x.obs["obs"].copy_(torch.randint(0, 256, x.obs["obs"].shape, generator=g, dtype=torch.uint8))
    else:
        x.obs["obs"].copy_(torch.rand(x.obs["obs"].shape, generator=g) * 2 - 1)
    if ACTION_MASK_KEY in x.obs:
        m = torch.ones(n, A, dtype=x.obs[ACTION_MASK_KEY].dtype)
        if masked:
            m[:, 0] = 0
            m[1::2, 1] = 0
        x.obs[ACTION_MASK_KEY].copy_(m)
    if x.rnn_states is not None:
        x.rnn_states.copy_(torch.randn(x.rnn_states.shape, generator=g))
        x.is_first.copy_(torch.rand(n, generator=g) < 0.3)
    if x.agent_rank is not None:
        x.agent_rank.copy_(torch.rand(n, generator=g))


def direct_act(cfg, model, algo_cls, x, deterministic: bool):
    """The unpadded reference: the algorithm's act called directly on the batch, without buckets or staging."""
    h = None
    if x.rnn_states is not None:
        h = x.rnn_states.clone()
        h[x.is_first] = 0
    obs = {k: v.clone() for k, v in x.obs.items()}
    return algo_cls.act(cfg, model, obs, h, obs.get(ACTION_MASK_KEY), deterministic, agent_rank=x.agent_rank)


def assert_same(got, want, atol: float = 1e-5) -> None:
    for g, w in zip(got, want, strict=True):
        assert (g is None) == (w is None)
        if g is not None:
            assert g.shape == w.shape
            if g.dtype.is_floating_point:
                torch.testing.assert_close(g.float().cpu(), w.float().cpu(), atol=atol, rtol=atol)
            else:
                assert torch.equal(g.cpu(), w.cpu())


def test_buckets_are_powers_of_two_up_to_the_largest_batch():
    assert bucket_sizes(96) == [8, 16, 32, 64, 96]
    assert bucket_sizes(64) == [8, 16, 32, 64]
    assert bucket_sizes(5) == [5]
    assert bucket_sizes(10**6)[-1] == MAX_BUCKET


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("algo", "rnn"), [("APPO", False), ("APPO", True), ("DQN", False)])
def test_padded_buckets_give_the_unpadded_answers(algo, rnn):
    """Every batch size, in an order that leaves stale rows from a larger batch in the bucket's padding."""
    cfg, model, algo_cls, spec = setup(algo, rnn)
    inference = BatchedInference(cfg, model, algo_cls, spec, torch.device("cpu"), 40, "padded", print)
    assert inference.sizes == [8, 16, 32, 40]
    for seed, n in enumerate([40, 33, 16, 9, 1, 8, 12, 3]):
        x = inference.staging(n)
        fill(x, seed)
        want = direct_act(cfg, model, algo_cls, x, deterministic=True)
        got = inference.run(n, deterministic=True)
        assert_same(got, want)
        assert got.actions.shape[0] == n
        assert (got.actions != 0).all() and (got.actions[1::2] != 1).all(), "a masked action was chosen"
    assert {rows for rows, _ in inference._buckets} == {40, 16, 8}  # one bucket per size used


def sde_inference(device: str, mode: str, rows: int = 24, notes=None) -> BatchedInference:
    """Batched inference for a --use_sde model with Box actions (2 dimensions) and observations {obs [6]}."""
    cfg = parse_cfg(["--env=Pendulum-v1", "--use_sde=True", "--use_rnn=False"])
    obs_space = gym.spaces.Dict({"obs": gym.spaces.Box(-1, 1, (OBS,), np.float32)})
    torch.manual_seed(0)
    model = ActorCritic(cfg, obs_space, gym.spaces.Box(-1, 1, (2,), np.float32)).to(device).eval()
    spec = {"obs": ((OBS,), torch.float32)}
    log = print if notes is None else notes.append
    return BatchedInference(cfg, model, APPOAlgorithm, spec, torch.device(device), rows, mode, log)


def fill_sde(x, seed: int) -> None:
    fill(x, seed)
    x.sde_eps.copy_(torch.randn(x.sde_eps.shape, generator=torch.Generator().manual_seed(seed)))


@pytest.mark.timeout(60)
def test_padded_buckets_pass_each_rows_sde_matrix():
    """--use_sde: the rows' exploration matrices are an input like the observations; with them the action is a
    function of the inputs (mean + held-matrix noise), so the padded answer equals the direct one while sampling."""
    inference = sde_inference("cpu", "padded")
    cfg, model = inference.cfg, inference.model
    for seed, n in enumerate([24, 5, 13]):
        x = inference.staging(n)
        fill_sde(x, seed)
        want = APPOAlgorithm.act(cfg, model, {"obs": x.obs["obs"].clone()}, None, None, False, sde_eps=x.sde_eps)
        assert_same(inference.run(n, deterministic=False), want)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_padded_sampling_varies_and_respects_the_mask(algo):
    extra = ("--apex_epsilon=1.0",) if algo == "DQN" else ()  # DQN: every action random
    cfg, model, algo_cls, spec = setup(algo, extra=extra)
    with torch.no_grad():
        model.policy_head.weight.zero_()  # uniform policy: APPO samples every allowed action
    inference = BatchedInference(cfg, model, algo_cls, spec, torch.device("cpu"), 64, "padded", print)
    x = inference.staging(30)
    fill(x, 0)
    draws = torch.stack([inference.run(30, deterministic=False).actions.clone() for _ in range(20)])  # [20, 30]
    assert not (draws == draws[0]).all(), "every draw the same"
    assert (draws != 0).all() and (draws[:, 1::2] != 1).all(), "a masked action was sampled"
    assert set(draws.unique().tolist()) == {1, 2, 3, 4}


@pytest.mark.timeout(60)
def test_eager_mode_converts_outputs_and_leaves_larger_batches_unpadded():
    cfg, model, algo_cls, spec = setup("APPO", rnn=True)
    dtypes = {"actions": torch.int32, "log_probs": torch.float64}
    inference = BatchedInference(cfg, model, algo_cls, spec, torch.device("cpu"), 16, "eager", print, dtypes)
    assert inference.bucket_for(3) is None
    x = inference.staging(20)  # more rows than expected: the staging grows
    fill(x, 1)
    want = direct_act(cfg, model, algo_cls, x, deterministic=True)
    got = inference.run(20, deterministic=True)
    assert got.actions.dtype == torch.int32 and got.log_probs.dtype == torch.float64
    assert_same(got, want)
    padded = BatchedInference(cfg, model, algo_cls, spec, torch.device("cpu"), 16, "padded", print)
    assert padded.bucket_for(17) is None  # beyond the largest bucket: eager
    fill(padded.staging(20), 1)
    assert_same(padded.run(20, deterministic=True), want)


@pytest.mark.timeout(60)
def test_failed_capture_falls_back_to_eager_with_one_note():
    """Graphs on a CPU device cannot be captured: one note, the right answers, eager from then on."""
    cfg, model, algo_cls, spec = setup("APPO")
    notes: list[str] = []
    inference = BatchedInference(cfg, model, algo_cls, spec, torch.device("cpu"), 32, "graphs", notes.append)
    for n in (5, 20, 5):
        x = inference.staging(n)
        fill(x, n)
        assert_same(inference.run(n, deterministic=True), direct_act(cfg, model, algo_cls, x, deterministic=True))
    assert len(notes) == 1 and "inferring eagerly" in notes[0] and notes[0] == inference.failure, notes
    assert inference.mode == "eager" and inference.captures == 0


def test_mode_option():
    cfg = parse_cfg(["--env=CartPole-v1"])
    notes: list[str] = []
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert cfg.inference_cuda_graphs == "auto"
    assert resolve_mode(cfg, cpu, notes.append) == "eager" and not notes
    assert resolve_mode(cfg, gpu, notes.append) == "eager"  # auto: feed-forward models infer eagerly (no gain measured)
    rnn = ["--env=CartPole-v1", "--use_rnn=True"]
    assert resolve_mode(parse_cfg(rnn), gpu, notes.append) == "graphs"
    assert resolve_mode(parse_cfg([*rnn, "--torch_compile_worker=True"]), gpu, notes.append) == "eager"
    assert resolve_mode(parse_cfg(["--env=CartPole-v1", "--inference_cuda_graphs=True"]), gpu, notes.append) == "graphs"
    assert resolve_mode(parse_cfg(["--env=CartPole-v1", "--inference_cuda_graphs=False"]), gpu, notes.append) == "eager"
    assert resolve_mode(parse_cfg(["--env=CartPole-v1", "--inference_cuda_graphs=True"]), cpu, notes.append) == "eager"
    assert len(notes) == 1 and "needs a CUDA device" in notes[0]


def test_obs_spec_of_slot_tensors():
    obs = {"obs": torch.zeros(3, 5, 2, 4, 84, 84, dtype=torch.uint8), ACTION_MASK_KEY: torch.zeros(3, 5, 2, A)}
    assert obs_spec_of(obs, leading=3) == {"obs": ((4, 84, 84), torch.uint8), ACTION_MASK_KEY: ((A,), torch.float32)}


# ---- CUDA: graphs captured and replayed ----------------------------------------------------------------------------


def cuda_runner(algo: str = "APPO", rnn: bool = False, mask: bool = True, atari: bool = False, extra=(), rows=64):
    cfg, model, algo_cls, spec = setup(algo, rnn, mask, "cuda", atari, extra)
    notes: list[str] = []
    graphs = BatchedInference(cfg, model, algo_cls, spec, torch.device("cuda"), rows, "graphs", notes.append)
    eager = BatchedInference(cfg, model, algo_cls, spec, torch.device("cuda"), rows, "eager", notes.append)
    return graphs, eager, notes


def both(graphs, eager, n: int, seed: int, deterministic: bool = True):
    """(graph replay's outputs, eager outputs) on the same random batch of n rows (copies: the buffers are reused)."""
    out = []
    for r in (graphs, eager):
        fill(r.staging(n), seed)
        out.append([None if t is None else t.clone() for t in r.run(n, deterministic)])
    return out


@cuda
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("algo", "rnn", "atari"), [("APPO", False, True), ("APPO", True, False), ("DQN", False, False)]
)
def test_cuda_graph_replay_equals_eager(monkeypatch, algo, rnn, atari):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # same math in both: fp32 convolutions
    graphs, eager, notes = cuda_runner(algo, rnn, mask=not atari, atari=atari)
    for seed, n in enumerate([5, 64, 16, 9, 64, 3]):
        got, want = both(graphs, eager, n, seed)
        assert_same(got, want, atol=1e-4)
    assert not notes and graphs.mode == "graphs" and graphs.captures == 3, notes  # buckets 8, 16 and 64


@cuda
@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", ["APPO", "DQN"])
def test_cuda_graph_sampling_varies_between_replays(algo):
    graphs, _, notes = cuda_runner(algo, extra=("--apex_epsilon=1.0",) if algo == "DQN" else ())
    with torch.no_grad():
        graphs.model.policy_head.weight.zero_()
    fill(graphs.staging(48), 0)
    draws = torch.stack([graphs.run(48, deterministic=False).actions.clone() for _ in range(20)])  # [20, 48]
    assert not notes and graphs.captures == 1, notes
    assert not (draws == draws[0]).all(), "replays drew the same actions: the graph's random numbers are frozen"
    assert all(len(set(draws[:, i].tolist())) > 1 for i in range(48)), "a row drew the same action 20 times"
    assert (draws != 0).all() and (draws[:, 1::2] != 1).all(), "a masked action was sampled"


@cuda
@pytest.mark.timeout(120)
def test_cuda_graph_replay_with_sde_matrices_equals_eager():
    notes: list[str] = []
    graphs, eager = sde_inference("cuda", "graphs", 64, notes), sde_inference("cuda", "eager", 64, notes)
    for seed, n in enumerate([5, 64, 16, 9, 64, 3]):
        out = []
        for r in (graphs, eager):
            fill_sde(r.staging(n), seed)
            out.append([None if t is None else t.clone() for t in r.run(n, deterministic=False)])
        assert_same(*out, atol=1e-4)
    assert not notes and graphs.captures == 3, notes  # buckets 8, 16 and 64


@cuda
@pytest.mark.timeout(120)
def test_cuda_graph_reads_weights_loaded_in_place(monkeypatch):
    """New weights published by the learner and loaded as the policy worker loads them reach the replayed graph."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    graphs, eager, notes = cuda_runner(atari=True, mask=False)
    before, _ = both(graphs, eager, 16, 0)
    learner_model = ActorCritic(
        graphs.cfg, gym.spaces.Dict({"obs": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)}), gym.spaces.Discrete(A)
    )
    with torch.no_grad():
        for p in learner_model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    weights = SharedWeights.for_model(learner_model)
    weights.publish(learner_model, 7)
    assert weights.load_into(graphs.model) == 7
    after, want = both(graphs, eager, 16, 0)
    assert_same(after, want, atol=1e-4)
    assert not torch.allclose(after[1], before[1]), "the graph still computes with the old weights"
    assert not notes and graphs.captures == 1


@cuda
@pytest.mark.timeout(120)
def test_cuda_graph_capture_failure_falls_back_to_eager():
    """An act that reads a value back to the host cannot be captured: one note, eager answers."""
    graphs, eager, notes = cuda_runner()

    class Syncing(graphs.algo_class):
        @classmethod
        def act(cls, cfg, model, obs, h, mask, deterministic, agent_rank=None):
            result = super().act(cfg, model, obs, h, mask, deterministic, agent_rank)
            float(result.values.sum())  # a host sync: not allowed while capturing
            return result

    graphs.algo_class = eager.algo_class = Syncing
    got, want = both(graphs, eager, 10, 0)
    assert_same(got, want, atol=1e-4)
    assert graphs.mode == "eager" and len(notes) == 1 and "capturing batch size 16" in notes[0], notes
    got, want = both(graphs, eager, 30, 1)  # and stays eager, without another note
    assert_same(got, want, atol=1e-4)
    assert len(notes) == 1
    # the failed capture gave the CUDA generator back: sampling (eagerly) works, here and anywhere in the process
    assert graphs.run(30, deterministic=False).actions.shape == (30,)
    assert torch.rand(3, device="cuda").shape == (3,)
