"""Fixtures shared by several test packages.

`ray_cluster`: the Ray cluster the Ray tests (launcher, PBT across nodes, remote samplers) run on: two real nodes
on loopback (sample_factory/distributed/local_cluster.py), 2 CPUs each, one per test module; skips without Ray."""

from __future__ import annotations

import pytest

CPUS_PER_NODE = 2


@pytest.fixture(scope="module")
def ray_cluster():
    """A LoopbackCluster: .address (for --ray_address), .env (what a driver of it needs), .cluster."""
    pytest.importorskip("ray", reason="Ray is not installed: pip install -e .[ray]")
    from sample_factory.distributed.local_cluster import loopback_cluster

    with loopback_cluster(num_nodes=2, num_cpus=CPUS_PER_NODE) as cluster:
        yield cluster
