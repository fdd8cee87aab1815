"""A Ray that sample_factory starts itself listens on 127.0.0.1 only: a real local Ray started the way the
launcher's ray backend starts it (in a child process: Ray's state and variables stay out of the test process),
every listening socket of its processes (GCS, raylet, agents, workers, the driver) checked; and the other two
places that start Ray (--pbt_backend=ray, --sampler_nodes) go through the same start, with a cluster address
passed through untouched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sample_factory.launcher import ray_init

pytest.importorskip("ray", reason="Ray is not installed: pip install -e .[ray]")

REPO = Path(__file__).resolve().parents[2]

# Runs in a child: the launcher's run_ray with its job loop replaced by a look at the sockets of the started Ray.
_PROBE = """
import json, psutil
from sample_factory.launcher import ray_backend
from sample_factory.launcher.jobs import StopRequest

found = []

def look(ray, *args):
    ray.get(ray.remote(lambda: 1).remote())  # a worker process too
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    names = {p.pid: p.name() for p in procs}
    for c in psutil.net_connections(kind="inet"):
        if c.pid in names and c.laddr and (c.status == psutil.CONN_LISTEN or not c.raddr):
            found.append([names[c.pid], c.laddr.ip, c.laddr.port])
    return []

ray_backend._run = look
ray_backend.run_ray([], 1, StopRequest(), 5.0, lambda r: None, None, 1, 0)
print(json.dumps(found))
"""


def _loopback(ip: str) -> bool:
    import ipaddress

    a = ipaddress.ip_address(ip)
    return a.is_loopback or (a.version == 6 and a.ipv4_mapped is not None and a.ipv4_mapped.is_loopback)


@pytest.mark.timeout(300)
def test_a_locally_started_ray_listens_on_loopback_only():
    tmp = tempfile.mkdtemp(prefix="sfray")  # short: Ray's unix socket paths live under it
    # HOME: Ray writes its generated auth token under ~/.ray
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_TMPDIR": tmp, "HOME": tmp}
    env.pop("RAY_ADDRESS", None)
    try:
        p = subprocess.run(
            [sys.executable, "-c", _PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=240
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    sockets = json.loads(p.stdout.strip().splitlines()[-1])
    names = {name for name, _, _ in sockets}
    assert {"gcs_server", "raylet"} <= names, sockets  # Ray's own servers were seen: the check is not empty
    exposed = [s for s in sockets if not _loopback(s[1])]
    assert not exposed, f"listening beyond loopback: {exposed}"


class _FakeRay:
    def __init__(self):
        self.calls: list[dict] = []

    def init(self, **kwargs):
        self.calls.append(kwargs)


def test_a_local_start_binds_loopback_and_a_cluster_address_is_joined_as_given(monkeypatch, tmp_path):
    monkeypatch.setattr(ray_init, "loopback_only", lambda: None)  # (its effect is what the test above checks)
    monkeypatch.setenv("HOME", str(tmp_path))  # the auth token it makes
    ray = _FakeRay()
    ray_init.init_ray(ray, None, num_cpus=2, log_to_driver=False)
    assert ray.calls[-1] == {
        "_node_ip_address": "127.0.0.1",
        "include_dashboard": False,
        "dashboard_host": "127.0.0.1",
        "num_cpus": 2,
        "log_to_driver": False,
    }
    ray_init.init_ray(ray, "10.0.0.5:6379", log_to_driver=False)
    assert ray.calls[-1] == {"address": "10.0.0.5:6379", "log_to_driver": False}


def test_pbt_and_remote_samplers_start_ray_through_init_ray(monkeypatch):
    """Every place that calls ray.init does so through init_ray (a new one would start Ray on every interface)."""
    files = [*(REPO / "sample_factory").rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]
    callers = sorted(str(f.relative_to(REPO)) for f in files if "ray.init(" in f.read_text())
    assert callers == ["benchmarks/benchmark_remote.py", "sample_factory/launcher/ray_init.py"], callers
    for module in ("launcher/ray_backend.py", "pbt/ray_backend.py", "distributed/remote_samplers.py"):
        assert "init_ray(ray, " in (REPO / "sample_factory" / module).read_text(), module


def test_a_local_start_keeps_the_ray_auth_token_private(monkeypatch, tmp_path):
    """Ray writes ~/.ray/auth_token for a new local cluster with the default umask: readable by every user of the
    machine, who could then submit work to this user's Ray. It is made private first; an existing one is narrowed."""
    monkeypatch.setattr(ray_init, "loopback_only", lambda: None)
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    ray_init.init_ray(_FakeRay(), None)
    token = tmp_path / ".ray" / "auth_token"
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text()) == 64
    first = token.read_text()
    token.chmod(0o644)  # as Ray itself left it
    ray_init.init_ray(_FakeRay(), None)
    assert token.stat().st_mode & 0o777 == 0o600 and token.read_text() == first  # narrowed, never replaced
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    token.unlink()
    ray_init.init_ray(_FakeRay(), None)
    assert not token.exists()  # no token where Ray uses none
