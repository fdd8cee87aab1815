"""Message channels between components, and the message formats.

Only small tuples travel here (buffer indices, counts, reports); observations and actions live in the shared
trajectory tensors (shared_buffers.py). Components see the `Channel` interface only, so the same component code
runs with Unix sockets (the default) or faster-fifo queues between processes, or with in-process deques in
serial mode.

Message formats: one NamedTuple per kind below, the first field being the kind. On the wire they are plain tuples
built by `Request.wire(...)` etc. (a pickled NamedTuple would also carry its class path: 55 bytes against 30 for a
request; building one costs ~1 us against ~0.1 us), and receivers read them by field name (`decode(msg)`).
`gen` is the actor worker's generation (bumped when the runner restarts it) and `seq` the split's request
number: receivers drop messages that are no longer current.
- actor -> policy workers of policy p:   Request(REQUEST, actor_idx, split_idx, slot, t, has_truncations, gen, seq)
- policy worker -> actor:                ActionsReady(ACTIONS_READY, splits=[(split_idx, seq), ...], gen, policy_id,
                                         worker)  the answers are in that policy worker's answer area
- actor -> learner of policy p:          Rollout(ROLLOUT, actor_idx, slot, gen)
- learner -> actor:                      FreeSlots(FREE_SLOTS, slots=[slot, ...], gen)
- runner -> learner:                     SaveBest(SAVE_BEST, metric_value)  the run's metric improved
- runner -> learner:                     SaveNow(SAVE_NOW)  write a checkpoint now (periodic evaluation)
- runner -> learner:                     PbtUpdate(PBT_UPDATE, hyperparams, source_policy or None)  PBT decision
- runner -> actors:                      SetRewardShaping(SET_REWARD_SHAPING, policy_id, {name: coefficient})  PBT
- runner -> actors:                      Resend(RESEND)  re-send outstanding requests (a policy worker was restarted)
- anyone -> runner (report channel):     Report(REPORT, role, index, report_kind, payload)
- runner -> any component:               Stop(STOP)
- learner rank 0 -> its other ranks:     RankWork(RANK_WORK, slots, columns, rows, version, env_frames)  copy these
                                         slot columns (a share of `rows` trajectories) and train; RankDone(RANK_DONE)
                                         rank 0 has stopped (--learners_per_policy > 1, workers/batch_sources.py)
"""

from __future__ import annotations

import collections
import pickle
import queue
import select
import socket
import time
from typing import Any, Final, Literal, NamedTuple, Protocol

import faster_fifo

REQUEST: Final = 0
ACTIONS_READY: Final = 1
ROLLOUT: Final = 2
FREE_SLOTS: Final = 3
REPORT: Final = 4
STOP: Final = 5
RESEND: Final = 6
SAVE_BEST: Final = 7
SAVE_NOW: Final = 8
PBT_UPDATE: Final = 9
SET_REWARD_SHAPING: Final = 10
RANK_WORK: Final = 11
RANK_DONE: Final = 12
PARK_AFTER: Final = 13


class Request(NamedTuple):
    """Compute actions (and values) for the split's columns at [slot, t]."""

    kind: Literal[0]  # REQUEST
    actor_idx: int
    split_idx: int
    slot: int
    t: int
    has_truncations: bool  # also V(final observation) of the episodes truncated at t - 1
    gen: int
    seq: int

    @staticmethod
    def wire(actor_idx: int, split_idx: int, slot: int, t: int, has_truncations: bool, gen: int, seq: int) -> tuple:
        return (REQUEST, actor_idx, split_idx, slot, t, has_truncations, gen, seq)


class ActionsReady(NamedTuple):
    """The requests (split_idx, seq) of one actor that this policy has answered."""

    kind: Literal[1]  # ACTIONS_READY
    splits: list[tuple[int, int]]
    gen: int
    policy_id: int
    worker: int  # the answering policy worker, over all policies (the first index of the answer_* tensors)

    @staticmethod
    def wire(splits: list[tuple[int, int]], gen: int, policy_id: int, worker: int) -> tuple:
        return (ACTIONS_READY, splits, gen, policy_id, worker)


