"""slurm_local.sh's folder (without Slurm: stand-in daemons that fail to start): the daemons run as root and write
their configuration, key, state and logs there, so it must be a fresh private folder, never a fixed or shared path
where another local user could have planted symlinks first."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "sample_factory" / "launcher" / "slurm_local.sh"
CANNOT = 3

# stand-ins for the Slurm and munge commands: "installed", but no daemon starts
_FAILING = ("slurmctld", "slurmd", "munged", "sbatch", "sinfo", "squeue", "munge", "unmunge")
_MUNGEKEY = '#!/bin/sh\nfor a; do case "$a" in --keyfile=*) echo key > "${a#--keyfile=}";; esac; done\n'


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, str]:
    """PATH with the stand-ins first, and HOME / TMPDIR inside tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in _FAILING:
        (bin_dir / name).write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "mungekey").write_text(_MUNGEKEY)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    for d in ("home", "tmp"):
        (tmp_path / d).mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SF_SLURM_DIR", "XDG_STATE_HOME")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"))
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_each_cluster_gets_a_fresh_private_folder(tmp_path, sandbox):
    p = _run(sandbox, "start")
    assert p.returncode == CANNOT and "munged did not start" in p.stderr, p.stderr  # the stand-in munged fails
    conf = Path(_run(sandbox, "env").stdout.strip().split("=", 1)[1])
    folder = conf.parent
    assert folder.parent == tmp_path / "tmp" and folder.name.startswith("sf_slurm."), folder
    st = folder.lstat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert "SlurmctldPort=" in conf.read_text()
    assert (folder / "munge" / "munge.key").read_text() == "key\n"  # its own key, not /etc/munge's
    # the same folder again (stop / env / a second start find it), until it is gone
    assert _run(sandbox, "start").returncode == CANNOT
    assert sorted((tmp_path / "tmp").iterdir()) == [folder]
    assert _run(sandbox, "stop").returncode == 0


@pytest.mark.parametrize("planted", ["world-writable", "symlink"])
def test_a_folder_someone_else_could_write_is_refused(tmp_path, sandbox, planted):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    other = tmp_path / "planted"
    other.mkdir()
    (other / "slurm.conf.tmp").symlink_to(victim)  # what a local user would plant before root writes there
    (other / "apt.log").symlink_to(victim)
    if planted == "world-writable":
        other.chmod(0o777)
        folder = other
    else:
        other.chmod(0o700)
        folder = tmp_path / "link"
        folder.symlink_to(other)
    p = _run({**sandbox, "SF_SLURM_DIR": str(folder)}, "start")
    assert p.returncode == CANNOT, p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"CANNOT: {folder} (SF_SLURM_DIR) is not a private folder")
    assert victim.read_text() == "precious\n"
    assert _run({**sandbox, "SF_SLURM_DIR": str(folder)}, "stop").returncode == CANNOT  # nor its pid files trusted


def test_env_without_a_cluster_says_so(sandbox):
    p = _run(sandbox, "env")
    assert p.returncode == 1 and "no cluster started" in p.stderr and not p.stdout
