"""Fixtures shared by test packages: `ray_cluster`, a real two-node Ray cluster on loopback (used by the launcher's
ray backend tests and the PBT-across-nodes tests)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

CPUS_PER_NODE = 2


@pytest.fixture(scope="module")
def ray_cluster():
    """(the head's address, the environment a driver of this cluster needs)."""
    pytest.importorskip("ray", reason="Ray is not installed: pip install -e .[ray]")
    tmp = tempfile.mkdtemp(prefix="sfray")  # short: Ray's unix socket paths live under it
    os.makedirs(os.path.join(tmp, "ray"))
    # RAY_TMPDIR: every file of this cluster (sessions, the current-cluster address file) under tmp, not /tmp/ray
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": tmp}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # before ray reads its constants; the cluster's processes inherit it
    import ray._private.ray_constants as ray_constants
    from ray.cluster_utils import Cluster

    ray_constants.ENABLE_RAY_CLUSTER = False  # in case ray was imported before the variable was set
    common = {"num_cpus": CPUS_PER_NODE, "node_ip_address": "127.0.0.1", "temp_dir": os.path.join(tmp, "ray")}
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={**common, "include_dashboard": False})
        cluster.add_node(**common)
        cluster.wait_for_nodes()
        yield cluster.address, env
    finally:
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
