"""PBT with separate runs (--pbt_backend=ray): the file-level pieces of one population member, no Ray and no processes.

A population lives in <train_dir>/<experiment>/: the coordinator's state of member i is `pbt_p<i>.json` there (the
in-process format, policy id = member index), and member i is an ordinary one-policy experiment in `member_<i>/`.
Its train.py runs with `--with_pbt=True --num_policies=1` and a start of mutation it never reaches, so its own
PbtController only restores the hyperparameters the coordinator wrote to `member_<i>/pbt_p0.json` (and, for envs
with reward shaping, sends those coefficients to its envs) and never decides anything itself.

- `member_argv`: the user's command line with the population-level flags replaced by the member's.
- `read_progress`: a member's env steps and what PBT ranks it by, from the last row of its progress.csv.
- `latest_checkpoint_info`, `copy_member_weights`, `transplant_state`: a replacement writes the source's latest
  weights as the target's newest checkpoint, with the in-process semantics (the target keeps its env-step count and
  its own algorithm state minus the optimizer moments; its policy version goes up by one), atomically.
"""

from __future__ import annotations

import csv
import io
import math
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sample_factory.config import Config, strip_flags
from sample_factory.experiment.checkpoints import list_checkpoints, load_latest_checkpoint, save_checkpoint
from sample_factory.pbt.population import PolicyPbtState, objective_from_stats, save_pbt_state

# Flags the coordinator sets for each member (whatever the user typed for the population is dropped).
POPULATION_FLAGS = (
    "with_pbt",
    "num_policies",
    "pbt_backend",
    "ray_address",
    "pbt_cpus_per_member",
    "pbt_gpus_per_member",
    "pbt_max_member_restarts",
    "pbt_start_mutation",
    "train_dir",
    "experiment",
    "train_for_env_steps",
    "restart_behavior",
    "seed",
)
NEVER = 2**62  # a member's own --pbt_start_mutation: its in-process PBT never mutates
_CKPT = re.compile(r"^checkpoint_(\d+)_(\d+)\.pth$")


def member_dir(pop_dir: str | Path, index: int) -> Path:
    return Path(pop_dir) / f"member_{index}"


def member_argv(cfg: Config, argv: Sequence[str], pop_dir: Path, index: int, target_env_steps: int) -> list[str]:
    """The train.py command of one segment of member `index`: train (resuming its folder) until it has
    `target_env_steps` env steps. Seeds differ per member (cfg.seed + index) like the in-process learners'.
    A segment that resumes a checkpoint does not decorrelate its envs with random actions again (the runner skips
    them for any resumed run), so the reward window the PBT objective is read from holds the policy's episodes."""
    cmd = [sys.executable, "-m", "sample_factory.train", *strip_flags(argv, POPULATION_FLAGS)]
    cmd += [
        "--with_pbt=True",
        "--num_policies=1",
        "--pbt_backend=in_process",
        f"--pbt_start_mutation={NEVER}",
        f"--train_dir={pop_dir}",
        f"--experiment={member_dir(pop_dir, index).name}",
        "--restart_behavior=resume",
        f"--train_for_env_steps={int(target_env_steps)}",
    ]
    if cfg.seed is not None:
        cmd.append(f"--seed={cfg.seed + index}")
    return cmd


def _complete_rows(text: str) -> list[dict[str, str]]:
    """Rows of a CSV that may be being appended to: a last line without its newline is not complete yet."""
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(io.StringIO(text)))


def read_progress(cfg: Config, exp_dir: Path) -> tuple[int | None, float]:
    """(env steps, PBT objective) of a member from the last row of its progress.csv: the run's own env-step
    counter (the one its --train_for_env_steps budget counts: collected steps, resumed ones included; None without
    a row) and the objective (NaN when unknown, e.g. no finished episode). Only --pbt_target_objective=
    true_objective (the mean reward of the last --stats_avg episodes) is in progress.csv; the config check refuses
    learner statistics with --pbt_backend=ray."""
    try:
        rows = _complete_rows((exp_dir / "progress.csv").read_text())
    except OSError:
        return None, math.nan
    if not rows:
        return None, math.nan
    last = rows[-1]
    counter = list(last)[1]  # env_steps, or env_frames for runs that count frames
    try:
        steps: int | None = int(float(last[counter]))
    except (TypeError, ValueError):
        steps = None
    try:
        reward = float(last.get("reward_p0") or "nan")
    except ValueError:
        reward = math.nan
    return steps, objective_from_stats(cfg, reward, {})


def latest_checkpoint_info(exp_dir: Path) -> tuple[Path, int, int] | None:
    """(path, policy version, env steps) of the member's newest checkpoint, from its name; None without one."""
    found = list_checkpoints(exp_dir / "checkpoint_p0")
    if not found:
        return None
    m = _CKPT.match(found[-1].name)
    assert m is not None  # list_checkpoints only returns names that match
    return found[-1], int(m.group(1)), int(m.group(2))


def transplant_state(target: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """The target's checkpoint after a replacement by `source`, as the in-process learner does it: the source's
    model (normalizer statistics included); the target's own env-step count, RNG and algorithm state, with the
    optimizer moments dropped (they belong to the old weights) and a DQN target network reset to the new weights;
    the policy version one past the target's, so the new file is the target's newest."""
    algo = dict(target["algo"])
    if "optimizer" in algo:
        algo["optimizer"] = {**algo["optimizer"], "state": {}}
    if "target" in algo:
        algo["target"] = dict(source["model"])
    out = dict(target)
    out.update(model=source["model"], algo=algo, policy_version=int(target["policy_version"]) + 1)
    return out


def _load_latest(exp_dir: Path, attempts: int = 3, set_aside: bool = False) -> tuple[dict, Path]:
    """The newest loadable checkpoint; a running source may rotate its files meanwhile, so try again. `set_aside`:
    the member is stopped and about to get a new checkpoint, so its unreadable files are moved aside (otherwise
    they would outlive the good ones in its rotation)."""
    for attempt in range(attempts):
        try:
            loaded = load_latest_checkpoint(exp_dir / "checkpoint_p0", quiet=True, set_aside=set_aside)
        except Exception:  # noqa: BLE001 - rotated away while being read: look again
            loaded = None
            if attempt == attempts - 1:
                raise
        if loaded is not None:
            return loaded
        time.sleep(0.5)
    raise FileNotFoundError(f"no checkpoint in {exp_dir / 'checkpoint_p0'}")


def copy_member_weights(source_dir: Path, target_dir: Path, keep: int) -> tuple[Path, Path]:
    """Write the source's latest weights as the target's newest checkpoint (atomically: a crash leaves the old
    files or the complete new one). The target must not be running. Returns (source file, new target file)."""
    source, source_path = _load_latest(source_dir)
    target, _ = _load_latest(target_dir, set_aside=True)
    state = transplant_state(target, source)
    path = save_checkpoint(
        target_dir / "checkpoint_p0", state, state["policy_version"], int(state["env_steps"]), max(keep, 1)
    )
    return source_path, path


def write_member_state(exp_dir: Path, state: PolicyPbtState) -> None:
    """The member's hyperparameters as its own run restores them (pbt_p0.json, atomically); its history too."""
    save_pbt_state(exp_dir, [PolicyPbtState(0, dict(state.hyperparams), state.last_pbt_env_steps, list(state.history))])
