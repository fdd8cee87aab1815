"""Throughput auto-tuner: `python -m sample_factory.tools.tune --env=ENV [--seconds=S] [--max_trials=8] [flags]`.

Finds faster sampling settings for this machine and env, by measuring rather than guessing:

1. the raw env ceiling: one process stepping the env with random actions (the cost of an env step here);
2. a training run with the defaults (the env's preset plus your flags), whose final timing breakdown says what each
   role was busy with: env stepping in the actor workers, inference in the policy workers, training in the
   learner (busy fraction = seconds of work / seconds alive);
3. a coordinate search from the defaults over the settings that change throughput but not the work per sample
   (`--num_workers`, `--num_envs_per_worker`, `--worker_num_splits`, `--policy_workers_per_policy`,
   `--learner_main_loop_num_cores`): moves are ordered by the bottleneck of step 2 (a busy policy worker first
   gets bigger inference batches or a second worker, a busy learner a core of its own or a second thread, ...),
   each is one short training run, and a move is kept when its FPS beats the best so far by `--min_gain`;
4. a confirmation: the defaults and the pick alternate for `--confirm_rounds` runs each, and the medians are
   compared (the machine may be noisy: only this final comparison is the result).

Batch size, epochs, rollout and every learning setting stay as they are, so the pick learns the same per sample;
`--mode=sampler` tunes `--sampler_only=True` runs instead (collection alone). FPS is the 10 s window at the end of
each run, in the run's unit (env frames on Atari and VizDoom). Prints the fastest command line with its FPS next to
the default's, and writes the trials as JSON with `--output`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sample_factory.config import parse_cfg, typed_flags
from sample_factory.config.machine import usable_cores
from sample_factory.tools.timed_run import raw_ceiling, run_train

TUNED = ("num_workers", "num_envs_per_worker", "worker_num_splits", "policy_workers_per_policy")
TUNED_ALL = (*TUNED, "learner_main_loop_num_cores")
_TIMING = re.compile(r"^\s+(\w+) \(avg of \d+\): (.*)$")


@dataclass
class Trial:
    settings: dict[str, int]
    fps: float
    why: str
    busy: dict[str, float] = field(default_factory=dict)


def busy_fractions(summary: list[str]) -> dict[str, float]:
    """From the final summary's timing lines: {role: seconds of its main work / seconds alive}, for actor (env_step),
    policy (inference) and learner (train)."""
    work = {"actor": "env_step", "policy": "inference", "learner": "train"}
    out = {}
    for line in summary:
        m = _TIMING.match(line)
        if not m or m.group(1) not in work:
            continue
        parts = dict(re.findall(r"(\w+) ([\d.]+) s", m.group(2)))
        life = float(parts.get("process_lifetime", 0.0))
        if life > 0 and work[m.group(1)] in parts:
            out[m.group(1)] = float(parts[work[m.group(1)]]) / life
    return out


def valid(s: dict[str, int], cores: int, current: dict[str, int] | None = None) -> bool:
    """A runnable config that does not add policy workers or learner threads past half the cores; a value the
    `current` config already has (a preset's, e.g. the atari preset's 2 learner threads on 2 cores) stays allowed."""
    current = current or {}

    def bounded(key: str) -> bool:
        return 1 <= s[key] <= max(1, cores // 2, current.get(key, 0))

    return (
        s["num_workers"] >= 1
        and s["num_envs_per_worker"] >= s["worker_num_splits"] >= 1
        and s["num_envs_per_worker"] % s["worker_num_splits"] == 0
        and bounded("policy_workers_per_policy")
        and bounded("learner_main_loop_num_cores")
    )


def moves(s: dict[str, int], busy: dict[str, float], cores: int) -> list[tuple[str, dict[str, int]]]:
    """Candidate changes of `s`, the likeliest first given which role was busiest."""

    def change(**kw) -> dict[str, int]:
        return {**s, **kw}

    envs, splits = s["num_envs_per_worker"], s["worker_num_splits"]
    by_role = {
        "policy": [
            ("bigger inference batches: 2x envs per worker", change(num_envs_per_worker=envs * 2)),
            ("a second policy worker", change(policy_workers_per_policy=s["policy_workers_per_policy"] + 1)),
            ("one split (one inference batch per worker)", change(worker_num_splits=1)),
        ],
        "learner": [
            ("a core left to the learner: one worker fewer", change(num_workers=s["num_workers"] - 1)),
            ("a second learner thread", change(learner_main_loop_num_cores=s["learner_main_loop_num_cores"] + 1)),
        ],
        "actor": [
            ("more workers than cores (envs that wait)", change(num_workers=s["num_workers"] + max(1, cores // 2))),
            ("2x envs per worker", change(num_envs_per_worker=envs * 2)),
            ("two splits (double buffering)", change(worker_num_splits=2, num_envs_per_worker=max(envs, 2))),
        ],
    }
    generic = [
        ("half the envs per worker (less policy lag)", change(num_envs_per_worker=max(splits, envs // 2))),
        ("one learner thread (its other core to the samplers)", change(learner_main_loop_num_cores=1)),
    ]
    order = sorted(by_role, key=lambda r: -busy.get(r, 0.0))
    out, seen = [], {tuple(sorted(s.items()))}
    for why, cand in [m for r in order for m in by_role[r]] + generic:
        key = tuple(sorted(cand.items()))
        if key not in seen and valid(cand, cores, s):
            seen.add(key)
            out.append((why, cand))
    return out


def flags_of(settings: dict[str, int]) -> list[str]:
    return [f"--{k}={v}" for k, v in settings.items()]


def parses(base: list[str], settings: dict[str, int]) -> bool:
    """Whether train.py accepts the settings (e.g. a synchronous preset's iteration must be a multiple of a
    sampling round): a refused candidate costs no trial."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parse_cfg([*base, *flags_of(settings)])
    except SystemExit:
        return False
    return True


