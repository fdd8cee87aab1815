"""Replay buffer math (algo/replay.py): sum-tree sampling proportions, importance weights, n-step targets against a
brute-force reference (episode ends and truncations inside the window, windows cut at the rollout end), ring
overwrite, priority updates, state round trip."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from sample_factory.algo.replay import (
    ReplayBuffer,
    SumTree,
    annealed_beta,
    importance_weights,
    nstep_targets,
)


def test_sum_tree_samples_in_proportion_to_priorities():
    rng = np.random.default_rng(0)
    tree = SumTree(10)  # not a power of two: padded leaves have priority 0
    prio = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 0.5, 0.0, 10.0, 0.25, 1.25])
    tree.set(np.arange(10), prio)
    assert tree.total == pytest.approx(prio.sum())
    draws = np.concatenate([tree.sample(64, rng) for _ in range(2000)])  # 128k draws
    freq = np.bincount(draws, minlength=10) / len(draws)
    expected = prio / prio.sum()
    assert freq[prio == 0].sum() == 0  # zero priority is never drawn
    np.testing.assert_allclose(freq, expected, atol=0.005)
    # an update moves the mass: item 7 off, item 0 on
    tree.set(np.array([7, 0]), np.array([0.0, 10.0]))
    draws = np.concatenate([tree.sample(64, rng) for _ in range(500)])
    freq = np.bincount(draws, minlength=10) / len(draws)
    assert freq[7] == 0 and freq[0] == pytest.approx(10.0 / tree.total, abs=0.01)


@pytest.mark.parametrize("capacity", [1, 2, 5, 1000])
def test_sum_tree_every_node_is_the_sum_of_its_children_after_updates(capacity):
    """Batches of updates with repeated indices (a priority update of a minibatch that drew an item twice: the last
    value wins, as numpy assignment does) keep every internal node the sum of its two children."""
    rng = np.random.default_rng(capacity)
    tree = SumTree(capacity)
    leaves = np.zeros(tree.leaves)
    for _ in range(50):
        idx = rng.integers(0, capacity, size=rng.integers(1, 40))
        prio = rng.random(len(idx))
        tree.set(idx, prio)
        leaves[idx] = prio  # numpy's last-write-wins, as in the tree's leaves
        np.testing.assert_array_equal(tree.tree[tree.leaves :], leaves)
        for node in range(1, tree.leaves):
            assert tree.tree[node] == tree.tree[2 * node] + tree.tree[2 * node + 1], node
        assert tree.total == pytest.approx(leaves.sum())


def test_sum_tree_find_is_the_prefix_sum_search():
    tree = SumTree(5)
    tree.set(np.arange(5), np.array([1.0, 0.0, 2.0, 3.0, 0.5]))
    cum = np.cumsum([1.0, 0.0, 2.0, 3.0, 0.5])
    values = np.array([0.0, 0.999, 1.0, 2.5, 2.999, 3.0, 5.999, 6.0, 6.4999])
    expected = np.searchsorted(cum, values, side="right")
    np.testing.assert_array_equal(tree.find(values), expected)


def test_importance_weights_and_beta():
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125])
    w = importance_weights(probs, size=4, beta=1.0)
    # (N P)^-1 = [0.5, 1, 2, 2] / max 2
    torch.testing.assert_close(w, torch.tensor([0.25, 0.5, 1.0, 1.0]))
    w0 = importance_weights(probs, size=4, beta=0.0)
    torch.testing.assert_close(w0, torch.ones(4))
    w_half = importance_weights(probs, size=4, beta=0.5)
    torch.testing.assert_close(w_half, torch.tensor([0.5, 2**-0.5, 1.0, 1.0]))
    assert annealed_beta(0.4, 0.0) == pytest.approx(0.4)
    assert annealed_beta(0.4, 0.5) == pytest.approx(0.7)
    assert annealed_beta(0.4, 2.0) == pytest.approx(1.0)


def brute_force_nstep(rewards, terminated, truncated, final_values, gamma, n):
    """Loops, per transition: the reference for nstep_targets."""
    M, T = rewards.shape
    R, D, offs = np.zeros((M, T)), np.zeros((M, T)), np.zeros((M, T), dtype=np.int64)
    for i in range(M):
        for t in range(T):
            ret, disc, m = 0.0, 0.0, 0
            for k in range(n):
                if t + k >= T:
                    break
                ret += gamma**k * rewards[i, t + k]
                m = k + 1
                if terminated[i, t + k]:
                    disc = 0.0
                    break
                if truncated[i, t + k]:
                    ret += gamma ** (k + 1) * final_values[i, t + k]
                    disc = 0.0
                    break
                disc = gamma ** (k + 1)
            R[i, t], D[i, t], offs[i, t] = ret, disc, m
    return R, D, offs


@pytest.mark.parametrize("n", [1, 3, 5])
def test_nstep_targets_match_the_brute_force_reference(n):
    g = torch.Generator().manual_seed(n)
    M, T, gamma = 6, 12, 0.9
    rewards = torch.randn(M, T, generator=g)
    ends = torch.rand(M, T, generator=g)
    terminated = ends < 0.15
    truncated = (ends >= 0.15) & (ends < 0.3)
    # fixed cases: a termination and a truncation one step into the window, and both at the last step
    terminated[0, :], truncated[0, :] = False, False
    terminated[0, 3] = True
    truncated[1, :], terminated[1, :] = False, False
    truncated[1, 5] = True
    terminated[2, T - 1], truncated[2, T - 1] = True, False
    final_values = torch.randn(M, T, generator=g)
    got = nstep_targets(rewards, terminated, truncated, final_values, gamma, n)
    R, D, offs = brute_force_nstep(
        rewards.numpy(), terminated.numpy(), truncated.numpy(), final_values.numpy(), gamma, n
    )
    np.testing.assert_allclose(got.returns.numpy(), R, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.discounts.numpy(), D, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got.offsets.numpy(), offs)
    # spelled out for row 1 (truncated at step 5, bootstrap from V(final obs) = final_values[1, 5]):
    if n >= 3:
        r, v = rewards[1], final_values[1]
        expected = r[3] + gamma * r[4] + gamma**2 * r[5] + gamma**3 * v[5]
        assert float(got.returns[1, 3]) == pytest.approx(float(expected), rel=1e-5)
        assert float(got.discounts[1, 3]) == 0.0
        assert float(got.discounts[1, 0]) == pytest.approx(gamma**n)  # no end in the window: bootstraps
        assert int(got.offsets[1, T - 1]) == 1  # the window is cut at the rollout's end (obs[T] bootstraps)


def small_buffer(capacity=16, T=4, prioritized=True, **kw) -> ReplayBuffer:
    return ReplayBuffer(capacity, T, {"obs": ((2,), torch.float32)}, (), torch.int64, prioritized, **kw)


def rollouts(M, T, start=0.0):
    """obs value = (rollout, position) so the tests can tell where a transition came from."""
    obs = torch.zeros(M, T + 1, 2)
    obs[..., 0] = torch.arange(M).unsqueeze(1).float() + start
    obs[..., 1] = torch.arange(T + 1).float()
    z = torch.zeros(M, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(M, T), z, z, torch.zeros(M, T), 0.5, 2)
    return {"obs": obs}, torch.arange(M * T).view(M, T), targets


def test_buffer_stores_each_observation_once_and_bootstraps_from_t_plus_m():
    buf = small_buffer(capacity=8, T=4, prioritized=False)
    obs, actions, targets = rollouts(2, 4)
    idx = buf.add(obs, actions, targets, torch.ones(2, 4, dtype=torch.bool))
    assert buf.obs["obs"].shape == (2, 5, 2)  # blocks x (T + 1): not an (obs, next_obs) pair per transition
    s = buf.take(idx)
    torch.testing.assert_close(s.actions, torch.arange(8))
    # transition t of rollout r: obs (r, t), next obs (r, t + m) with m = min(2, T - t)
    pos = torch.arange(4).repeat(2).float()
    torch.testing.assert_close(s.obs["obs"][:, 1], pos)
    torch.testing.assert_close(s.next_obs["obs"][:, 1], torch.minimum(pos + 2, torch.tensor(4.0)))
    torch.testing.assert_close(s.returns, targets.returns.reshape(-1))


def test_buffer_ring_overwrites_the_oldest_and_masks_invalid_steps():
    buf = small_buffer(capacity=8, T=4, prioritized=False, seed=0)
    for start in (0.0, 10.0, 20.0):  # 3 rollouts of one block each into 2 blocks
        obs, actions, targets = rollouts(1, 4, start)
        valid = torch.ones(1, 4, dtype=torch.bool)
        valid[0, 0] = start != 20.0  # the newest rollout's first step is masked (e.g. another policy's)
        buf.add(obs, actions, targets, valid)
    assert len(buf) == 7
    s = buf.sample(2000)
    sources = set(s.obs["obs"][:, 0].tolist())
    assert sources == {10.0, 20.0}  # rollout 0 was overwritten
    assert not ((s.obs["obs"][:, 0] == 20.0) & (s.obs["obs"][:, 1] == 0.0)).any()
    torch.testing.assert_close(s.weights, torch.ones(2000))


def test_the_stored_count_follows_every_add_and_load():
    """len() is counted once per change of the validity flags, not per sample (a full 500k buffer's count took
    0.2 ms a step): a ring overwrite with masked steps and a loaded state are counted again."""
    buf = small_buffer(capacity=8, T=4, prioritized=True, seed=0)
    per_block = [0, 0]
    for i, n_valid in enumerate((4, 2, 3, 0, 1)):  # into a ring of 2 blocks
        obs, actions, targets = rollouts(1, 4, float(i))
        buf.add(obs, actions, targets, torch.arange(4).unsqueeze(0) < n_valid)
        per_block[i % 2] = n_valid
        assert len(buf) == sum(per_block), i
        if len(buf):
            buf.sample(4)
    other = small_buffer(capacity=8, T=4, prioritized=True, seed=0)
    obs, actions, targets = rollouts(2, 4)
    other.add(obs, actions, targets, torch.ones(2, 4, dtype=torch.bool))
    assert len(other) == 8
    other.load_state_dict(buf.state_dict())
    assert len(other) == len(buf) == 1


def test_priorities_initial_and_updated():
    buf = small_buffer(capacity=8, T=4, prioritized=True, alpha=1.0, eps=0.0, seed=1)
    obs, actions, targets = rollouts(2, 4)
    prio = torch.zeros(2, 4)
    prio[0, 1] = 3.0
    prio[1, 2] = 1.0
    buf.add(obs, actions, targets, torch.ones(2, 4, dtype=torch.bool), prio)
    s = buf.sample(4000, beta=1.0)
    counts = torch.bincount(s.indices, minlength=8).float() / 4000
    assert counts[1] == pytest.approx(0.75, abs=0.03) and counts[6] == pytest.approx(0.25, abs=0.03)
    # importance weights: (N P)^-1 normalized by the batch max -> the rarer item has weight 1
    w_of = {int(i): float(w) for i, w in zip(s.indices, s.weights, strict=True)}
    assert w_of[6] == pytest.approx(1.0) and w_of[1] == pytest.approx(1 / 3, rel=1e-4)
    buf.update_priorities(torch.tensor([1, 6]), torch.tensor([1.0, 1.0]))
    s = buf.sample(4000)
    counts = torch.bincount(s.indices, minlength=8).float() / 4000
    assert counts[1] == pytest.approx(0.5, abs=0.03) and counts[6] == pytest.approx(0.5, abs=0.03)
    # new transitions without a priority get the largest seen so far (3.0)
    obs, actions, targets = rollouts(1, 4, 5.0)
    buf.add(obs, actions, targets, torch.ones(1, 4, dtype=torch.bool))
    assert buf.tree.get(np.arange(4)).tolist() == [3.0] * 4


def test_state_dict_round_trip():
    buf = small_buffer(prioritized=True, seed=2)
    obs, actions, targets = rollouts(3, 4)
    buf.add(obs, actions, targets, torch.ones(3, 4, dtype=torch.bool), torch.rand(3, 4))
    other = small_buffer(prioritized=True, seed=2)
    other.load_state_dict(buf.state_dict())
    assert len(other) == len(buf) == 12 and other.tree.total == pytest.approx(buf.tree.total)
    torch.testing.assert_close(other.take(torch.arange(12)).next_obs["obs"], buf.take(torch.arange(12)).next_obs["obs"])
    with pytest.raises(ValueError, match="capacity or --rollout changed"):
        small_buffer(capacity=32).load_state_dict(buf.state_dict())


def frame_stack_rollouts(M, T, k, ends, seed=0, frame=(3, 3)):
    """Stacks as gymnasium's FrameStackObservation builds them (the reset frame repeated k times), across episode
    ends at the given (row, step) positions; the stream starts mid-episode so obs[0]'s stack holds older frames."""
    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 255, (M, T + 1 + k, *frame), generator=g, dtype=torch.uint8)
    obs = torch.zeros(M, T + 1, k, *frame, dtype=torch.uint8)
    is_first = torch.zeros(M, T + 1, dtype=torch.bool)
    for i in range(M):
        stack = [frames[i, j] for j in range(k)]  # the history before the rollout
        for t in range(T + 1):
            if t > 0:
                if (i, t - 1) in ends:  # step t - 1 ended the episode: obs[t] is a reset observation
                    is_first[i, t] = True
                    stack = [frames[i, t + k - 1]] * k
                else:
                    stack = stack[1:] + [frames[i, t + k - 1]]
            obs[i, t] = torch.stack(stack)
    return obs, is_first