class Rollout(NamedTuple):
    """A finished slot for the learner; it goes back to the actor with FreeSlots."""

    kind: Literal[2]  # ROLLOUT
    actor_idx: int
    slot: int
    gen: int

    @staticmethod
    def wire(actor_idx: int, slot: int, gen: int) -> tuple:
        return (ROLLOUT, actor_idx, slot, gen)


class FreeSlots(NamedTuple):
    kind: Literal[3]  # FREE_SLOTS
    slots: list[int]
    gen: int

    @staticmethod
    def wire(slots: list[int], gen: int) -> tuple:
        return (FREE_SLOTS, slots, gen)


class SaveBest(NamedTuple):
    kind: Literal[7]  # SAVE_BEST
    metric_value: float

    @staticmethod
    def wire(metric_value: float) -> tuple:
        return (SAVE_BEST, metric_value)


class SaveNow(NamedTuple):
    kind: Literal[8]  # SAVE_NOW

    @staticmethod
    def wire() -> tuple:
        return (SAVE_NOW,)


class ParkAfter(NamedTuple):
    """A reproducible run stopping on Ctrl+C: the learner keeps the slots of its `iteration`-th iteration of this
    session (counted from 1), as at the end of its budget, so that the stop lands between two iterations."""

    kind: Literal[13]  # PARK_AFTER
    iteration: int

    @staticmethod
    def wire(iteration: int) -> tuple:
        return (PARK_AFTER, iteration)


class PbtUpdate(NamedTuple):
    kind: Literal[9]  # PBT_UPDATE
    hyperparams: dict[str, float]
    source_policy: int | None  # a replacement: the policy whose published weights the learner loads

    @staticmethod
    def wire(hyperparams: dict[str, float], source_policy: int | None) -> tuple:
        return (PBT_UPDATE, hyperparams, source_policy)


class SetRewardShaping(NamedTuple):
    kind: Literal[10]  # SET_REWARD_SHAPING
    policy_id: int
    coefficients: dict[str, float]

    @staticmethod
    def wire(policy_id: int, coefficients: dict[str, float]) -> tuple:
        return (SET_REWARD_SHAPING, policy_id, coefficients)


class Resend(NamedTuple):
    kind: Literal[6]  # RESEND

    @staticmethod
    def wire() -> tuple:
        return (RESEND,)


class RankWork(NamedTuple):
    """One iteration of a data-parallel learner group: this rank's slot columns ([] for none) of `rows` trajectories,
    the policy version and env frames the iteration starts from."""

    kind: Literal[11]  # RANK_WORK
    slots: list[int]
    columns: list[list[int]]  # per slot, the columns this rank copies
    rows: int
    version: int
    env_frames: int

    @staticmethod
    def wire(slots: list[int], columns: list[list[int]], rows: int, version: int, env_frames: int) -> tuple:
        return (RANK_WORK, slots, columns, rows, version, env_frames)


class RankDone(NamedTuple):
    kind: Literal[12]  # RANK_DONE

    @staticmethod
    def wire() -> tuple:
        return (RANK_DONE,)


class Report(NamedTuple):
    kind: Literal[4]  # REPORT
    role: str
    index: Any  # the sender's index: an int, or (policy_id, worker_idx) for policy workers
    report_kind: str  # "heartbeat", "samples", "train", ... (Runner lists them all)
    payload: Any

    @staticmethod
    def wire(role: str, index: Any, report_kind: str, payload: Any) -> tuple:
        return (REPORT, role, index, report_kind, payload)


class Stop(NamedTuple):
    kind: Literal[5]  # STOP

    @staticmethod
    def wire() -> tuple:
        return (STOP,)


Message = (
    Request
    | ActionsReady
    | Rollout
    | FreeSlots
    | SaveBest
    | SaveNow
    | ParkAfter
    | PbtUpdate
    | SetRewardShaping
    | Resend
    | RankWork
    | RankDone
    | Report
    | Stop
)
_RECORDS: dict[int, Any] = {
    REQUEST: Request,
    ACTIONS_READY: ActionsReady,
    ROLLOUT: Rollout,
    FREE_SLOTS: FreeSlots,
    REPORT: Report,
    STOP: Stop,
    RESEND: Resend,
    SAVE_BEST: SaveBest,
    SAVE_NOW: SaveNow,
    PARK_AFTER: ParkAfter,
    PBT_UPDATE: PbtUpdate,
    SET_REWARD_SHAPING: SetRewardShaping,
    RANK_WORK: RankWork,
    RANK_DONE: RankDone,
}


