"""The experiment folder: one run at a time (a lock), resume / restart / overwrite, and cfg.json.

On resume (the default when the folder exists) the saved cfg.json is the base: flags typed now override it where
that is safe, and are refused where they would not fit the saved checkpoints (the model architecture, the env).
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing.reduction
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from sample_factory.config import Config, ConfigError, all_options, experiment_name_problem, finalize_cfg
from sample_factory.config.option_types import int_list, str2bool, str_list

# Changing these would make the saved checkpoints unusable or meaningless.
UNSAFE_ON_RESUME = (
    "env",
    "algo",  # the checkpoints hold one algorithm's state (DQN: the target network and the replay buffer)
    "encoder_mlp_layers",
    "encoder_custom",
    "encoder_conv_architecture",
    "dueling",  # DQN: the policy head holds advantages (dueling) or Q itself; the shapes are the same
    "obs_keys",  # the model's inputs
    "nonlinearity",
    "use_rnn",
    "rnn_type",
    "rnn_size",
    "rnn_num_layers",
    "actor_critic_share_weights",
    "adaptive_stddev",  # the model's parameters: a log-std, a head for it, or gSDE's sigma matrix
    "use_sde",
    "normalize_input",
    "normalize_returns",
    "num_policies",
)
# Bookkeeping that always comes from the current command.
_NOT_FROM_SAVED = ("command_line", "cli_flags", "restart_behavior", "train_dir", "experiment", "device")


DEFAULT_TRAIN_DIR = "./train_dir"  # the default of --train_dir


class ExperimentError(RuntimeError):
    """A problem with the experiment folder; the message says what to do."""


def experiment_dir(cfg: Config) -> Path:
    assert cfg.experiment is not None, "finalize_cfg names the experiment"
    return Path(cfg.train_dir) / cfg.experiment


def resolve_experiment_dir(experiment: str | Path, train_dir: str | Path | None = None) -> Path:
    """For tools that take an experiment name: <train_dir>/<experiment> when train_dir is given; otherwise
    `experiment` itself if it is an experiment folder, else ./train_dir/<experiment> (the training default)."""
    if train_dir is not None:
        return Path(train_dir) / experiment
    if (Path(experiment) / "cfg.json").exists():
        return Path(experiment)
    return Path(DEFAULT_TRAIN_DIR) / experiment


class ExperimentLock:
    """An flock on <experiment>/.lock, held by the runner and by every component process it starts (they get the
    same open file, `for_child`), so the kernel drops it only once the last process of the run has exited or been
    killed. A runner killed with SIGKILL leaves its learner running for a few seconds (it notices, saves a final
    checkpoint, exits): a new run waits for that instead of writing beside it. A stale lock file from a crashed run
    is simply taken over."""

    def __init__(self, exp_dir: Path):
        self.path = exp_dir / ".lock"
        self.fd: int | None = None

    def acquire(self, wait_s: float = 0.0, log: Callable[[str], None] | None = None) -> None:
        """Take the lock. Held by a live runner: refused at once. Held only by processes of a runner that is gone:
        waits up to `wait_s` for them to exit (saying so through `log`), then refuses, naming them."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ExperimentError(f"cannot write to train_dir {self.path.parent}: {e.strerror}") from None
        try:
            self._lock_or_wait(fd, wait_s, log)
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd

    def _lock_or_wait(self, fd: int, wait_s: float, log: Callable[[str], None] | None) -> None:
        if _try_flock(fd):
            return
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        alive, others = self._runner_alive(holder)
        if alive:
            raise self._held_by(holder or "another process")
        if log is not None:
            log(
                f"the previous run of {self.path.parent} (pid {holder}) is gone, but its processes "
                f"{_pids(others)} still hold the lock (saving a final checkpoint): waiting up to {wait_s:.0f} s"
            )
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if _try_flock(fd):
                return
        others = lock_holders(self.path)
        raise ExperimentError(
            f"the previous run of {self.path.parent} (pid {holder}) is gone, but its processes {_pids(others)} "
            f"still hold the lock {self.path} after {wait_s:.0f} s: wait for them to exit, or stop them "
            f"(kill {' '.join(map(str, others)) or '<pids>'})"
        )

    def for_child(self) -> InheritedLock:
        """What a component process is given so that it holds this lock until it exits."""
        assert self.fd is not None, "the lock is not held"
        return InheritedLock(self.fd)

    def check_free(self) -> None:
        """Raise the error `acquire` would if another run holds the lock now; takes nothing (train.py asks this
        before its slow start, the runner then acquires)."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError:
            return  # no lock file: free (a folder that cannot be written is reported by acquire)
        try:
            if not _try_flock(fd):
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                if self._runner_alive(holder)[0]:  # else only a killed run's processes: acquire waits for them
                    raise self._held_by(holder or "another process")
        finally:
            os.close(fd)  # drops the probe's lock too

    def _runner_alive(self, holder: str) -> tuple[bool, list[int]]:
        """Whether the runner whose pid the lock file holds still runs, and the pids that have the file open."""
        pid = int(holder) if holder.isdigit() else None
        others = lock_holders(self.path)
        if pid is None or pid == os.getpid():
            return True, others
        # it still has the file open (where /proc shows nothing: that pid runs)
        return (pid in others if others else _alive(pid)), others

    def _held_by(self, holder: str) -> ExperimentError:
        return ExperimentError(
            f"experiment {self.path.parent} is already being trained by pid {holder} (lock {self.path}); "
            f"stop that run or choose another --experiment"
        )

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock (once the components' copies are closed too)
            self.fd = None


class InheritedLock:
    """The experiment lock's open file, passed to a child process: pickled through multiprocessing's fd passing
    (only while a process is being started), the child gets a descriptor of the same open file, so the flock is
    held until the child exits too. Kept open, never closed by hand."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _rebuild_inherited_lock, (multiprocessing.reduction.DupFd(self.fd),)


