import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.model.actor_critic import ActorCritic
from sample_factory.runtime.shared_buffers import (
    SharedWeights,
    SlotPool,
    TrajectoryBuffers,
    make_buffer_spec,
    slots_per_split_for,
)

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DISCRETE = gym.spaces.Discrete(4)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def _cfg(*extra: str):
    argv = [
        "--env=SomeCustomEnv-v0",
        "--num_workers=2",
        "--num_envs_per_worker=4",
        "--worker_num_splits=2",
        "--rollout=5",
        "--batch_size=20",
        "--min_traj_buffers_per_worker=2",
        *extra,
    ]
    return parse_cfg(argv)


def _buffers(action_space=DISCRETE, rnn_size=0, share=False, obs_space=OBS_SPACE, cfg=None):
    spec = make_buffer_spec(cfg or _cfg(), obs_space, action_space, rnn_size)
    return TrajectoryBuffers(spec, share=share)


@pytest.mark.parametrize("action_space", [DISCRETE, BOX], ids=["discrete", "box"])
@pytest.mark.parametrize("rnn_size", [0, 6], ids=["no_rnn", "rnn"])
def test_allocation_shapes_match_docstring(action_space, rnn_size):
    cfg = _cfg()
    b = _buffers(action_space, rnn_size, cfg=cfg)
    spec = b.spec
    n = cfg.num_envs_per_worker // cfg.worker_num_splits
    T = cfg.rollout
    assert spec.agents_per_split == n == 2
    assert spec.rollout == T == 5
    assert spec.num_slots == cfg.num_workers * cfg.worker_num_splits * spec.slots_per_split
    S = spec.num_slots
    H = rnn_size if rnn_size > 0 else 1
    act_shape = () if isinstance(action_space, gym.spaces.Discrete) else (2,)
    act_dtype = torch.int64 if isinstance(action_space, gym.spaces.Discrete) else torch.float32
    expected = {
        "obs.obs": ((S, T + 1, n, 3), torch.float32),
        "rnn_states": ((S, T + 2, n, H), torch.float32),
        "is_first": ((S, T + 1, n), torch.bool),
        "actions": ((S, T + 1, n, *act_shape), act_dtype),
        "log_probs": ((S, T + 1, n), torch.float32),
        "values": ((S, T + 1, n), torch.float32),
        "policy_version": ((S, T + 1, n), torch.int64),
        "policy_id": ((S, T + 1, n), torch.int64),
        "rewards": ((S, T, n), torch.float32),
        "dones": ((S, T, n), torch.bool),
        "truncated": ((S, T, n), torch.bool),
        "final_values": ((S, T, n), torch.float32),
        "final_obs.obs": ((cfg.num_workers * cfg.worker_num_splits, n, 3), torch.float32),
        "active": ((S, T, n), torch.bool),
        "generation": ((cfg.num_workers,), torch.int64),
        "request_seq": ((cfg.num_workers, cfg.worker_num_splits), torch.int64),
        "learner_busy": ((cfg.num_policies,), torch.float64),
    }
    W, R = cfg.num_policies * cfg.policy_workers_per_policy, cfg.num_workers * cfg.worker_num_splits
    expected.update(
        {
            "answer_actions": ((W, R, n, *act_shape), act_dtype),
            "answer_log_probs": ((W, R, n), torch.float32),
            "answer_values": ((W, R, n), torch.float32),
            "answer_version": ((W, R), torch.int64),
            "answer_rnn_states": ((W, R, n, H), torch.float32),
            "answer_final_values": ((W, R, n), torch.float32),
        }
    )
    tensors = b.tensors()
    assert set(tensors) == set(expected)
    for k, (shape, dtype) in expected.items():
        assert tuple(tensors[k].shape) == shape, k
        assert tensors[k].dtype == dtype, k
        assert tensors[k].all() if k == "active" else not tensors[k].any(), k  # initialized
    assert b.nbytes() == sum(t.numel() * t.element_size() for t in tensors.values())


def test_obs_dtype_follows_space():
    b = _buffers(obs_space=gym.spaces.Box(0, 255, (7,), np.uint8))
    assert b.obs["obs"].dtype == torch.uint8 and b.final_obs["obs"].dtype == torch.uint8
    assert b.obs["obs"].shape[-1] == 7


