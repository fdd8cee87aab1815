"""`python -m benchmarks.benchmark_channels`: the two inter-process transports measured in one run, the
numbers behind docs/architecture.md's choice of the socket channel as the default (`--message_queue`).

- cost per message: one producer process streams N request tuples (as actor workers send them) to this process,
  pickling included; microseconds per message, and the faster-fifo / socket ratio;
- kill safety: a producer putting as fast as it can, while a consumer process drains the channel, is SIGKILLed at a
  random moment; then the consumer must stop between two reads and a fresh process must put and get one message,
  each within a few seconds. A transport whose lock the killed producer held hangs there. The count of hung trials
  is printed per transport.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

from sample_factory.runtime.messages import CHANNEL_TYPES, Request

KINDS = ("socket", "faster_fifo")


def _stream(channel, n: int) -> None:
    put = channel.put
    for i in range(n):
        put(Request.wire(i % 64, i % 2, i % 512, i % 32, False, 0, i))


def _flood(channel, payload_bytes: int) -> None:
    i, blob = 0, b"x" * payload_bytes
    while True:  # until SIGKILLed; a full channel raises after its timeout: keep going
        try:
            msg = Request.wire(0, 0, i % 512, i % 32, False, 0, i)
            channel.put(msg + (blob,) if payload_bytes else msg, timeout=0.5)
        except Exception:
            pass
        i += 1


def _drain(channel, stop) -> None:
    """A consumer like a policy worker: reads until told to stop (between two reads)."""
    while not stop.is_set():
        channel.get_many(timeout=0.005)
    os._exit(0)


def _probe(channel) -> None:
    """Drain what the killed producer left, then one put and get: returns only if the channel still works."""
    while channel.get_many(block=False):
        pass
    channel.put(("probe",), timeout=2.0)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if ("probe",) in channel.get_many(timeout=0.1):
            os._exit(0)
    os._exit(3)


def us_per_message(kind: str, n: int, ctx) -> float:
    channel = CHANNEL_TYPES[kind]()
    producer = ctx.Process(target=_stream, args=(channel, n))
    try:
        received = 0
        producer.start()
        first = channel.get_many(timeout=30.0)  # start the clock at the first message (process start excluded)
        t0, received = time.perf_counter(), len(first)
        while received < n:
            received += len(channel.get_many(timeout=1.0))
        elapsed = time.perf_counter() - t0
        producer.join(10)
        return 1e6 * elapsed / max(received - len(first), 1)
    finally:
        if producer.is_alive():
            producer.kill()
        channel.close()


def kill_trial(kind: str, ctx, rng: random.Random, payload_bytes: int = 0, probe_timeout: float = 5.0) -> bool:
    """True if the channel hung after a producer was SIGKILLed in the middle of putting."""
    channel = CHANNEL_TYPES[kind]()
    stop = ctx.Event()
    flood = ctx.Process(target=_flood, args=(channel, payload_bytes))
    drain = ctx.Process(target=_drain, args=(channel, stop))
    probe = None
    try:
        drain.start()
        flood.start()
        # A consumer drains while it puts, so it is always busy putting (a full queue would park it waiting,
        # outside any lock); it is killed at a random moment.
        time.sleep(0.3 + rng.random() * 0.3)
        os.kill(flood.pid, signal.SIGKILL)
        flood.join(5)
        stop.set()
        drain.join(probe_timeout)  # a consumer stuck on a lock the dead producer held never gets here
        if drain.is_alive():
            return True
        probe = ctx.Process(target=_probe, args=(channel,))
        probe.start()
        probe.join(probe_timeout)
        return probe.is_alive() or probe.exitcode != 0
    finally:
        for p in (flood, drain, probe):
            if p is not None and p.is_alive():
                p.kill()
                p.join(5)
        channel.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000, help="Messages streamed per transport.")
    p.add_argument("--kill_trials", type=int, default=20, help="Producer kills per transport.")
    p.add_argument(
        "--kill_payload_bytes",
        type=int,
        default=0,
        help="Bytes added to each message of the killed producer (0: request tuples; larger messages keep a "
        "transport's lock held longer per put).",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output", type=str, default=None, help="Also write the results as JSON here.")
    args = p.parse_args(argv)
    ctx = multiprocessing.get_context("forkserver")
    rng = random.Random(args.seed)
    results: dict[str, dict] = {}
    for kind in KINDS:
        us = us_per_message(kind, args.messages, ctx)
        hung = sum(kill_trial(kind, ctx, rng, args.kill_payload_bytes) for _ in range(args.kill_trials))
        results[kind] = {
            "us_per_message": us,
            "hung_after_kill": hung,
            "kill_trials": args.kill_trials,
            "kill_payload_bytes": args.kill_payload_bytes,
        }
        print(
            f"{kind}: {us:.2f} us per message ({args.messages} messages), hung after a producer kill in "
            f"{hung} of {args.kill_trials} trials",
            flush=True,
        )
    ratio = results["faster_fifo"]["us_per_message"] / results["socket"]["us_per_message"]
    print(f"faster_fifo / socket time per message: {ratio:.2f}")
    if args.output:
        Path(args.output).write_text(json.dumps({"results": results, "fifo_over_socket": ratio}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
