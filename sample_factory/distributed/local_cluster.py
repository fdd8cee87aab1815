"""A real multi-node Ray cluster on one machine (Ray's own cluster utilities), for tests and benchmarks: a head
node and more nodes, all on 127.0.0.1, every file under a short temporary folder.

RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray's driver from swapping a loopback address for the machine's outward
one; RAY_TMPDIR keeps every file of the cluster (sessions, the current-cluster address file, Unix sockets, whose
paths must be short) under the temporary folder. Processes started while the cluster is up (train.py runs) get
both through `env`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sample_factory.launcher.ray_init import LOOPBACK, NO_CLUSTER_ENV, loopback_only


@dataclass
class LoopbackCluster:
    address: str  # the head's host:port, what --ray_address takes
    env: dict[str, str]  # environment a driver of this cluster needs
    cluster: Any  # ray.cluster_utils.Cluster (add_node / remove_node)
    node_args: dict


@contextlib.contextmanager
def loopback_cluster(num_nodes: int = 2, num_cpus: int = 2) -> Iterator[LoopbackCluster]:
    tmp = tempfile.mkdtemp(prefix="sfray")  # short: Ray's unix socket paths live under it
    os.makedirs(os.path.join(tmp, "ray"))
    env = {**NO_CLUSTER_ENV, "RAY_TMPDIR": tmp}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the cluster's processes inherit it
    cluster = None
    try:
        from ray.cluster_utils import Cluster

        loopback_only()
        common: dict[str, Any] = {
            "num_cpus": num_cpus,
            "node_ip_address": LOOPBACK,
            "temp_dir": os.path.join(tmp, "ray"),
        }
        cluster = Cluster(initialize_head=True, head_node_args={**common, "include_dashboard": False})
        for _ in range(num_nodes - 1):
            cluster.add_node(**common)
        cluster.wait_for_nodes()
        yield LoopbackCluster(cluster.address, env, cluster, common)
    finally:
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
