"""`train.py --auto_tune=True`: the throughput tuner (tools/tune.py) before training, once per env, flags and machine.

train.py runs `python -m sample_factory.tools.auto_tune <its own flags>` as a command (training code does not import
tools/): progress goes to stderr, and the last stdout line is the JSON list of flags to add to the command line.

The tuner's search runs the user's command (without its folder, budget and naming flags) as short training runs and
picks the sampling settings (`tune.TUNED_ALL`) that collect and train fastest; the pick is cached as JSON in
`--auto_tune_cache_dir` under a key of the env, the flags that can change speed and the machine (host name, usable
cores), so a second run with the same command starts at once. Flags the user typed are never tuned.

A cache file is input like any other (it may be shared, hand-edited or stale): a pick is applied only as settings of
`tune.TUNED_ALL`, never for a flag the user typed, as whole numbers the option table accepts within what the search
could have reached from this run's values, and as a combination train.py accepts; anything else is left out with a
line saying why.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sample_factory.config import Config, all_options, parse_cfg, strip_flags, typed_flags
from sample_factory.config.machine import usable_cores
from sample_factory.tools.tune import TUNED_ALL, flags_of, parses, search, valid

# Flags that say where, how long and under which name a run trains, not how fast: neither passed to the trial runs
# nor part of the cache key.
SPEED_NEUTRAL = (
    "env",
    "experiment",
    "train_dir",
    "restart_behavior",
    "train_for_env_steps",
    "train_for_seconds",
    "stop_at_reward",
    "seed",
    "report_interval_sec",
    "auto_tune",
    "auto_tune_cache_dir",
    "auto_tune_seconds",
    "auto_tune_max_trials",
)


def cache_key(env: str, speed_flags: Sequence[str]) -> dict[str, Any]:
    """What a pick depends on: the env, the typed flags that can change speed (as parsed values, so `--x 1` and
    `--x=1` agree) and the machine."""
    typed = typed_flags(list(speed_flags))
    return {
        "env": env,
        "flags": {k: typed[k] for k in sorted(typed)},
        "host": platform.node(),
        "cores": usable_cores(),
    }


def cache_path(cache_dir: str, key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / f"{re.sub(r'[^A-Za-z0-9_.-]', '-', key['env'])}_{digest}.json"


def pick_flags(argv: Sequence[str], cfg: Config, log: Callable[[str], None]) -> list[str]:
    """The flags of the cached or newly searched pick for the run `argv` (only those that differ from the
    defaults)."""
    assert cfg.env is not None, "parse_cfg requires --env"
    speed_flags = strip_flags(argv, SPEED_NEUTRAL)
    key = cache_key(cfg.env, speed_flags)
    path = cache_path(cfg.auto_tune_cache_dir, key)
    record = _read(path, key)
    if record is not None:
        log(f"auto-tune: the pick cached in {path} (delete it to tune again)")
    else:
        log(f"auto-tune: measuring this machine with short training runs (up to {cfg.auto_tune_max_trials + 5})")
        result = search(cfg.env, speed_flags, cfg.auto_tune_seconds, max_trials=cfg.auto_tune_max_trials, log=log)
        record = {
            "key": key,
            "created": datetime.datetime.now().isoformat(timespec="seconds"),
            "changed": result.changed(),
            "defaults_fps": result.defaults_fps,
            "pick_fps": result.pick_fps,
            "result": result.to_dict(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        tmp.replace(path)  # atomic: a concurrent run reads the old file or the new one
    flags = flags_of(accepted(record["changed"], argv, cfg, log, str(path)))
    if flags:
        log(f"auto-tune: {' '.join(flags)}{_fps_text(record)}")
    else:
        log(f"auto-tune: {'nothing of the pick applies' if record['changed'] else 'the defaults are fastest'}")
    return flags


def accepted(
    changed: dict[str, Any], argv: Sequence[str], cfg: Config, log: Callable[[str], None], source: str
) -> dict[str, int]:
    """The settings of a pick (from `source`) that this run takes: see the module docstring."""
    typed = typed_flags(list(argv))
    options = {o.name: o for o in all_options()}
    cores = usable_cores()
    current = {k: int(getattr(cfg, k)) for k in TUNED_ALL}
    # one search moves num_workers by at most max(1, cores // 2) and doubles num_envs_per_worker at most per trial
    trials = cfg.auto_tune_max_trials
    most = {
        "num_workers": current["num_workers"] + trials * max(1, cores // 2),
        "num_envs_per_worker": current["num_envs_per_worker"] * 2**trials,
    }
    out: dict[str, int] = {}
    for name, value in changed.items():
        why = None
        if name not in TUNED_ALL:
            why = f"not a setting auto-tune picks ({', '.join(TUNED_ALL)})"
        elif name in typed:
            why = f"--{name} is on the command line and stays {typed[name]}"
        elif isinstance(value, bool) or not isinstance(value, int) or options[name].type(str(value)) != value:
            why = "not a whole number"
        elif not 1 <= value <= most.get(name, value):
            why = f"out of range (1 to {most[name]})" if name in most else "out of range (>= 1)"
        if why:
            log(f"auto-tune: ignoring {name}={value!r} from {source}: {why}")
        else:
            out[name] = value
    if out and not (valid({**current, **out}, cores, current) and parses(list(argv), out)):
        log(f"auto-tune: ignoring the pick {' '.join(flags_of(out))} from {source}: not a valid combination here")
        return {}
    return out


def _fps_text(record: dict) -> str:
    pick, defaults = record.get("pick_fps"), record.get("defaults_fps")
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (pick, defaults)):
        return ""
    return f" ({pick:,.0f} FPS vs the defaults' {defaults:,.0f})"


def _read(path: Path, key: dict[str, Any]) -> dict | None:
    """The cached record, if it is there, readable and for exactly this key."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):  # valid JSON, but not a record (a list, a number): searched again
        return None
    same = json.dumps(record.get("key"), sort_keys=True, default=str) == json.dumps(key, sort_keys=True, default=str)
    return record if same and isinstance(record.get("changed"), dict) else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = parse_cfg(argv)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    print(json.dumps(pick_flags(argv, cfg, log)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
