"""Copies between host and training device that never make the host wait for the GPU's queue.

A host->device copy from ordinary (pageable) memory blocks the host until the copy has run, and being ordered on the
stream it runs only after every kernel queued before it: the host waits for the whole queue, like a `.item()`. From
page-locked (pinned) memory the copy is queued and the host goes on. A device->host read is queued the same way into
pinned memory, with an event that says when it has landed. On a CPU device both are plain tensors and nothing is
copied or waited for. Used by the learners' loops (algo/dqn.py per SGD step; workers/learner.py per iteration)."""

from __future__ import annotations

from collections import deque
from typing import Any

import torch
from torch import Tensor


class PinnedStaging:
    """Host->device copies through a ring of `depth` pinned buffers per tensor name. A buffer is written again only
    after its last copy has run (its event), so the host stays at most `depth` copies ahead of the device."""

    def __init__(self, device: torch.device, depth: int = 4):
        self.device, self.depth = device, depth
        self.ring: dict[str, list[tuple[Tensor, torch.cuda.Event | None]]] = {}
        self.turn = 0

    def to_device(self, tensors: dict[str, Any]) -> dict[str, Any]:
        """{name: CPU tensor or {name: tensor}} -> the same structure on the device (CPU: the tensors themselves)."""
        if self.device.type != "cuda":
            return tensors
        self.turn = (self.turn + 1) % self.depth
        return self._copy(tensors, "")

    def _copy(self, tensors: dict[str, Any], prefix: str) -> dict[str, Any]:
        out = {}
        for k, v in tensors.items():
            name = prefix + k
            out[k] = self._copy(v, name + "/") if isinstance(v, dict) else self._one(name, v)
        return out

    def _one(self, name: str, x: Tensor) -> Tensor:
        if x.device.type != "cpu":  # already on a device (e.g. gathered from a replay buffer on the GPU)
            return x.to(self.device, non_blocking=True)
        ring = self.ring.setdefault(name, [])
        while len(ring) <= self.turn:
            ring.append((torch.empty(0, dtype=x.dtype, pin_memory=True), None))
        buf, event = ring[self.turn]
        if event is not None:
            event.synchronize()  # that buffer's previous copy has run (normally long ago)
        if buf.shape != x.shape or buf.dtype != x.dtype:
            buf = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
        buf.copy_(x)
        on_device = buf.to(self.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        ring[self.turn] = (buf, event)
        return on_device


class DeferredReads:
    """Device->host reads that land when the device gets there: `put` queues a copy into pinned memory with a tag,
    `ready` returns the (tag, host tensor) pairs whose copies have landed, oldest first, without waiting, and
    `drain` waits for the rest. On a CPU device every read is ready at once."""

    def __init__(self, device: torch.device):
        self.device = device
        self.queue: deque[tuple[Any, Tensor, torch.cuda.Event | None]] = deque()

    def put(self, tag: Any, x: Tensor) -> None:
        if self.device.type != "cuda":
            self.queue.append((tag, x.detach(), None))
            return
        host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
        host.copy_(x.detach(), non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.queue.append((tag, host, event))

    def ready(self) -> list[tuple[Any, Tensor]]:
        done = []
        while self.queue and (self.queue[0][2] is None or self.queue[0][2].query()):
            tag, host, _ = self.queue.popleft()
            done.append((tag, host))
        return done

    def drain(self) -> list[tuple[Any, Tensor]]:
        done = []
        while self.queue:
            tag, host, event = self.queue.popleft()
            if event is not None:
                event.synchronize()
            done.append((tag, host))
        return done


def host_read(x: Tensor) -> list:
    """The one read-back of a training iteration: `x.tolist()`, named in a profile ("host_read") so that host-sync
    counts see it on a CPU device too, where a `.tolist()` records no op (tools/learner_loop.py)."""
    with torch.profiler.record_function("host_read"):
        return x.tolist()
