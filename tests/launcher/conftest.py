"""Helpers for the launcher tests: the launcher runs as a real subprocess (`python -m sample_factory.launcher`) in
its own session, its process tree is recorded by a polling thread (every descendant: train.py runs and their
components), and whatever is still alive of it is killed (by recorded pid) when the test ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
# A tiny CartPole run: a few seconds of training on one actor worker (CPUs reserved per run: 2).
TINY = "python train.py --env=CartPole-v1 --num_workers=1 --train_for_env_steps=10000 --report_interval_sec=1"


def write_sweep(path: Path, name: str, experiments: list[dict]) -> Path:
    """A YAML sweep (JSON is valid YAML, so no YAML writer is needed)."""
    path.write_text(json.dumps({"name": name, "experiments": experiments}, indent=2))
    return path


class LauncherRun:
    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        full_env = dict(os.environ)
        full_env.pop("SF_DEBUG", None)
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sample_factory.launcher", *args],
            cwd=REPO_ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.seen: dict[int, float] = {}  # pid -> create time of every descendant seen
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._poll, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def _poll(self) -> None:
        while self.proc.poll() is None:
            self.snapshot()
            time.sleep(0.2)

    def snapshot(self) -> None:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return
        for c in children:
            try:
                ct = c.create_time()
            except psutil.Error:
                continue
            with self._lock:
                self.seen.setdefault(c.pid, ct)

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._threads[0].join(timeout=10)
        return rc

    def wait_for(self, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if self.proc.poll() is not None:
                return predicate()
            time.sleep(0.2)
        return predicate()

    def alive_descendants(self) -> list[int]:
        alive = []
        with self._lock:
            seen = dict(self.seen)
        for pid, ct in seen.items():
            try:
                p = psutil.Process(pid)
                if abs(p.create_time() - ct) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.Error:
                pass
        return alive

    def kill(self) -> None:
        self.snapshot()
        for pid in [self.proc.pid, *self.alive_descendants()]:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.proc.stdout.close()


@pytest.fixture
def launcher():
    """Factory: launcher(args, env=None) -> LauncherRun; kills what is left of every run at teardown."""
    runs: list[LauncherRun] = []

    def start(args: list[str], env: dict[str, str] | None = None) -> LauncherRun:
        run = LauncherRun(args, env)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()


def load_summary(train_dir: Path, run_name: str) -> dict[str, dict]:
    data = json.loads((train_dir / f"sweep_{run_name}" / "summary.json").read_text())
    return {row["name"]: row for row in data["experiments"]}


def max_overlap(rows) -> int:
    """The most experiments running at one time, from their start/end timestamps."""
    events = []
    for r in rows:
        events += [(r["start"], 1), (r["end"], -1)]
    now = most = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        now += delta
        most = max(most, now)
    return most
