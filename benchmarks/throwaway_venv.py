"""A throwaway venv for running another library beside this one (benchmark_dqn: Stable-Baselines3; benchmark_sf2:
Sample Factory 2). Always put `torch==2.13.0` in the first install group: it resolves to the local CPU wheel,
while any other torch spec makes pip download the CUDA build."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def run_in(py: Path, source: str) -> subprocess.CompletedProcess:
    """`source` run by the venv's python `py`, from the venv's folder and without PYTHONPATH: neither this checkout
    nor the caller's path shadows the venv's packages (Sample Factory 2 is also `sample_factory`)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(py), "-c", source], capture_output=True, text=True, cwd=py.parents[1], env=env)


def works(py: Path, probe: str) -> bool:
    """Whether `probe` (python source) runs without error in the venv's python `py`."""
    return py.exists() and run_in(py, probe).returncode == 0


def make_venv(
    path: Path,
    installs: Sequence[Sequence[str]],
    constraints: Path | None = None,
    probe: str | None = None,
    after_install: Callable[[Path], None] | None = None,
) -> Path:
    """The python of a venv at `path`. An existing venv is reused as it is when `probe` runs in it (or, without a
    probe, when its python exists); otherwise the venv is created if missing, each group of `installs` is installed
    by one `pip install` (in order, pinned by `constraints` if given), `after_install(python)` runs, and `probe`
    must then pass (RuntimeError with its stderr if not)."""
    py = path / "bin" / "python"
    if py.exists() and (probe is None or works(py, probe)):
        return py
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q", *(["-c", str(constraints)] if constraints else [])]
    for group in installs:
        subprocess.run([*pip, *group], check=True)
    if after_install is not None:
        after_install(py)
    if probe is not None:
        out = run_in(py, probe)
        if out.returncode != 0:
            raise RuntimeError(f"the venv at {path} does not work after installing:\n{out.stderr[-3000:]}")
    return py
