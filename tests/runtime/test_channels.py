"""The two inter-process transports (`--message_queue=socket|faster_fifo`) against the same contract: every
message of every producer arrives once, in each producer's order, across processes; `get_many` honours
`max_messages` and returns [] after its timeout; a full channel raises queue.Full after the put timeout instead of
blocking forever; messages up to the documented size pass. The serial-mode LocalChannel keeps order too."""

from __future__ import annotations

import multiprocessing
import queue
import time

import pytest

from sample_factory.runtime.messages import CHANNEL_TYPES, Request

KINDS = ("socket", "faster_fifo")


def _produce(channel, producer: int, n: int) -> None:
    for i in range(n):
        channel.put(Request.wire(producer, 0, i, 0, False, 0, i))


def _drain(channel, expected: int, deadline_s: float = 30.0) -> list:
    out: list = []
    deadline = time.monotonic() + deadline_s
    while len(out) < expected and time.monotonic() < deadline:
        out += channel.get_many(timeout=0.1)
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_many_producers_across_processes(kind):
    ctx = multiprocessing.get_context("forkserver")
    channel = CHANNEL_TYPES[kind]()
    n, producers = 5000, 3
    procs = [ctx.Process(target=_produce, args=(channel, p, n)) for p in range(producers)]
    try:
        for p in procs:
            p.start()
        got = _drain(channel, n * producers)
        for p in procs:
            p.join(10)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        channel.close()
    assert len(got) == n * producers
    for producer in range(producers):
        seqs = [m[-1] for m in got if m[1] == producer]
        assert seqs == list(range(n)), f"producer {producer}: lost, duplicated or reordered messages"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", (*KINDS, "local"))
def test_get_many_limits_and_timeout(kind):
    channel = CHANNEL_TYPES[kind]()
    try:
        t0 = time.monotonic()
        assert channel.get_many(timeout=0.2) == []
        if kind != "local":  # the local channel never blocks
            assert time.monotonic() - t0 >= 0.15
        for i in range(10):
            channel.put(("x", i))
        time.sleep(0.05)
        first = channel.get_many(max_messages=4)
        rest = _drain(channel, 6, deadline_s=2)
        assert [m[1] for m in first + rest] == list(range(10)) and len(first) == 4
        big = ("blob", b"x" * 500_000)  # tracebacks and timing reports are far smaller
        channel.put(big)
        assert _drain(channel, 1, deadline_s=2) == [big]
    finally:
        channel.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_full_channel_raises_after_the_put_timeout(kind):
    channel = CHANNEL_TYPES[kind]()
    msg = ("blob", b"x" * 60_000)
    try:
        with pytest.raises(queue.Full):
            for _ in range(10_000):  # nobody reads: it fills up
                channel.put(msg, timeout=0.3)
    finally:
        channel.close()
