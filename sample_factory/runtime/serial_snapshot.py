"""Exact resume in serial mode: at a clean stop the whole single-process system is saved (components with their
envs and RNGs, in-flight messages, trajectory buffers, global RNG states), so that "train N steps, stop, resume,
train M more" ends bit-identical to "train N + M steps".

A snapshot is used only if it belongs to the latest checkpoint (same policy version and env steps) and the run's
configuration differs from it only in flags that do not affect training (budgets, logging, checkpoint cadence).
Otherwise resuming falls back to the checkpoint (weights, optimizer, counters; fresh envs).

A snapshot pickles whole objects (envs included), so loading it can run code: it is signed with an HMAC under a key
private to the user (snapshot_key_path) and loaded only when the signature matches. A snapshot that is not this
user's (copied from elsewhere, planted, or edited) is not unpickled; the run resumes from the checkpoint instead.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import random
import secrets
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sample_factory.config import Config

SNAPSHOT_NAME = "serial_state.pth"
_MAGIC = b"SFSNAP1\n"  # then the HMAC-SHA256 of the payload (32 bytes), then the torch.save payload
# Flags that may change between the stop and the resume without breaking exactness.
SAFE_TO_CHANGE = {
    "train_for_env_steps",
    "train_for_seconds",
    "stop_at_reward",
    "save_every_sec",
    "keep_checkpoints",
    "report_interval_sec",
    "experiment_summaries_interval",
    "heartbeat_interval",
    "heartbeat_timeout_sec",
    "shutdown_timeout_sec",
    "restart_behavior",
    "command_line",
    "cli_flags",
    "train_dir",
    "save_best_every_sec",
    "save_best_after",
    "save_milestones_sec",
    "decorrelate_experience_max_seconds",  # not applied in serial mode
    "with_wandb",
    "wandb_user",
    "wandb_project",
    "wandb_group",
    "wandb_job_type",
    "wandb_tags",
}


def _fingerprint(cfg: Config) -> dict:
    return {k: v for k, v in vars(cfg).items() if k not in SAFE_TO_CHANGE}


def save_snapshot(exp_dir: Path, cfg: Config, components: list, channels: Any, buffers: Any, counters: dict) -> Path:
    state = {
        "cfg": _fingerprint(cfg),
        "components": components,
        "channels": channels,
        "buffers": buffers,
        "counters": counters,
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
    }
    path = exp_dir / SNAPSHOT_NAME
    write_signed(path, state)
    return path


def write_signed(path: Path, state: dict) -> None:
    """torch.save(state) into `path` (atomically), signed with this user's key (see the module's docstring)."""
    payload = io.BytesIO()
    torch.save(state, payload)
    data = payload.getvalue()
    tmp = path.with_name(f".{path.name}.tmp")
    key = _snapshot_key(create=True)
    assert key is not None  # create=True makes one when there is none
    signed = _MAGIC + hmac.digest(key, data, hashlib.sha256) + data
    try:
        tmp.write_bytes(signed)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a part-written file on a full disk holds the space the checkpoint needs
        raise


def read_signed(path: Path, what: str) -> tuple[dict | None, str]:
    """(the state `write_signed` saved in `path`, "") if it is there and signed with this user's key; else (None,
    why not), `what` naming the file in the reason."""
    if not path.exists():
        return None, f"no {what}"
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, f"{what} unreadable ({e.strerror})"
    try:
        key = _snapshot_key(create=False)
    except SnapshotKeyError as e:
        return None, f"{e}; the {what} is not unpickled"
    mac, payload = data[len(_MAGIC) : len(_MAGIC) + 32], data[len(_MAGIC) + 32 :]
    if key is None or not data.startswith(_MAGIC) or not hmac.compare_digest(mac, hmac.digest(key, payload, "sha256")):
        return None, f"{what} not signed with this user's key ({snapshot_key_path()}): not unpickled"
    try:
        return torch.load(io.BytesIO(payload), weights_only=False), ""  # signed by this user: their own objects
    except Exception as e:
        return None, f"{what} unreadable ({type(e).__name__})"


def changed_flags(saved: dict, cfg: Config) -> list[str]:
    """The flags, other than those SAFE_TO_CHANGE, whose values differ between a saved fingerprint and cfg."""
    now = _fingerprint(cfg)
    return sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))


class SnapshotKeyError(RuntimeError):
    """The snapshot key exists but is not private to the user: it is not used."""


def snapshot_key_path() -> Path:
    """The user's secret for signing snapshots: $XDG_CONFIG_HOME/sample_factory/snapshot.key (~/.config by default),
    readable by the user only."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "sample_factory" / "snapshot.key"


def _snapshot_key(create: bool) -> bytes | None:
    path = snapshot_key_path()
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # never replaces a key another run made meanwhile
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:  # a symlink (ELOOP) or unreadable: not a key of ours
        raise SnapshotKeyError(f"the snapshot key {path} cannot be used ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        # a key others can read or write lets them sign a snapshot that this user's runs would unpickle
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise SnapshotKeyError(
                f"the snapshot key {path} is not private to this user (owner uid {st.st_uid}, mode "
                f"{st.st_mode & 0o777:o}): delete it (a new one is made) or chmod 600 it if it is yours"
            )
        key = f.read()
    return key if len(key) >= 32 else None


def load_snapshot(exp_dir: Path, cfg: Config, latest_checkpoint: tuple[int, int] | None) -> tuple[dict | None, str]:
    """Returns (state, why) — state is None when the snapshot cannot be used, with the reason."""
    state, why = read_signed(exp_dir / SNAPSHOT_NAME, "serial snapshot")
    if state is None:
        return None, why
    if changed := changed_flags(state["cfg"], cfg):
        return None, f"configuration changed since the snapshot ({', '.join(changed)})"
    if latest_checkpoint != state["counters"]["checkpoint"]:
        return None, "the snapshot is older than the latest checkpoint"
    for c in state["components"]:
        c.cfg = cfg  # budgets and cadences of this run
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return state, "exact resume from the serial snapshot"