def test_frame_stacks_are_stored_once_and_rebuilt_exactly():
    M, T, k = 3, 8, 4
    ends = {(0, 2), (1, 0), (1, 6), (2, T - 1)}
    obs, is_first = frame_stack_rollouts(M, T, k, ends)
    shapes = {"obs": ((k, 3, 3), torch.uint8)}
    buf = ReplayBuffer(M * T, T, shapes, (), torch.int64, prioritized=False, stacked={"obs": k})
    z = torch.zeros(M, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(M, T), z, z, torch.zeros(M, T), 0.9, 3)
    idx = buf.add({"obs": obs}, torch.zeros(M, T, dtype=torch.int64), targets, ~z, None, is_first)
    assert buf.frames["obs"].shape == (M, T + k, 3, 3) and not buf.obs  # one frame per step (+ k - 1 per block)
    s = buf.take(idx)
    torch.testing.assert_close(s.obs["obs"], obs[:, :T].reshape(-1, k, 3, 3))
    nt = torch.arange(T).repeat(M) + targets.offsets.reshape(-1)
    torch.testing.assert_close(s.next_obs["obs"], obs[torch.arange(M).repeat_interleave(T), nt])
    # zero padding at a reset (FrameStackObservation(padding_type="zero")) cannot be rebuilt: refused
    bad = obs.clone()
    bad[1, 1, :-1] = 0
    with pytest.raises(ValueError, match="not a frame stack"):
        buf.add({"obs": bad}, torch.zeros(M, T, dtype=torch.int64), targets, ~z, None, is_first)