def decode(msg: tuple) -> Message:
    """The named record of a message as it arrived (the kind is its first element)."""
    return _RECORDS[msg[0]]._make(msg)


class Channel(Protocol):
    def put(self, msg: Any, timeout: float = ...) -> None: ...

    def get_many(self, block: bool = True, timeout: float = ..., max_messages: int = ...) -> list: ...


class SocketChannel:
    """A Unix SOCK_SEQPACKET socket pair: many writers, many readers, one whole message per record.

    The queue lives in the kernel, so a process killed in the middle of a put or get cannot leave a lock held
    and hang everyone else (faster-fifo's process-shared mutex can: measured in benchmarks/notebook.md). It is
    also cheaper per message (7.8 us against 12.4 us here: benchmarks/benchmark_channels.py)."""

    MAX_MESSAGE = 1 << 20

    def __init__(self, buffer_bytes: int = 4 << 20):
        self.reader, self.writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for sock in (self.reader, self.writer):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)  # capped by net.core.wmem_max
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        self.reader.setblocking(False)

    def put(self, msg: Any, timeout: float = 10.0) -> None:
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.writer.send(data, socket.MSG_DONTWAIT)
            return
        except BlockingIOError:
            pass
        # Full: wait for room, but never forever (the reader is gone or stuck). Another writer may take the room
        # first, so wait again until the deadline.
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([], [self.writer], [], remaining)[1]:
                raise queue.Full(f"channel full for {timeout} s")
            try:
                self.writer.send(data, socket.MSG_DONTWAIT)
                return
            except BlockingIOError:
                continue

    def get_many(self, block: bool = True, timeout: float = 0.1, max_messages: int = 1_000_000) -> list:
        out: list = []
        recv, loads = self.reader.recv, pickle.loads
        while len(out) < max_messages:
            try:
                out.append(loads(recv(self.MAX_MESSAGE)))
            except BlockingIOError:
                if out or not block:
                    break
                if not select.select([self.reader], [], [], timeout)[0]:
                    break
                block = False  # one wait per call
        return out

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


class FifoChannel:
    """faster-fifo queue (Sample Factory's transport), selectable with --message_queue=faster_fifo. Note: a
    process killed while it holds the queue's mutex (inside put/get) leaves it locked for everyone; the runner's
    worker restarts therefore assume the default socket channel."""

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
        out: list[Any] = []
        while self.q and len(out) < max_messages:
            out.append(self.q.popleft())
        return out

    def close(self) -> None:
        self.q.clear()


CHANNEL_TYPES = {"socket": SocketChannel, "faster_fifo": FifoChannel, "local": LocalChannel}


class Channels:
    """Every channel of a run, indexed by the receiving component."""

    def __init__(self, num_workers: int, num_policies: int, kind: str, learners_per_policy: int = 1):
        make = CHANNEL_TYPES[kind]
        self.report = make()
        self.actor = [make() for _ in range(num_workers)]
        self.policy = [make() for _ in range(num_policies)]  # shared by the policy workers of one policy
        self.learner = [make() for _ in range(num_policies)]  # rank 0 of each policy's learners
        # (policy, rank) -> inbox of the other ranks of a data-parallel learner group
        self.learner_ranks = {(p, r): make() for p in range(num_policies) for r in range(1, learners_per_policy)}

    def all(self) -> list:
        return [self.report, *self.actor, *self.policy, *self.learner, *self.learner_ranks.values()]

    def close(self) -> None:
        for c in self.all():
            c.close()


class Reporter:
    """Sends reports to the runner tagged with the sender's role and index."""

    def __init__(self, channel: Channel, role: str, index: Any):
        self.channel, self.role, self.index = channel, role, index

    def __call__(self, kind: str, payload: Any = None) -> None:
        self.channel.put(Report.wire(self.role, self.index, kind, payload))
