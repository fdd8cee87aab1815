"""The pure pieces of remote sampling (no Ray needed): rollouts packed on a sampler node, encoded (compressed or
not), decoded and written into the learner node's slots arrive bit-identical; the compression choice; the policy
lag checks; and the learner-node importer's slot bookkeeping (import slots after the local workers' slots,
Rollout messages a learner understands, stale rollouts dropped, slots coming back with FreeSlots)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from sample_factory.config import parse_cfg
from sample_factory.distributed.remote_samplers import NodeState, RemoteSamplers, check_reachable
from sample_factory.distributed.rollouts import (
    Compressed,
    choose_compression,
    compression_pays,
    decode,
    encode,
    pack_slots,
    policy_lags,
    stale_rollouts,
    wire_bytes,
    write_rollout,
)
from sample_factory.experiment.progress import ProgressTracker
from sample_factory.runtime.messages import Channels, FreeSlots
from sample_factory.runtime.messages import decode as decode_msg
from sample_factory.runtime.shared_buffers import SharedWeights, TrajectoryBuffers, make_buffer_spec

# an image key (uint8, compressible) next to a float vector key, and an LSTM-sized core state
OBS = gym.spaces.Dict(
    {"img": gym.spaces.Box(0, 255, (3, 16, 16), np.uint8), "vec": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)}
)
ACTIONS = gym.spaces.Discrete(3)


def _cfg(*extra: str):
    return parse_cfg(
        [
            "--env=CartPole-v1",
            "--num_workers=2",
            "--num_envs_per_worker=4",
            "--worker_num_splits=2",
            "--rollout=8",
            "--batch_size=32",
            *extra,
        ]
    )


def _filled_buffers(cfg, seed: int = 0) -> TrajectoryBuffers:
    """Buffers whose every slot tensor holds random values (images: blocky, so they compress)."""
    b = TrajectoryBuffers(make_buffer_spec(cfg, OBS, ACTIONS, rnn_size=6), share=False)
    g = torch.Generator().manual_seed(seed)
    for name, t in b.tensors().items():
        if name == "obs.img":
            t.copy_(torch.randint(0, 4, t.shape, generator=g).to(torch.uint8) * 60)
        elif t.dtype == torch.bool:
            t.copy_(torch.rand(t.shape, generator=g) < 0.3)
        elif t.dtype.is_floating_point:
            t.copy_(torch.randn(t.shape, generator=g))
        else:
            t.copy_(torch.randint(0, 3, t.shape, generator=g))
    return b


@pytest.mark.parametrize("mode", ["none", "zlib"])
def test_pack_encode_decode_write_round_trip(mode):
    cfg = _cfg()
    src, dst = _filled_buffers(cfg, 0), _filled_buffers(cfg, 1)
    batch = pack_slots(src, [3, 1])
    assert batch["obs.img"].shape == (2, 9, 2, 3, 16, 16)  # [k, T+1, n, *shape]
    assert batch["rnn_states"].shape == (2, 10, 2, 6)  # [k, T+2, n, H]
    src.rewards.zero_()  # the batch is a copy: the slots may be refilled at once
    compress = choose_compression(batch, mode, 1000.0)
    wire = encode(batch, compress)
    assert isinstance(wire["obs.img"], Compressed) == (mode == "zlib")
    assert not isinstance(wire["obs.vec"], Compressed)  # float arrays are never compressed
    if mode == "zlib":
        assert wire_bytes(wire) < sum(a.nbytes for a in batch.values())
    back = decode(wire)
    for slot, i in ((5, 0), (0, 1)):
        write_rollout(dst, slot, back, i)
    for name in batch:
        tensor = dst.obs[name[4:]] if name.startswith("obs.") else getattr(dst, name)
        assert np.array_equal(tensor[5].numpy(), batch[name][0]), name
        assert np.array_equal(tensor[0].numpy(), batch[name][1]), name


def test_compression_pays_only_where_the_link_is_the_bottleneck():
    # 1 MB -> 100 kB in 5 ms + 1 ms: on a 1 Gbit/s link (125 MB/s) sending raw takes 8 ms, compressed 6.8 ms
    assert compression_pays(1_000_000, 100_000, 0.005, 0.001, 125e6)
    # on 10 Gbit/s raw takes 0.8 ms: compressing costs more than it saves
    assert not compression_pays(1_000_000, 100_000, 0.005, 0.001, 1250e6)
    assert not compression_pays(1_000_000, 1_000_000, 0.0, 0.0, 1e6)  # nothing saved


def test_choose_compression_auto_measures():
    batch = {
        "obs.img": np.zeros((4, 64, 64, 64), np.uint8),  # 1 MiB of zeros: compresses ~1000x
        "flags": np.zeros(100, np.bool_),  # too small to bother
        "values": np.zeros((4, 64, 64), np.float32),  # float
    }
    slow = choose_compression(batch, "auto", link_mbps=10.0)
    assert slow == {"obs.img": True, "flags": False, "values": False}
    assert choose_compression(batch, "auto", link_mbps=1e9) == {"obs.img": False, "flags": False, "values": False}
    assert not any(choose_compression(batch, "none", 10.0).values())
    assert choose_compression(batch, "zlib", 1e9)["obs.img"]


def test_stale_rollouts_and_lags():
    v = np.zeros((3, 5, 2), np.int64)  # [k, T+1, n]
    v[0] = 10  # all fresh
    v[1, :-1] = 2  # all old ...
    v[1, -1] = 10  # ... except the bootstrap position, which is not an action the learner trains on
    v[2, :-1] = 2
    v[2, 1, 0] = 9  # one fresh step: kept, the loss masks the rest
    assert stale_rollouts(v, current_version=10, max_policy_lag=5).tolist() == [False, True, False]
    assert stale_rollouts(v, current_version=10, max_policy_lag=8).tolist() == [False, False, False]
    assert policy_lags(v[[0, 2]], current_version=10) == (0, 8)


def _importer(cfg):
    """A RemoteSamplers with one node, wired to real buffers and socket channels (no Ray)."""
    spec = make_buffer_spec(cfg, OBS, ACTIONS, rnn_size=6)
    local_workers = spec.num_workers
    rs = RemoteSamplers(cfg, spec, log=lambda msg: None)
    assert spec.num_workers == local_workers + cfg.sampler_nodes * cfg.num_workers  # import slots appended
    rs.buffers = TrajectoryBuffers(spec, share=False)
    rs.channels = Channels(spec.num_workers, 1, "socket")
    rs.weights = SharedWeights(4)
    workers = [local_workers + i for i in range(cfg.num_workers)]
    slots = [s for w in workers for s in rs.buffers.slots_of_worker(w)]
    rs.nodes = [NodeState(0, None, workers, slots)]
    return rs, workers, slots


def test_importer_fills_import_slots_drops_stale_and_takes_slots_back():
    cfg = _cfg("--sampler_nodes=1", "--max_policy_lag=3")
    rs, workers, slots = _importer(cfg)
    try:
        batch = pack_slots(_filled_buffers(cfg), [0, 1, 2])
        batch["policy_version"][:] = 7
        batch["policy_version"][1] = 1  # every action 9 versions old: stale
        rs.weights.publish_flat(torch.zeros(4), 10)
        samples = (0, 48, [(20.0, 20)], {})
        stats = {"rollouts": 3, "raw_bytes": 1, "wire_bytes": 1, "encode_s": 0.0, "sent_at": 0.0}
        out = {"wire": encode(batch, {}), "samples": [samples], "discarded": 2, "stats": stats}
        rs._import(rs.nodes[0], out, get_s=0.0)
        rs._place_backlog(rs.nodes[0])
        msgs = [decode_msg(m) for m in rs.channels.learner[0].get_many(timeout=1.0)]
        assert len(msgs) == 2 and rs.totals["stale"] == 1
        for m, i in zip(msgs, (0, 2)):
            assert m.slot in slots and m.actor_idx == rs.buffers.worker_of_slot(m.slot) and m.gen == 0
            assert m.actor_idx in workers  # a virtual worker after the local ones
            assert np.array_equal(rs.buffers.obs["img"][m.slot].numpy(), batch["obs.img"][i])
            assert np.array_equal(rs.buffers.rewards[m.slot].numpy(), batch["rewards"][i])
        assert len(rs.nodes[0].pool.free) == len(slots) - 2
        # the learner returns the slots on the virtual workers' channels, as to a local actor worker
        for m in msgs:
            rs.channels.actor[m.actor_idx].put(FreeSlots.wire([m.slot], 0))
        rs._take_free_slots()
        assert sorted(rs.nodes[0].pool.free) == sorted(slots)
        progress = ProgressTracker(cfg)
        assert rs.update(progress) is None
        assert progress.discarded_rollouts == 2 and progress.total_env_frames() == 48
    finally:
        rs.channels.close()


def test_lost_node_logged_once_and_stop_only_without_local_samplers():
    for local, expect_stop in (("True", False), ("False", True)):
        cfg = _cfg("--sampler_nodes=1", f"--local_samplers={local}")
        rs, _, _ = _importer(cfg)
        lines = []
        rs.log = lines.append
        rs.ray = type("NoRay", (), {"kill": staticmethod(lambda handle: None)})
        try:
            rs._lost(rs.nodes[0], "ActorDiedError: gone")
            why = rs.update(ProgressTracker(cfg))
            assert len(lines) == 1 and lines[0].startswith("sampler node 0 lost (ActorDiedError: gone)")
            assert (why is not None) == expect_stop, why
        finally:
            rs.channels.close()


def test_config_checks(capsys):
    for flags, message in (
        (["--local_samplers=False"], "needs --sampler_nodes >= 1"),
        (["--sampler_nodes=1", "--serial_mode=True"], "single-policy APPO"),
        (["--sampler_nodes=1", "--num_policies=2"], "single-policy APPO"),
    ):
        with pytest.raises(SystemExit):
            _cfg(*flags)
        assert message in capsys.readouterr().err
    assert _cfg("--sampler_nodes=2", "--broadcast_interval=4").broadcast_interval == 4


def test_default_run_setup_does_not_import_ray(tmp_path):
    """Ray is an optional extra: the runner, its config and a run's set-up never import it unless asked."""
    code = (
        "import sys; from sample_factory.config import parse_cfg; from sample_factory.runner import Runner; "
        "import sample_factory.distributed.rollouts; "
        "Runner(parse_cfg(['--env=CartPole-v1', '--num_workers=1', '--serial_mode=True', "
        f"'--train_dir={tmp_path}'])).setup(); "
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)  # 38 s at load 13
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr


def test_unreachable_ray_address_fails_fast():
    """Ray's driver would retry a dead head for minutes while the run waits: a closed port is one error at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match=f"--ray_address=127.0.0.1:{port}: no Ray head answers there"):
            check_reachable(f"127.0.0.1:{port}")
        assert time.monotonic() - t0 < 5
    for address in (None, "auto", "ray://head:10001"):
        check_reachable(address)  # left to Ray


class _HungNodeRay:
    """Ray as the importer sees it, with one sampler node whose next_batch never returns."""

    def __init__(self):
        self.killed: list = []

    def wait(self, refs, num_returns=1, timeout=None):
        time.sleep(timeout or 0)
        return [], list(refs)  # nothing ever finishes

    def put(self, value):
        return object()

    def kill(self, handle):
        self.killed.append(handle)


class _Method:
    def remote(self, *args):
        return object()


class _HungHandle:
    next_batch = set_weights = stop = _Method()


@pytest.mark.timeout(60)
def test_a_node_whose_next_batch_never_returns_is_lost_after_the_heartbeat_timeout():
    """The same liveness rule as local workers: silent past --heartbeat_timeout_sec, the node is declared lost
    (its actor killed); without local samplers the run stops with one line instead of hanging."""
    cfg = _cfg("--sampler_nodes=1", "--local_samplers=False", "--heartbeat_timeout_sec=1.5")
    rs, _, _ = _importer(cfg)
    lines: list[str] = []
    rs.log = lines.append
    rs.ray = _HungNodeRay()
    rs.nodes[0].handle = _HungHandle()
    rs.thread = threading.Thread(target=rs._run, daemon=True)
    try:
        started = time.monotonic()
        rs.thread.start()
        progress = ProgressTracker(cfg)
        why = None
        while why is None and time.monotonic() - started < 20:
            time.sleep(0.1)
            why = rs.update(progress)
        took = time.monotonic() - started
        assert why == "every sampler node was lost (--local_samplers=False)", (why, lines)
        assert 1.5 <= took < 5, took
        lost = [ln for ln in lines if "lost (" in ln]
        # how long it was silent, rounded, is 2 s unless the VM stalled this thread (the bound above checks timing)
        silent = re.search(r"next_batch silent for (\d+) s, over --heartbeat_timeout_sec=1\.5", lost[0])
        assert len(lost) == 1 and silent and 2 <= int(silent.group(1)) < 5, lines
        assert lost[0].endswith("no sampler left") and rs.ray.killed == [rs.nodes[0].handle]
    finally:
        rs.stop_event.set()
        rs.thread.join(timeout=5)
        rs.channels.close()