def _rebuild_inherited_lock(dup: Any) -> InheritedLock:
    fd = dup.detach()
    os.set_inheritable(fd, False)  # programs an env starts (exec) must not hold the run's lock
    return InheritedLock(fd)


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _alive(pid: int) -> bool:
    """A running process (a zombie has closed its files: it holds no lock)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def lock_holders(path: Path) -> list[int]:
    """The pids that have `path` open (Linux /proc; processes of other users are not visible)."""
    try:
        target = os.stat(path)
    except OSError:
        return []
    found = []
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                found.append(int(pid))
                break
    return sorted(found)


def _pids(pids: list[int]) -> str:
    return "(pids " + ", ".join(map(str, pids)) + ")" if pids else "(pids not visible)"


def load_saved_cfg(exp_dir: Path) -> dict | None:
    """The saved configuration, its values checked against the option table (a hand-edited or damaged file is
    refused with one line naming the file and the key, before any of it is used)."""
    path = exp_dir / "cfg.json"
    if not path.exists():
        return None
    try:
        saved = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ExperimentError(
            f"{path} is corrupted ({e}); repair it, or start over with --restart_behavior=restart"
        ) from None
    why = "it is not a JSON object of flag values" if not isinstance(saved, dict) else _bad_saved_value(saved)
    if why:
        raise ExperimentError(f"{path}: {why}; repair it, or start over with --restart_behavior=restart")
    return saved


def _bad_saved_value(saved: dict) -> str | None:
    """What is wrong with the first value of `saved` that its option's type does not allow (None: all fit)."""
    for opt in all_options():
        if opt.name not in saved:
            continue
        value = saved[opt.name]
        if value is None:
            ok = opt.default is None
        elif opt.type is str2bool:
            ok = isinstance(value, bool)
        elif opt.type is int:
            ok = type(value) is int
        elif opt.type in (int_list, str_list):
            item = int if opt.type is int_list else str
            ok = isinstance(value, list) and all(type(x) is item for x in value)
        elif opt.type_name == "str":  # str, or a str that a parser maps (--encoder_conv_architecture's aliases)
            ok = isinstance(value, str)
        else:  # float, or a number written as a float
            ok = type(value) in (int, float)
        if not ok:
            return f"key {opt.name!r} is {value!r}, not a {opt.type_name}{' (or null)' if opt.default is None else ''}"
        if opt.choices is not None and value is not None and value not in opt.choices:
            return f"key {opt.name!r} is {value!r}, not one of {', '.join(opt.choices)}"
    return None


def merge_for_resume(cfg: Config, saved: dict) -> list[str]:
    """Take saved values for flags not typed now; refuse unsafe changes. Returns the overridden flag names. An option
    the saved cfg.json lacks (added to the project after the run was made) and not typed now gets its default, which
    is what the run had, not the value a preset gives it today (a preset that now sets a new model option would
    build a model the checkpoint does not fit)."""
    typed = set(cfg.cli_flags)
    for key in UNSAFE_ON_RESUME:
        if key in typed and key in saved and getattr(cfg, key) != saved[key]:
            raise ExperimentError(
                f"--{key}={getattr(cfg, key)} differs from the experiment's saved value {saved[key]!r}: it cannot "
                f"change on resume; use another --experiment or --restart_behavior=restart"
            )
    overridden = []
    for key, value in saved.items():
        if key in _NOT_FROM_SAVED or key not in vars(cfg):  # options since removed; unset derived fields
            continue
        if key in typed:
            if getattr(cfg, key) != value:
                overridden.append(key)
        else:
            setattr(cfg, key, value)
    for opt in all_options():
        if opt.name not in saved and opt.name not in typed and opt.name not in _NOT_FROM_SAVED:
            setattr(cfg, opt.name, opt.default)
    return overridden