def test_dict_obs_one_tensor_per_key():
    space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (3, 8, 8), np.uint8), "action_mask": gym.spaces.MultiBinary(2)}
    )
    b = _buffers(obs_space=space)
    assert set(b.obs) == {"image", "action_mask"}
    assert b.obs["image"].dtype == torch.uint8 and b.obs["image"].shape[-3:] == (3, 8, 8)
    assert b.obs["action_mask"].dtype == torch.int8
    batch = b.gather([0, 1])
    assert set(batch["obs"]) == {"image", "action_mask"}
    assert batch["obs"]["image"].shape == (2 * b.spec.agents_per_split, b.spec.rollout + 1, 3, 8, 8)


@pytest.mark.parametrize("share", [True, False])
def test_tensors_shared_when_requested(share):
    b = _buffers(rnn_size=4, share=share)
    for k, t in b.tensors().items():
        assert t.is_shared() is share, k


def test_slot_ownership_round_trip():
    cfg = _cfg()
    b = _buffers(cfg=cfg)
    spec = b.spec
    seen = []
    for w in range(cfg.num_workers):
        slots = b.slots_of_worker(w)
        assert len(slots) == spec.slots_per_worker
        for s in slots:
            assert b.worker_of_slot(s) == w
        seen += slots
    assert sorted(seen) == list(range(spec.num_slots))  # a partition: every slot has exactly one owner
    for s in range(spec.num_slots):
        assert s in b.slots_of_worker(b.worker_of_slot(s))


def _fill_distinct(b: TrajectoryBuffers) -> None:
    """Write values that encode their own index, so any index mix-up in gather shows."""
    g = torch.Generator().manual_seed(0)
    for t in b.tensors().values():
        if t.dtype == torch.bool:
            t.copy_(torch.rand(t.shape, generator=g) < 0.5)
        else:
            t.copy_(torch.arange(t.numel()).reshape(t.shape).to(t.dtype))


