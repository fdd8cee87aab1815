"""Message channels between components, and the message formats.

Only small tuples travel here (buffer indices, counts, reports); observations and actions live in the shared
trajectory tensors (shared_buffers.py). Components see the `Channel` interface only, so the same component code
runs with faster-fifo queues between processes or with in-process deques in serial mode.

Message formats (tuples, first element is the kind):
- actor -> policy workers of policy p:   (REQUEST, actor_idx, split_idx, slot, t, has_truncations)
- policy worker -> actor:                (ACTIONS_READY, [split_idx, ...])
- actor -> learner of policy p:          (ROLLOUT, actor_idx, slot)
- learner -> actor:                      (FREE_SLOTS, [slot, ...])
- anyone -> runner (report channel):     (REPORT, role, index, kind, payload)
- runner -> any component:               (STOP,)
"""

from __future__ import annotations

import collections
import queue
from typing import Any, Protocol

import faster_fifo

REQUEST = 0
ACTIONS_READY = 1
ROLLOUT = 2
FREE_SLOTS = 3
REPORT = 4
STOP = 5


class Channel(Protocol):
    def put(self, msg: Any, timeout: float = ...) -> None: ...

    def get_many(self, block: bool = True, timeout: float = ..., max_messages: int = ...) -> list: ...


class FifoChannel:
    """faster-fifo queue: many producers, many consumers, shared memory, one lock per put/get_many."""

    def __init__(self, max_size_bytes: int = 1_000_000):
        self.q = faster_fifo.Queue(max_size_bytes=max_size_bytes)

    def put(self, msg: Any, timeout: float = 10.0) -> None:
        # A full queue for 10 s means the consumer is gone or stuck: raise instead of blocking forever.
        self.q.put(msg, block=True, timeout=timeout)

    def get_many(self, block: bool = True, timeout: float = 0.1, max_messages: int = 1_000_000) -> list:
        try:
            return self.q.get_many(block=block, timeout=timeout, max_messages_to_get=max_messages)
        except queue.Empty:
            return []

    def close(self) -> None:
        self.q.close()


class LocalChannel:
    """Serial-mode channel: a deque; `get_many` never blocks because one thread drives every component."""

    def __init__(self):
        self.q: collections.deque = collections.deque()

    def put(self, msg: Any, timeout: float = 10.0) -> None:
        self.q.append(msg)

    def get_many(self, block: bool = True, timeout: float = 0.0, max_messages: int = 1_000_000) -> list:
        out = []
        while self.q and len(out) < max_messages:
            out.append(self.q.popleft())
        return out

    def close(self) -> None:
        self.q.clear()


class Channels:
    """Every channel of a run, indexed by the receiving component."""

    def __init__(self, num_workers: int, num_policies: int, serial: bool):
        make = LocalChannel if serial else FifoChannel
        self.report = make() if serial else FifoChannel(max_size_bytes=10_000_000)
        self.actor = [make() for _ in range(num_workers)]
        self.policy = [make() for _ in range(num_policies)]  # shared by the policy workers of one policy
        self.learner = [make() for _ in range(num_policies)]

    def all(self) -> list:
        return [self.report, *self.actor, *self.policy, *self.learner]

    def close(self) -> None:
        for c in self.all():
            c.close()


class Reporter:
    """Sends reports to the runner tagged with the sender's role and index."""

    def __init__(self, channel: Channel, role: str, index: Any):
        self.channel, self.role, self.index = channel, role, index

    def __call__(self, kind: str, payload: Any = None) -> None:
        self.channel.put((REPORT, self.role, self.index, kind, payload))
