"""Host<->device copies without waits (algo/transfer.py): on a CPU device nothing is copied and reads are ready at
once, in order. The CUDA paths run in tests/integration/test_cuda.py."""

import torch

from sample_factory.algo.transfer import DeferredReads, PinnedStaging, host_read


def test_cpu_staging_passes_tensors_through():
    staging = PinnedStaging(torch.device("cpu"))
    batch = {"obs": {"obs": torch.ones(2, 3)}, "actions": torch.zeros(2)}
    out = staging.to_device(batch)
    assert out["obs"]["obs"] is batch["obs"]["obs"] and out["actions"] is batch["actions"]


def test_deferred_reads_keep_order_and_tags():
    reads = DeferredReads(torch.device("cpu"))
    for i in range(3):
        reads.put(("tag", i), torch.full((2,), float(i)))
    ready = reads.ready()
    assert [tag for tag, _ in ready] == [("tag", 0), ("tag", 1), ("tag", 2)]
    assert [float(x[0]) for _, x in ready] == [0.0, 1.0, 2.0]
    assert reads.ready() == [] and reads.drain() == []


def test_host_read_is_named_in_a_profile():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert host_read(torch.tensor([1.0, 2.0])) == [1.0, 2.0]
    assert any(e.name == "host_read" for e in prof.events())