def test_frame_stacks_of_a_first_slot_that_starts_mid_episode():
    """An actor's first slot (after its random decorrelation steps, or after a restart) marks is_first at position 0
    because the core state starts there, while the envs are in the middle of episodes: obs[0]'s stack then holds
    older frames, not a repeated reset frame. Seen on Atari Pong: the learner refused the rollout and the run
    stopped. Row 2 does start a real episode at 0, row 1 also at step 3."""
    M, T, k = 3, 8, 4
    obs, is_first = frame_stack_rollouts(M, T, k, {(1, 2)})
    obs[2, 0] = obs[2, 0, -1:].expand(k, 3, 3)  # a reset observation: the frame repeated ...
    for t in range(1, k):  # ... and the stacks after it start from it
        obs[2, t, : k - t] = obs[2, 0, -1]
    is_first[:, 0] = True
    shapes = {"obs": ((k, 3, 3), torch.uint8)}
    buf = ReplayBuffer(M * T, T, shapes, (), torch.int64, prioritized=False, stacked={"obs": k})
    z = torch.zeros(M, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(M, T), z, z, torch.zeros(M, T), 0.9, 3)
    idx = buf.add({"obs": obs}, torch.zeros(M, T, dtype=torch.int64), targets, ~z, None, is_first)
    torch.testing.assert_close(buf.take(idx).obs["obs"], obs[:, :T].reshape(-1, k, 3, 3))


