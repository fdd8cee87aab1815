"""The pure pieces of remote sampling: finished slots packed into a batch that travels through Ray's object store,
written back into the learner node's slots, compressed where it pays, and checked against --max_policy_lag.

A batch is {name: array [k, ...]} for k rollouts: every slot tensor of shared_buffers.TrajectoryBuffers
(`SLOT_KEYS`, e.g. rewards [k, T, n], policy_version [k, T+1, n], rnn_states [k, T+2, n, H]) and the observations
as "obs.<key>" [k, T+1, n, *shape]. On the wire an array is either the numpy array itself (Ray sends it without a
copy into its pickle stream) or a `Compressed` record.
"""

from __future__ import annotations

import time
import zlib
from typing import NamedTuple

import numpy as np
import torch

from sample_factory.runtime.shared_buffers import TrajectoryBuffers

COMPRESSIBLE = (np.uint8, np.bool_)  # images and flags compress; float trajectories hardly do
MIN_COMPRESS_BYTES = 4096  # smaller arrays cost more in calls than they save


class Compressed(NamedTuple):
    data: bytes  # zlib level 1
    dtype: str
    shape: tuple


def batch_keys(buffers: TrajectoryBuffers) -> list[str]:
    return [*TrajectoryBuffers.SLOT_KEYS, *(f"obs.{k}" for k in buffers.obs)]


def _tensor(buffers: TrajectoryBuffers, name: str) -> torch.Tensor:
    return buffers.obs[name[4:]] if name.startswith("obs.") else getattr(buffers, name)


def pack_slots(buffers: TrajectoryBuffers, slots: list[int]) -> dict[str, np.ndarray]:
    """Copies of the given slots (the slots can be reused as soon as this returns): {name: [k, ...]}."""
    idx = torch.as_tensor(slots, dtype=torch.long)
    return {name: _tensor(buffers, name).index_select(0, idx).numpy() for name in batch_keys(buffers)}


def concat_batches(batches: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    if len(batches) == 1:
        return batches[0]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def batch_size(batch: dict[str, np.ndarray]) -> int:
    """Rollouts in a (decoded) batch."""
    return len(next(iter(batch.values())))


def write_rollout(buffers: TrajectoryBuffers, slot: int, batch: dict[str, np.ndarray], i: int) -> None:
    """Rollout i of the batch into slot `slot` of the learner node's buffers."""
    for name, arr in batch.items():
        _tensor(buffers, name)[slot].numpy()[...] = arr[i]  # arrays from Ray are read-only: no torch view of them


def stale_rollouts(policy_version: np.ndarray, current_version: int, max_policy_lag: int) -> np.ndarray:
    """[k] bool: rollouts none of whose steps the learner could train on, every action being more than
    --max_policy_lag versions older than `current_version`. policy_version: [k, T+1, n] (position T only
    bootstraps, so it is not counted). Rollouts with some fresh steps are kept: the loss masks their old steps."""
    newest = policy_version[:, :-1].reshape(len(policy_version), -1).max(axis=1)  # [k]
    return current_version - newest > max_policy_lag


def policy_lags(policy_version: np.ndarray, current_version: int) -> tuple[int, int]:
    """(min, max) lag in policy versions of the steps of a batch ([k, T+1, n] versions; position T excluded)."""
    v = policy_version[:, :-1]
    return int(current_version - v.max()), int(current_version - v.min())


def compression_pays(raw: int, compressed: int, compress_s: float, decompress_s: float, link_bps: float) -> bool:
    """Whether sending `compressed` bytes plus compressing and decompressing them takes less time than sending `raw`
    bytes over a link of `link_bps` bytes/s."""
    return compressed / link_bps + compress_s + decompress_s < raw / link_bps


def choose_compression(batch: dict[str, np.ndarray], mode: str, link_mbps: float) -> dict[str, bool]:
    """{name: compress?} for the arrays of a batch: "none", "zlib" (every uint8/bool array large enough), or
    "auto" (those among them for which zlib measured on this batch pays at `link_mbps`)."""
    out = {}
    for name, arr in batch.items():
        eligible = arr.dtype.type in COMPRESSIBLE and arr.nbytes >= MIN_COMPRESS_BYTES
        if not eligible or mode == "none":
            out[name] = False
        elif mode == "zlib":
            out[name] = True
        else:
            t0 = time.perf_counter()
            data = zlib.compress(np.ascontiguousarray(arr).data.cast("B"), 1)
            t1 = time.perf_counter()
            zlib.decompress(data)
            t2 = time.perf_counter()
            out[name] = compression_pays(arr.nbytes, len(data), t1 - t0, t2 - t1, link_mbps * 1e6 / 8)
    return out


def encode(batch: dict[str, np.ndarray], compress: dict[str, bool]) -> dict:
    """The wire form of a batch: compressed arrays become `Compressed` records."""
    out: dict = {}
    for name, arr in batch.items():
        if compress.get(name):
            data = zlib.compress(np.ascontiguousarray(arr).data.cast("B"), 1)
            out[name] = Compressed(data, arr.dtype.str, arr.shape)
        else:
            out[name] = arr
    return out


def decode(wire: dict) -> dict[str, np.ndarray]:
    out = {}
    for name, v in wire.items():
        if isinstance(v, Compressed):
            out[name] = np.frombuffer(zlib.decompress(v.data), dtype=np.dtype(v.dtype)).reshape(v.shape)
        else:
            out[name] = v
    return out


def wire_bytes(wire: dict) -> int:
    """Payload bytes of an encoded batch (array data; the few hundred bytes of pickle framing not counted)."""
    return sum(len(v.data) if isinstance(v, Compressed) else v.nbytes for v in wire.values())