@pytest.mark.parametrize("action_space", [DISCRETE, BOX], ids=["discrete", "box"])
def test_gather_trajectory_layout(action_space):
    b = _buffers(action_space, rnn_size=3)
    _fill_distinct(b)
    n, T = b.spec.agents_per_split, b.spec.rollout
    slots = [5, 0, 3]
    out = b.gather(slots)
    assert set(out) == {*b.SLOT_KEYS, "obs"}
    pairs = [(k, getattr(b, k), out[k]) for k in b.SLOT_KEYS]
    pairs += [(f"obs.{k}", v, out["obs"][k]) for k, v in b.obs.items()]
    for k, src, x in pairs:
        assert x.shape == (len(slots) * n, *src.shape[1:2], *src.shape[3:]), k
        assert x.shape[1] in (T, T + 1, T + 2)
        for j in range(len(slots) * n):
            s, e = slots[j // n], j % n
            assert torch.equal(x[j], src[s, :, e]), (k, j)


def test_gather_only_the_requested_keys():
    b = _buffers(rnn_size=3)
    _fill_distinct(b)
    full = b.gather([2, 0], [torch.tensor([1]), torch.tensor([0, 1])])
    out = b.gather([2, 0], [torch.tensor([1]), torch.tensor([0, 1])], keys=("obs", "rewards", "dones"))
    assert set(out) == {"obs", "rewards", "dones"}
    assert all(torch.equal(out[k], full[k]) for k in ("rewards", "dones"))
    assert torch.equal(out["obs"]["obs"], full["obs"]["obs"])
    assert set(b.gather([1], keys=["actions"])) == {"actions"}  # no observations unless asked
    with pytest.raises(KeyError, match="reward"):
        b.gather([1], keys=["reward"])


def test_gather_returns_a_copy():
    b = _buffers()
    _fill_distinct(b)
    out = b.gather([1])
    before = b.rewards.clone()
    out["rewards"].add_(1000.0)
    assert torch.equal(b.rewards, before)


def test_gather_round_trip_writes_by_slot_and_env():
    # Write a known scalar into every (slot, env) column via the buffer indexing the actors use, then check the
    # trajectory index j = position_in_slots * n + env recovers it.
    b = _buffers()
    n = b.spec.agents_per_split
    for s in range(b.spec.num_slots):
        for e in range(n):
            b.rewards[s, :, e] = 100 * s + e
    slots = list(range(b.spec.num_slots))[::-1]
    out = b.gather(slots)["rewards"]
    for j in range(len(slots) * n):
        assert torch.all(out[j] == 100 * slots[j // n] + j % n)


def test_slot_pool_acquire_until_empty():
    owned = [4, 5, 6, 7]
    pool = SlotPool(owned)
    got = []
    while (s := pool.acquire()) is not None:
        got.append(s)
        assert len(got) <= len(owned)
    assert sorted(got) == owned  # each owned slot exactly once, no foreign slot
    assert pool.acquire() is None
    assert pool.acquire() is None


def test_slot_pool_release_restores():
    pool = SlotPool([0, 1, 2])
    a, b_ = pool.acquire(), pool.acquire()
    pool.release([a])
    got = []
    while (s := pool.acquire()) is not None:
        got.append(s)
    assert sorted(got) == sorted({0, 1, 2} - {b_})
    pool.release([b_, *got])
    assert sorted(pool.free) == [0, 1, 2]


def test_slot_pool_double_release_raises():
    pool = SlotPool([0, 1, 2])
    s = pool.acquire()
    pool.release([s])
    with pytest.raises(RuntimeError, match="twice"):
        pool.release([s])


def test_slot_pool_release_of_never_acquired_slot_raises():
    pool = SlotPool([0, 1, 2])
    with pytest.raises(RuntimeError):
        pool.release([1])


def test_slot_pool_foreign_release_on_full_pool_raises():
    pool = SlotPool([0, 1, 2])
    with pytest.raises(RuntimeError):
        pool.release([9])


def test_slot_pool_foreign_release_on_partial_pool_raises():
    pool = SlotPool([0, 1, 2])
    pool.acquire()
    with pytest.raises(RuntimeError):
        pool.release([9])


def test_slot_pool_duplicate_in_one_release_raises():
    pool = SlotPool([0, 1, 2, 3])
    s = pool.acquire()
    pool.acquire()
    with pytest.raises(RuntimeError):
        pool.release([s, s])


ASYNC_CASES = [
    [],
    ["--num_batches_per_epoch=3"],
    ["--batch_size=40", "--num_batches_per_epoch=2", "--num_minibatches_to_accumulate=4"],
    ["--num_workers=1", "--batch_size=200", "--num_minibatches_to_accumulate=0"],
    ["--num_workers=3", "--num_envs_per_worker=6", "--worker_num_splits=3", "--batch_size=5"],
    ["--min_traj_buffers_per_worker=7"],
]


@pytest.mark.parametrize("extra", ASYNC_CASES)
def test_async_pool_holds_an_iteration_while_every_split_is_in_progress(extra):
    cfg = _cfg(*extra)
    spec = make_buffer_spec(cfg, OBS_SPACE, DISCRETE, 0)
    splits = cfg.num_workers * cfg.worker_num_splits
    assert spec.slots_per_split == slots_per_split_for(cfg, spec.agents_per_split)
    assert spec.slots_per_split >= cfg.min_traj_buffers_per_worker
    iteration = cfg.batch_size * cfg.num_batches_per_epoch
    accumulate = cfg.batch_size * cfg.num_minibatches_to_accumulate
    usable = (spec.num_slots - splits) * spec.samples_per_slot  # one slot per split is being filled
    assert usable >= iteration
    assert usable >= iteration + accumulate


@pytest.mark.parametrize(
    "extra",
    [
        ["--batch_size=40"],  # 2 workers * 2 splits * 2 envs * 5 steps = 40 samples per round
        ["--batch_size=40", "--num_batches_per_epoch=3"],
        ["--batch_size=80", "--num_batches_per_epoch=2", "--min_traj_buffers_per_worker=9"],
    ],
)
def test_sync_pool_is_exactly_one_iteration(extra):
    cfg = _cfg("--async_rl=False", *extra)
    spec = make_buffer_spec(cfg, OBS_SPACE, DISCRETE, 0)
    assert spec.num_slots * spec.samples_per_slot == cfg.batch_size * cfg.num_batches_per_epoch


def _model(seed: int):
    torch.manual_seed(seed)
    cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--num_workers=1", "--rnn_size=8", "--encoder_mlp_layers=8"])
    return ActorCritic(cfg, OBS_SPACE, BOX)


def test_shared_weights_publish_then_load():
    src, dst = _model(0), _model(1)
    with torch.no_grad():
        src.log_std.add_(0.25)  # a non-default value in the separately-held parameter
    assert any(not torch.equal(a, b) for a, b in zip(src.parameters(), dst.parameters()))
    w = SharedWeights.for_model(src)
    assert w.flat.is_shared() and w.meta.is_shared()
    assert w.flat.shape == (2, sum(p.numel() for p in src.parameters()))
    w.publish(src, 17)
    assert w.load_into(dst) == 17
    for (name, a), b in zip(src.named_parameters(), dst.parameters()):
        assert torch.equal(a, b), name
    # Republishing a new version is seen by the next load.
    with torch.no_grad():
        for p in src.parameters():
            p.mul_(2.0)
    w.publish(src, 18)
    assert w.load_into(dst) == 18
    for a, b in zip(src.parameters(), dst.parameters()):
        assert torch.equal(a, b)


def test_shared_weights_travel_flat_between_nodes():
    """A sampler node gets the learner's weights as `snapshot()` (flat values and version) and republishes them
    with `publish_flat` (distributed/): its policy workers then load exactly the learner's model."""
    src, dst = _model(0), _model(1)
    learner_side = SharedWeights.for_model(src)
    learner_side.publish(src, 41)
    flat, version = learner_side.snapshot()
    assert version == 41 and flat.shape == learner_side.flat.shape[1:]
    node_side = SharedWeights.for_model(dst)
    node_side.publish_flat(flat.clone(), version)
    assert node_side.version == 41
    assert node_side.load_into(dst) == 41
    for (name, a), b in zip(src.named_parameters(), dst.parameters()):
        assert torch.equal(a, b), name


def test_shared_weights_reader_never_sees_a_torn_copy():
    """A writer thread publishes constant-valued weights (all params == version) as fast as it can; every load
    must give one version everywhere, never a mix of two."""
    src, dst = _model(0), _model(1)
    w = SharedWeights.for_model(src)
    stop = threading.Event()

    def writer():
        v = 0
        while not stop.is_set():
            v += 1
            with torch.no_grad():
                for p in src.parameters():
                    p.fill_(float(v))
            w.publish(src, v)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(300):
            version = w.load_into(dst)
            values = torch.cat([p.detach().reshape(-1) for p in dst.parameters()]).unique()
            assert values.numel() == 1 and (version == 0 or float(values[0]) == version)
    finally:
        stop.set()
        t.join()


def test_shared_weights_include_float_buffers():
    def net(seed):
        torch.manual_seed(seed)
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
        m.train()
        m(torch.randn(16, 3) * (seed + 1))  # moves running stats
        return m

    src, dst = net(0), net(1)
    bn_src, bn_dst = src[1], dst[1]
    assert not torch.equal(bn_src.running_mean, bn_dst.running_mean)
    w = SharedWeights.for_model(src)
    w.publish(src, 3)
    assert w.load_into(dst) == 3
    assert torch.equal(bn_src.running_mean, bn_dst.running_mean)
    assert torch.equal(bn_src.running_var, bn_dst.running_var)
    for a, b in zip(src.parameters(), dst.parameters()):
        assert torch.equal(a, b)


def test_shared_weights_keep_float64_normalizer_statistics_exact():
    """Normalizer statistics are float64 (a count past 2^24 is not exact in float32): they reach the policy
    workers at full precision."""

    def model(seed):
        torch.manual_seed(seed)
        cfg = parse_cfg(["--env=SomeCustomEnv-v0", "--rnn_size=8", "--encoder_mlp_layers=8", "--normalize_input=True"])
        return ActorCritic(cfg, OBS_SPACE, BOX)

    src, dst = model(0), model(1)
    f64 = {n: b for n, b in src.named_buffers() if b.dtype == torch.float64}
    assert f64, "the model has float64 normalizer buffers"
    with torch.no_grad():
        for b in f64.values():
            b.fill_(2**24 + 1).add_(1 / 3)
    w = SharedWeights.for_model(src)
    w.publish(src, 1)
    w.load_into(dst)
    got = dict(dst.named_buffers())
    for n, b in f64.items():
        assert torch.equal(got[n], b), n
    for a, b in zip(src.parameters(), dst.parameters()):
        assert torch.equal(a, b)


def test_the_slot_tensors_are_named_once_for_the_buffers_and_the_algorithms():
    from sample_factory.algo.base import TRAJECTORY_KEYS
    from sample_factory.algo.dqn import DQNAlgorithm
    from sample_factory.algo.registry import ALGORITHMS

    assert TrajectoryBuffers.SLOT_KEYS is TRAJECTORY_KEYS  # the layout's one list of names
    b = _buffers(rnn_size=3)
    assert all(getattr(b, k).shape[0] == b.spec.num_slots for k in TRAJECTORY_KEYS)
    for algo in ALGORITHMS.values():
        assert set(algo.required_buffers) <= {*TRAJECTORY_KEYS, "obs"}, algo
    # DQN: feed-forward, and replay makes no lag correction
    assert set(DQNAlgorithm.required_buffers) == {"obs", *TRAJECTORY_KEYS} - {"rnn_states", "policy_version"}