def test_observation_memory_is_committed_as_the_buffer_fills():
    """An Atari-size buffer commits its frame memory as rollouts arrive, not at construction (520 MB here)."""
    psutil = pytest.importorskip("psutil")
    proc = psutil.Process()
    before = proc.memory_info().rss
    T, k = 32, 4
    shapes = {"obs": ((k, 84, 84), torch.uint8)}
    buf = ReplayBuffer(64 * 1024, T, shapes, (), torch.int64, prioritized=True, stacked={"obs": k})
    assert buf.frames["obs"].numel() > 500e6  # bytes (uint8)
    assert proc.memory_info().rss - before < 100e6
    obs, is_first = frame_stack_rollouts(2, T, k, {(0, 5)})
    obs = obs.repeat_interleave(28, dim=-1).repeat_interleave(28, dim=-2)  # [2, T+1, k, 84, 84]
    z = torch.zeros(2, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(2, T), z, z, torch.zeros(2, T), 0.9, 3)
    buf.add({"obs": obs}, torch.zeros(2, T, dtype=torch.int64), targets, ~z, None, is_first)
    s = buf.sample(256)  # only what was written is ever read
    b, t = s.indices // T, s.indices % T
    torch.testing.assert_close(s.obs["obs"], obs[b, t])
    del buf


