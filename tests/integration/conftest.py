"""Helpers for the integration tests: `train.py` runs as a real subprocess (its own session, so signals and
process trees are real), watched from the test process with psutil.

`TrainRun` starts the run, reads stdout/stderr in threads, and polls the run's process tree in a thread: every
descendant (pid, create time, every name it had: components rename themselves sf_actor_0 etc. after the fork)
and the /dev/shm objects the tree maps. Shared-memory objects are attributed to this run by inode (the runner
maps a semaphore under glibc's temporary name, its children under the final name; the inode is the same) and
by pid-tagged names (pym-<pid>-*, torch_<pid>_*). Other sessions may train on this machine at the same time,
so a plain before/after diff of /dev/shm would blame their objects on this run.

The `train_run` fixture starts runs and, whatever happens in the test, kills what is still alive of them
(only the pids this test started and recorded) when the test ends.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from sample_factory.runtime.fork_server import NAME as FORK_SERVER_NAME

REPO_ROOT = Path(__file__).resolve().parents[2]
SHM = Path("/dev/shm")
COMPONENT_NAMES = ("sf_actor_0", "sf_actor_1", "sf_policy_0_0", "sf_learner_0")
# Helpers that outlive the runner for a moment (forkserver, resource tracker) get this long to exit.
HELPER_EXIT_GRACE_S = 15.0

_PROGRESS_STEPS = re.compile(r"env steps: (\d+)")
# "samples trained: N" or "samples collected/trained: M/N"
_PROGRESS_TRAINED = re.compile(r"samples (?:collected/)?trained: (?:\d+/)?(\d+)")
_LAG = re.compile(r"lag min/avg/max ([0-9.]+)/([0-9.]+)/([0-9.]+)")


@dataclass
class SeenProcess:
    pid: int
    create_time: float
    names: set[str] = field(default_factory=set)

    def handle(self) -> psutil.Process | None:
        """The process if it still runs (a zombie counts as exited; pid reuse is detected by create time)."""
        try:
            p = psutil.Process(self.pid)
            if abs(p.create_time() - self.create_time) > 0.01 or p.status() == psutil.STATUS_ZOMBIE:
                return None
            return p
        except psutil.Error:
            return None


def _shm_inodes_mapped_by(pid: int) -> set[int]:
    inodes = set()
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith(str(SHM) + "/"):
                    inodes.add(int(parts[4]))
    except OSError:
        pass
    return inodes


def _like_fork_server(p: psutil.Process) -> bool:
    name = p.name()
    if name == FORK_SERVER_NAME:
        return True
    return not name.startswith("sf_") and any("multiprocessing.forkserver" in arg for arg in p.cmdline())


def is_fork_server(p: psutil.Process) -> bool:
    """multiprocessing's fork server: forked from the runner (named FORK_SERVER_NAME, the runner's command line) or
    spawned by it (`python -c "from multiprocessing.forkserver import main; ..."`). The fork server's children share
    its name or command line until they name themselves sf_*; their parent is the fork server."""
    try:
        if not _like_fork_server(p):
            return False
        parent = p.parent()
        return parent is None or not _like_fork_server(parent)
    except psutil.Error:
        return False


def is_runner(p: psutil.Process) -> bool:
    """A launcher-started `train.py` itself: the fork server and the components forked from it have its command
    line, but are named sf-forkserver and sf_* (until it names itself, a new component has the fork server's name)."""
    try:
        return not p.name().startswith(("sf_", FORK_SERVER_NAME))
    except psutil.Error:
        return False


def is_resource_tracker(p: psutil.Process, cmdline: list[str] | None = None) -> bool:
    """multiprocessing's resource tracker (always a fresh interpreter, `python -c "from multiprocessing.resource_tracker
    import main; ..."`). `cmdline`: the one already read, for a process that may exit before it is read again."""
    try:
        return any("multiprocessing.resource_tracker" in arg for arg in (cmdline or p.cmdline()))
    except psutil.Error:
        return False


def is_mp_helper(p: psutil.Process, cmdline: list[str] | None = None) -> bool:
    """multiprocessing's fork server or resource tracker: they exit a moment after the last process holding their
    pipes does."""
    return is_resource_tracker(p, cmdline) or is_fork_server(p)


def _fork_server_tmpdirs(p: psutil.Process) -> set[Path]:
    """The pymp-* dir of a multiprocessing fork server's socket (bound by the runner before the fork server
    starts, so it exists when the process is first seen); empty for any other process."""
    try:
        if not is_fork_server(p):
            return set()
        paths = [Path(c.laddr) for c in p.net_connections(kind="unix") if isinstance(c.laddr, str) and c.laddr]
    except psutil.Error:
        return set()
    return {path.parent for path in paths if path.parent.name.startswith("pymp-")}


def shm_entries() -> dict[str, int]:
    """name -> inode of every /dev/shm entry."""
    out = {}
    for e in os.scandir(SHM) if SHM.is_dir() else []:
        try:
            out[e.name] = e.inode()
        except OSError:
            pass
    return out


class TrainRun:
    def __init__(
        self,
        args: list[str],
        train_dir: Path,
        experiment: str = "x",
        env_id: str = "CartPole-v1",
        extra_env: dict[str, str] | None = None,
    ):
        self.train_dir, self.experiment = Path(train_dir), experiment
        self.argv = [f"--env={env_id}", f"--train_dir={train_dir}", f"--experiment={experiment}", *args]
        env = dict(os.environ)
        env.pop("SF_DEBUG", None)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra_env or {})
        self.shm_before = shm_entries()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "train.py", *self.argv],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.main = SeenProcess(self.proc.pid, psutil.Process(self.proc.pid).create_time())
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self.seen: dict[int, SeenProcess] = {}
        self.shm_inodes: set[int] = set()
        # the runner's multiprocessing temp dirs (pymp-*), read from the fork server's listening socket
        self.mp_tmpdirs: set[Path] = set()
        self._lock = threading.Lock()
        self.exited_at: float | None = None
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout_lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr_lines), daemon=True),
            threading.Thread(target=self._poll_tree, daemon=True),
        ]
        for t in self._threads:
            t.start()

    # ---- watching -----------------------------------------------------------------------------------------
    def _read(self, stream, lines: list[str]) -> None:
        for line in stream:
            with self._lock:
                lines.append(line.rstrip("\n"))

    def _poll_tree(self) -> None:
        last_maps = 0.0
        while self.proc.poll() is None:
            self.snapshot_tree(scan_maps=time.monotonic() - last_maps > 0.5)
            if time.monotonic() - last_maps > 0.5:
                last_maps = time.monotonic()
            time.sleep(0.1)

    def snapshot_tree(self, scan_maps: bool = True) -> None:
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return
        for c in children:
            try:
                ct, name = c.create_time(), c.name()
            except psutil.Error:
                continue
            with self._lock:
                sp = self.seen.setdefault(c.pid, SeenProcess(c.pid, ct))
                # new, or renamed since: a forked fork server is first seen with the runner's name and command line
                # (a loaded CI machine showed it so), and is recognizable only once it has named itself
                renamed = abs(sp.create_time - ct) < 0.01 and name not in sp.names
                if renamed:
                    sp.names.add(name)
            if renamed:
                tmpdirs = _fork_server_tmpdirs(c)
                with self._lock:
                    self.mp_tmpdirs |= tmpdirs
        if scan_maps:
            inodes = set()
            for pid in [self.proc.pid, *(c.pid for c in children)]:
                inodes |= _shm_inodes_mapped_by(pid)
            with self._lock:
                self.shm_inodes |= inodes

    @property
    def output(self) -> str:
        with self._lock:
            return "\n".join(self.stdout_lines + self.stderr_lines)

    def names_seen(self) -> set[str]:
        with self._lock:
            return set().union(*(sp.names for sp in self.seen.values()))

    def progress_lines(self) -> list[str]:
        with self._lock:
            return [ln for ln in self.stdout_lines if "FPS 10s/60s/300s" in ln]

    def wait_until(self, predicate: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            if self.proc.poll() is not None:
                return predicate()
            time.sleep(poll)
        return predicate()

    def wait(self, timeout: float) -> int:
        """Exit code; raises subprocess.TimeoutExpired when the run is still going after `timeout` s."""
        rc = self.proc.wait(timeout=timeout)
        if self.exited_at is None:
            self.exited_at = time.monotonic()
        for t in self._threads[:2]:
            t.join(timeout=10)
        return rc

    def signal(self, sig: int, group: bool = False) -> None:
        if group:
            os.killpg(self.proc.pid, sig)  # the run's own session/group (start_new_session=True)
        else:
            self.proc.send_signal(sig)

    # ---- artifacts ----------------------------------------------------------------------------------------
    @property
    def exp_dir(self) -> Path:
        return self.train_dir / self.experiment

    def checkpoints(self) -> list[Path]:
        from sample_factory.experiment.checkpoints import list_checkpoints

        return list_checkpoints(self.exp_dir / "checkpoint_p0")

    def progress_rows(self) -> list[dict[str, str]]:
        with open(self.exp_dir / "progress.csv", newline="") as f:
            return list(csv.DictReader(f))

    # ---- leftovers ----------------------------------------------------------------------------------------
    def alive_descendants(self) -> list[tuple[int, set[str]]]:
        with self._lock:
            seen = list(self.seen.values())
        return [(sp.pid, sp.names) for sp in seen if sp.handle() is not None]

    def leftover_shm(self) -> list[str]:
        left = []
        pid_tags = {str(self.proc.pid), *(str(pid) for pid in self.seen)}
        for name, inode in shm_entries().items():
            if name in self.shm_before and self.shm_before[name] == inode:
                continue
            tagged = re.match(r"^(?:pym-|torch_)(\d+)[-_]", name)
            if inode in self.shm_inodes or (tagged and tagged.group(1) in pid_tags):
                left.append(name)
        return left

    def assert_no_leftovers(self) -> None:
        """Call after the run has exited: every recorded component process is gone at once (the runner joins
        them), helpers (forkserver, resource tracker) within a short grace, and no /dev/shm object of this run
        and no multiprocessing temp dir of the runner (the fork server's socket) remains."""
        assert self.proc.poll() is not None, "the run is still going"
        components = [(pid, names) for pid, names in self.alive_descendants() if names & set(COMPONENT_NAMES)]
        assert not components, f"component processes outlived the runner: {components}"
        deadline = time.monotonic() + HELPER_EXIT_GRACE_S
        while (self.alive_descendants() or self.leftover_shm() or self.leftover_tmpdirs()) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert not self.alive_descendants(), f"processes of the run still alive: {self.alive_descendants()}"
        assert not self.leftover_shm(), f"/dev/shm objects of the run left behind: {self.leftover_shm()}"
        assert not self.leftover_tmpdirs(), f"multiprocessing temp dirs left behind: {self.leftover_tmpdirs()}"

    def leftover_tmpdirs(self) -> list[Path]:
        with self._lock:
            return sorted(d for d in self.mp_tmpdirs if d.exists())

    def kill(self) -> None:
        """Last-resort cleanup: SIGKILL the run and every descendant recorded (by pid, checked by create time), and
        remove the runner's multiprocessing temp dirs (nobody is left to do it)."""
        self.snapshot_tree(scan_maps=False)
        for sp in [self.main, *list(self.seen.values())]:
            p = sp.handle()
            if p is not None:
                try:
                    p.kill()
                except psutil.Error:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for s in (self.proc.stdout, self.proc.stderr):
            if s:
                s.close()
        for d in self.leftover_tmpdirs():
            shutil.rmtree(d, ignore_errors=True)

    def describe(self, tail: int = 40) -> str:
        lines = self.output.splitlines()
        return f"argv: {' '.join(self.argv)}\nlast {tail} lines of output:\n" + "\n".join(lines[-tail:])


@pytest.fixture
def train_run():
    """Factory: train_run(args, train_dir) -> TrainRun. Kills whatever is left of every run at teardown."""
    runs: list[TrainRun] = []

    def start(args: list[str], train_dir: Path, **kwargs) -> TrainRun:
        run = TrainRun(args, train_dir, **kwargs)
        runs.append(run)
        return run

    yield start
    for run in runs:
        run.kill()


# ---- parsing helpers ---------------------------------------------------------------------------------------
def last_int(pattern: re.Pattern, lines: list[str]) -> int | None:
    for line in reversed(lines):
        m = pattern.search(line)
        if m:
            return int(m.group(1))
    return None


def progress_env_steps(run: TrainRun) -> int | None:
    return last_int(_PROGRESS_STEPS, run.progress_lines())


def progress_samples_trained(run: TrainRun) -> int | None:
    return last_int(_PROGRESS_TRAINED, run.progress_lines())


def lag_triples(run: TrainRun) -> list[tuple[float, float, float]]:
    return [tuple(map(float, m.groups())) for ln in run.progress_lines() for m in [_LAG.search(ln)] if m]


def tensorboard_tags(summary_dir: Path) -> set[str]:
    """Scalar tags in the TFRecord event files of a summary folder (parsed with tensorboardX's protobufs)."""
    from tensorboardX.proto import event_pb2

    tags: set[str] = set()
    for path in sorted(summary_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        i = 0
        while i + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            if i + 12 + n + 4 > len(data):
                break  # a record still being written
            ev = event_pb2.Event()
            ev.ParseFromString(data[i + 12 : i + 12 + n])
            tags.update(v.tag for v in ev.summary.value)
            i += 12 + n + 4
    return tags


def load_checkpoint_into_fresh_model(path: Path, argv: list[str]):
    """Build the model from the same flags as the run, load the checkpoint strictly, and run one forward pass.
    Returns (model, action params, values)."""
    import gymnasium as gym
    import torch

    from sample_factory.config import parse_cfg
    from sample_factory.model.actor_critic import ActorCritic

    cfg = parse_cfg(argv)
    env = gym.make(cfg.env)
    try:
        obs, _ = env.reset(seed=0)
        model = ActorCritic(cfg, env.observation_space, env.action_space)
        state = torch.load(path, weights_only=False, map_location="cpu")
        model.load_state_dict(state["model"])
        model.eval()
        with torch.no_grad():
            x = torch.as_tensor(obs).unsqueeze(0)
            h = torch.zeros(1, model.rnn_state_size) if model.recurrent else None
            params, values, _ = model.forward_step(x, h)
            action = model.distribution(params).sample()
        assert env.action_space.contains(int(action.item())), action
    finally:
        env.close()
    return model, params, values


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}