def folder_entries(d: Path) -> set[str] | None:
    """The names in folder `d`, None when it does not exist: taken before a run touches it (remove_created)."""
    return set(os.listdir(d)) if d.is_dir() else None


def remove_created(d: Path, before: set[str] | None) -> None:
    """Undo a new run that never started: its folder if the run made it, else only the entries the run added (a
    folder prepared by someone else, e.g. a benchmark harness's log beside it, keeps its own files)."""
    if before is None:
        shutil.rmtree(d, ignore_errors=True)
        return
    for name in set(os.listdir(d)) - before if d.is_dir() else ():
        path = d / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def prepare_experiment_dir(cfg: Config, log: Callable[[str], None] | None = None) -> tuple[Path, str, ExperimentLock]:
    """Lock the folder, apply --restart_behavior, merge a resumed cfg, write cfg.json.
    Returns (folder, what happened, the held lock)."""
    why = experiment_name_problem(cfg.experiment or "")
    if why:  # parse_cfg refuses it already; a Config built in code must not reach rmtree either
        raise ExperimentError(f"experiment name {cfg.experiment!r} {why}")
    d = experiment_dir(cfg)
    existed = (d / "cfg.json").exists()
    lock = ExperimentLock(d)
    # Before touching anything: a running experiment is never archived or deleted. The processes of a killed run
    # get what its shutdown would have given them: a learner's last step, then its final save.
    lock.acquire(wait_s=cfg.heartbeat_timeout_sec + cfg.shutdown_timeout_sec, log=log)
    try:
        return _prepare_locked(cfg, d, existed, lock)
    except BaseException:
        lock.release()
        raise


def _annealed_over_budget(cfg: Config) -> list[str]:
    """What follows --train_for_env_steps: a resume with another budget changes its course from the stop on."""
    out = [
        f"--{k}=linear_decay" for k in ("lr_schedule", "exploration_loss_schedule") if getattr(cfg, k) == "linear_decay"
    ]
    if cfg.algo == "DQN" and cfg.exp_replayer == "prioritized" and cfg.prioritized_replay_beta < 1.0:
        out.append("prioritized replay's beta")
    return out


def _prepare_locked(cfg: Config, d: Path, existed: bool, lock: ExperimentLock) -> tuple[Path, str, ExperimentLock]:
    what = "new experiment"
    if existed and cfg.restart_behavior in ("overwrite", "restart"):
        if cfg.restart_behavior == "overwrite":
            shutil.rmtree(d)
            what = "overwrote the previous experiment"
        else:
            archived = d.with_name(f"{d.name}_archived_{time.strftime('%Y%m%d_%H%M%S')}")
            d.rename(archived)
            what = f"archived the previous experiment to {archived}"
        old, lock = lock, ExperimentLock(d)
        lock.acquire()  # the fresh folder's lock, taken while still holding the old one
        old.release()
    elif existed:
        saved = load_saved_cfg(d)
        if saved is not None:
            overridden = merge_for_resume(cfg, saved)
            annealed = _annealed_over_budget(cfg) if "train_for_env_steps" in overridden else []
            over = f", over which {' and '.join(annealed)} now anneal{'s' * (len(annealed) == 1)}" if annealed else ""
            what = "resuming" + (f" (overriding {', '.join('--' + k for k in overridden)}{over})" if overridden else "")
            try:  # the saved values, with those typed now, pass the checks typed flags pass
                finalize_cfg(cfg)
            except ConfigError as e:
                raise ExperimentError(f"{e} (with the saved values of {d / 'cfg.json'})") from None
    try:
        d.mkdir(parents=True, exist_ok=True)
        write_cfg_json(d, json.dumps(vars(cfg), indent=2, sort_keys=True).encode())
    except OSError as e:
        raise ExperimentError(f"cannot write the experiment folder {d}: {e.strerror}") from None
    return d, what, lock


def write_cfg_json(d: Path, data: bytes) -> None:
    """cfg.json replaced atomically and durably (temp file, fsync, rename, fsync of the folder)."""
    tmp = d / ".cfg.json.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, d / "cfg.json")
    fsync_dir(d)


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (the file's own fsync does not cover its directory entry)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