def test_sum_tree_takes_a_scalar_index():
    tree = SumTree(4)
    tree.set(2, 1.5)
    tree.set(np.int64(0), 0.5)
    assert tree.total == pytest.approx(2.0) and list(tree.get(np.arange(4))) == [0.5, 0.0, 1.5, 0.0]


def test_a_saved_frame_stacked_buffer_is_rebuilt_from_its_own_layout():
    """What a resumed DQN learner does: build the buffer from the saved state's layout (stacked frames included),
    take its tensors over and sample exactly what the original samples next (the RNG state is saved too)."""
    M, T, k = 3, 8, 4
    obs, is_first = frame_stack_rollouts(M, T, k, {(0, 2), (1, 6)})
    shapes = {"obs": ((k, 3, 3), torch.uint8), "vec": ((2,), torch.float32)}
    buf = ReplayBuffer(2 * M * T, T, shapes, (), torch.int64, prioritized=True, seed=5, stacked={"obs": k})
    z = torch.zeros(M, T, dtype=torch.bool)
    targets = nstep_targets(torch.ones(M, T), z, z, torch.zeros(M, T), 0.9, 3)
    batch = {"obs": obs, "vec": torch.randn(M, T + 1, 2)}
    buf.add(batch, torch.zeros(M, T, dtype=torch.int64), targets, ~z, torch.rand(M, T), is_first)
    buf.sample(5)  # the RNG moves on
    saved = torch.load(io.BytesIO(save_bytes(buf.state_dict())), weights_only=True)
    blocks, rollout, layout = ReplayBuffer.layout_of(saved)
    assert (blocks, rollout) == (2 * M, T) and layout == shapes
    other = ReplayBuffer(blocks * rollout, rollout, layout, (), torch.int64, prioritized=True, stacked={"obs": k})
    other.load_state_dict(saved)
    a, b = buf.sample(16), other.sample(16)
    assert torch.equal(a.indices, b.indices) and torch.equal(a.obs["obs"], b.obs["obs"])
    assert torch.equal(a.next_obs["vec"], b.next_obs["vec"]) and torch.equal(a.weights, b.weights)
    wrong = {**saved, "frames": {"obs": saved["frames"]["obs"].float()}}
    with pytest.raises(ValueError, match="frames/obs is"):
        ReplayBuffer(blocks * rollout, rollout, layout, (), torch.int64, True, stacked={"obs": k}).load_state_dict(
            wrong
        )