def measure(base: list[str], settings: dict[str, int], seconds: float) -> tuple[float, dict[str, float]]:
    result, summary = run_train([*base, *flags_of(settings)], seconds)
    if result["rc"] != 0:
        raise RuntimeError(f"train.py exited with {result['rc']}: {' | '.join(result['stderr_tail'])}")
    return float(result.get("fps10", 0.0)), busy_fractions(summary)


@dataclass
class TuneResult:
    """A search's outcome: the defaults' and the pick's settings and FPS (from the confirmation runs when the
    pick differs), every trial, and the machine it was measured on."""

    env: str
    cores: int
    mode: str
    seconds: float
    env_steps_per_s_one_process: float
    trials: list[Trial]
    confirm: dict[str, list[float]]
    defaults: dict[str, int]
    pick: dict[str, int]
    defaults_fps: float
    pick_fps: float

    def changed(self) -> dict[str, int]:
        """The pick's settings that differ from the defaults."""
        return {k: v for k, v in self.pick.items() if v != self.defaults[k]}

    def to_dict(self) -> dict:
        return {**self.__dict__, "trials": [t.__dict__ for t in self.trials]}


def search(
    env: str,
    extra: list[str],
    seconds: float | None = None,
    max_trials: int = 8,
    confirm_rounds: int = 2,
    min_gain: float = 0.05,
    mode: str = "train",
    log: Callable[[str], None] = print,
) -> TuneResult:
    """The whole search of the module docstring for `python train.py --env=<env> <extra>` (`extra`: train.py
    flags; those of TUNED_ALL among them are kept as typed). `seconds`: length of each run (None: by the env's
    speed)."""
    cores = usable_cores()
    base = [f"--env={env}", *extra, *(["--sampler_only=True"] if mode == "sampler" else [])]
    cfg = parse_cfg(base)  # the defaults: the env's preset, the user's flags, num_workers = cores
    start = {k: int(getattr(cfg, k)) for k in TUNED_ALL}
    # flags the user typed are theirs: never tuned
    fixed = {k for k in TUNED_ALL if k in typed_flags(base)}

    # 5 s of random steps time a slow env well; with short trials it stays a small share of the search
    ceiling = raw_ceiling(env, 1, 5.0 if seconds is None else min(5.0, seconds / 2))
    log(f"env step cost: {1e6 / ceiling:.0f} us ({ceiling:,.0f} steps/s in one process, random actions)")
    if seconds is None:
        seconds = 20.0 if ceiling > 20_000 else 60.0
    fps, busy = measure(base, start, seconds)
    trials = [Trial(start, fps, "defaults", busy)]
    shares = ", ".join(f"{r} {b:.0%}" for r, b in sorted(busy.items()))
    log(f"defaults {' '.join(flags_of(start))}: {fps:,.0f} FPS; busy: {shares}")
    best = trials[0]
    tried = {tuple(sorted(start.items()))}
    while len(trials) <= max_trials:
        cands = [
            (why, c)
            for why, c in moves(best.settings, best.busy, cores)
            if tuple(sorted(c.items())) not in tried and all(c[k] == start[k] for k in fixed) and parses(base, c)
        ]
        if not cands:
            break
        why, settings = cands[0]
        tried.add(tuple(sorted(settings.items())))
        try:
            fps, busy = measure(base, settings, seconds)
        except RuntimeError as e:
            log(f"trial {len(trials)}: {why}: failed ({e})")
            trials.append(Trial(settings, 0.0, f"{why} (failed)"))
            continue
        trials.append(Trial(settings, fps, why, busy))
        kept = fps > best.fps * (1 + min_gain)
        log(f"trial {len(trials) - 1}: {why}: {fps:,.0f} FPS{' (kept)' if kept else ''}")
        if kept:
            best = trials[-1]

    pick = best.settings
    confirm: dict[str, list[float]] = {"defaults": [], "pick": []}
    if pick != start:
        for _ in range(confirm_rounds):
            confirm["defaults"].append(measure(base, start, seconds)[0])
            confirm["pick"].append(measure(base, pick, seconds)[0])
        d, k = statistics.median(confirm["defaults"]), statistics.median(confirm["pick"])
        if k < d:  # the search's gain did not hold up: the defaults stay
            log(f"confirmation: the pick ran at {k:,.0f} FPS vs the defaults' {d:,.0f}: keeping the defaults")
            pick, k = start, d
    else:
        d = k = trials[0].fps
    return TuneResult(env, cores, mode, seconds, ceiling, trials, confirm, start, pick, d, k)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", required=True, help="The env to tune for (any train.py --env).")
    p.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="Length of each measured training run (default: 20 s for envs stepping faster than 20k steps/s in one "
        "process, else 60 s, so that a conv-net learner runs several iterations).",
    )
    p.add_argument("--max_trials", type=int, default=8, help="Search runs after the default's.")
    p.add_argument("--confirm_rounds", type=int, default=2, help="Final runs of the default and of the pick, each.")
    p.add_argument("--min_gain", type=float, default=0.05, help="A move must beat the best FPS by this fraction.")
    p.add_argument("--mode", choices=("train", "sampler"), default="train", help="Tune training or collection only.")
    p.add_argument("--output", default=None, help="Also write the trials and the result as JSON here.")
    args, extra = p.parse_known_args(argv)
    r = search(
        args.env,
        extra,
        args.seconds,
        args.max_trials,
        args.confirm_rounds,
        args.min_gain,
        args.mode,
        log=lambda line: print(line, flush=True),
    )
    base = [f"--env={args.env}", *extra, *(["--sampler_only=True"] if args.mode == "sampler" else [])]
    print(f"\n{args.env} on {r.cores} cores, {args.mode} runs of {r.seconds:.0f} s:")
    print(f"  defaults: {r.defaults_fps:,.0f} FPS   python train.py {' '.join(base)}")
    print(f"  pick:     {r.pick_fps:,.0f} FPS   python train.py {' '.join([*base, *flags_of(r.changed())])}")
    print(
        f"  ratio pick / defaults: {r.pick_fps / r.defaults_fps:.2f}" if r.defaults_fps > 0 else "  (no FPS measured)"
    )
    if args.output:
        Path(args.output).write_text(json.dumps(r.to_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
