"""Starting or joining Ray for sample_factory (the launcher's ray backend, --pbt_backend=ray, --sampler_nodes).

Joining a cluster (an address given) is Ray's business: its head was started by `ray start` with the security
settings of that cluster. A Ray that sample_factory starts itself is for this machine only, so it listens on
127.0.0.1 alone: by default Ray's GCS, raylet, object manager, workers and dashboard agent listen on every interface
(0.0.0.0 / ::), where anyone who reaches the machine could submit work to it. Ray's switch for that is its
"no cluster" mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, the default on macOS and Windows): the node uses the
loopback address, and every process it starts inherits the variable and binds there too.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"
NO_CLUSTER_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def loopback_only() -> None:
    """Make the Ray processes this process starts from now on listen on the loopback interface only."""
    os.environ.update(NO_CLUSTER_ENV)  # inherited by the GCS, raylet, agents and workers
    import ray._private.ray_constants as ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # read at import: in case ray was imported before the variable was set


def private_auth_token() -> Path | None:
    """Ray makes ~/.ray/auth_token for a new local cluster with the process's umask, readable by every user of the
    machine (whoever reads it may submit work to this user's Ray). Made here first with mode 0600 (Ray's format, 64
    hex digits; never replacing one), or an existing one of this user's narrowed to 0600. None where Ray uses no
    token file (RAY_AUTH_MODE other than token, or the token given by RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH)."""
    if os.environ.get("RAY_AUTH_MODE", "token").lower() != "token" or {"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} & set(
        os.environ
    ):
        return None
    path = Path.home() / ".ray" / "auth_token"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        st = path.stat()
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            path.chmod(0o600)
        return path
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def init_ray(ray: Any, address: str | None, **kwargs: Any) -> None:
    """`ray.init`: connect to the cluster at `address`, or (None) start a local Ray bound to 127.0.0.1, without the
    dashboard. `kwargs` go to ray.init (a local start's resources, logging)."""
    if address:
        ray.init(address=address, **kwargs)
        return
    loopback_only()
    private_auth_token()
    ray.init(_node_ip_address=LOOPBACK, include_dashboard=False, dashboard_host=LOOPBACK, **kwargs)