def save_bytes(state: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def test_replay_device_choice(monkeypatch):
    """--replay_buffer_device: auto puts the observations on the learner's GPU when they take at most half of its
    free memory; cpu keeps them in host memory; a learner group's buffer stays in host memory."""
    from sample_factory.algo.dqn import replay_device

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * 2**30, 80 * 2**30))
    assert replay_device("auto", gpu, 5 * 2**30) == gpu
    assert replay_device("auto", gpu, 5 * 2**30 + 1) == cpu  # more than half of the free 10 GiB
    assert replay_device("learner", gpu, 50 * 2**30) == gpu
    assert replay_device("cpu", gpu, 1) == cpu
    assert replay_device("auto", gpu, 1, data_parallel=True) == cpu
    assert replay_device("auto", cpu, 1) == cpu and replay_device("learner", cpu, 1) == cpu


def test_observation_bytes_are_what_the_buffer_allocates():
    T, k = 8, 4
    shapes = {"obs": ((k, 84, 84), torch.uint8), "vec": ((3,), torch.float32)}
    buf = ReplayBuffer(100, T, shapes, (), torch.int64, prioritized=True, stacked={"obs": k})
    stored = [*buf.obs.values(), *buf.frames.values(), buf.starts]
    assert ReplayBuffer.obs_nbytes(100, T, shapes, {"obs": k}) == sum(t.numel() * t.element_size() for t in stored)


@pytest.mark.parametrize("frame", [(3, 3), (4, 4)])  # 9 bytes: compared as bytes; 16: as 64-bit words
def test_the_in_place_frame_stack_check_agrees_with_the_rebuild(frame):
    """stacks_follow_frames (shifted views) accepts exactly the rollouts that rebuild_stacks gives back: valid
    stacks with episode starts anywhere, and each of many single-element corruptions of them."""
    from sample_factory.algo.replay import rebuild_stacks, stacks_follow_frames

    M, T, k = 3, 8, 4
    g = torch.Generator().manual_seed(1)
    pos = torch.arange(T + 1)
    b, t = torch.arange(M).repeat_interleave(T + 1), pos.repeat(M)
    refused = 0
    for trial in range(40):
        ends = {(int(torch.randint(0, M, (1,), generator=g)), int(torch.randint(0, T, (1,), generator=g)))}
        obs, is_first = frame_stack_rollouts(M, T, k, ends, seed=trial, frame=frame)
        if trial % 2:  # a corruption somewhere (may or may not break the rule, e.g. a slot equal to its neighbour)
            i = [int(torch.randint(0, n, (1,), generator=g)) for n in obs.shape[:4]]
            obs[i[0], i[1], i[2], i[3]] = 255 - obs[i[0], i[1], i[2], i[3]]  # never the same value (odd sum)
        starts = torch.where(is_first & (pos > 0), pos, -1).cummax(dim=1).values.to(torch.int16)
        frames = torch.cat([obs[:, 0, : k - 1], obs[:, :, -1]], dim=1)
        expected = torch.equal(rebuild_stacks(frames, starts, b, t, k), obs.reshape(-1, *obs.shape[2:]))
        assert stacks_follow_frames(obs, starts >= pos) == expected, (trial, ends)
        assert expected or trial % 2
        refused += not expected
    assert refused >= 10  # most corruptions break a stack
