"""DQN throughput on Atari: `python -m benchmarks.benchmark_dqn_atari [--env=atari_pong] [--seconds=60]`.

Measured in one run on the same machine, one phase after the other, and printed with their ratios (JSON at the end):
- the raw ceiling: N plain processes (N = --num_workers) stepping the wrapped env with random actions
  (benchmarks/benchmark_atari.py::raw_ceiling);
- APPO sampler only: `train.py --sampler_only=True` (actors + policy workers, no training);
- DQN: `train.py --algo=DQN` with the atari_dqn preset (flags after the script's own are passed on, e.g.
  `--training_intensity=2`), --learning_starts lowered to BENCH_LEARNING_STARTS so that most of the phase replays.
  From the learner's per-iteration results (a callback, `IterationLog`): env frames/s collected (transitions added
  to the replay x frameskip) and replayed samples/s trained (SGD steps x batch size), over the iterations from the
  first with SGD steps on; and the runner's collection rate in its last 10 s window.

Frames = env steps x --frameskip (the atari preset's 4). The machine's other load changes every number here: run
the phases back to back (this script) and compare ratios, not absolute rates across days.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from sample_factory.config import PRESETS
from sample_factory.experiment.callbacks import Callbacks
from sample_factory.tools.timed_run import raw_ceiling, run_train

LOG_DIR_VAR = "SF_BENCH_DQN_LOG_DIR"
BENCH_LEARNING_STARTS = 2048  # the preset's 20,000 would take much of a 60 s phase on 2 cores


class IterationLog(Callbacks):
    """The learner's per-iteration numbers, one JSON line each, to <SF_BENCH_DQN_LOG_DIR>/<pid>.jsonl."""

    def on_training_result(self, policy_id, result):
        directory = os.environ.get(LOG_DIR_VAR)
        if directory:
            row = {"t": time.time(), **{k: result.get(k, 0) for k in ("samples", "sgd_steps", "replay_size")}}
            with open(Path(directory) / f"{os.getpid()}.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")


def learner_rates(rows: list[dict], batch_size: int) -> dict:
    """Transitions added and replayed per second from iteration rows (t: when it ended, samples, sgd_steps), from
    the end of the last iteration without SGD steps (the first learning one starts there) to the end of the last
    one. The rows before only filled the buffer to --learning_starts."""
    first = next((i for i, r in enumerate(rows) if r["sgd_steps"] > 0), None)
    if first is None or (first == 0 and len(rows) < 2):
        return {"added_per_s": 0.0, "replayed_per_s": 0.0, "window_s": 0.0, "iterations": 0}
    # a first row that already learned has no known start: measure from its end instead
    t0, window = (rows[first - 1]["t"], rows[first:]) if first > 0 else (rows[0]["t"], rows[1:])
    span = max(window[-1]["t"] - t0, 1e-9)
    added = sum(r["samples"] for r in window)
    replayed = sum(r["sgd_steps"] for r in window) * batch_size
    return {"added_per_s": added / span, "replayed_per_s": replayed / span, "window_s": span, "iterations": len(window)}


def read_rows(directory: Path) -> list[dict]:
    rows = []
    for path in directory.glob("*.jsonl"):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return sorted(rows, key=lambda r: r["t"])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", type=str, default="atari_pong", help="Atari env name.")
    p.add_argument("--num_workers", type=int, default=2, help="Actor workers and raw-ceiling processes.")
    p.add_argument("--seconds", type=float, default=60.0, help="Length of each train.py phase.")
    p.add_argument("--ceiling_seconds", type=float, default=20.0, help="Length of the raw-ceiling phase.")
    p.add_argument("--frameskip", type=int, default=4, help="Frames per env step (the preset's --env_frameskip).")
    args, extra = p.parse_known_args(argv)
    k = args.frameskip
    res: dict = {"env": args.env, "num_workers": args.num_workers, "seconds": args.seconds, "cpus": os.cpu_count()}
    res["load_avg_before"] = os.getloadavg()[0]

    ceiling = raw_ceiling(args.env, args.num_workers, args.ceiling_seconds)  # env steps/s
    res["raw_ceiling_frames_per_s"] = ceiling * k
    print(f"raw ceiling, {args.num_workers} processes, random actions: {ceiling * k:,.0f} frames/s", flush=True)

    base = [f"--env={args.env}", f"--num_workers={args.num_workers}", "--summaries_use_frameskip=False"]
    sampler, _ = run_train([*base, "--sampler_only=True"], args.seconds)
    res["appo_sampler_frames_per_s"] = sampler.get("fps10", 0.0) * k
    print(f"APPO sampler only: {res['appo_sampler_frames_per_s']:,.0f} frames/s (10 s window at the end)", flush=True)

    batch_size = PRESETS["atari_dqn"]["batch_size"]
    for a in extra:
        if a.startswith("--batch_size="):
            batch_size = int(a.split("=", 1)[1])
    callbacks = "--callbacks=benchmarks.benchmark_dqn_atari:IterationLog"
    dqn_args = [*base, "--algo=DQN", f"--learning_starts={BENCH_LEARNING_STARTS}", callbacks, *extra]
    with tempfile.TemporaryDirectory() as log_dir:
        os.environ[LOG_DIR_VAR] = log_dir
        try:
            dqn, summary = run_train(dqn_args, args.seconds)
        finally:
            os.environ.pop(LOG_DIR_VAR, None)
        rows = read_rows(Path(log_dir))
    if dqn["rc"] != 0 or not rows:
        raise RuntimeError(f"the DQN run failed (exit {dqn['rc']}): {dqn.get('stderr_tail')}")
    rates = learner_rates(rows, batch_size)
    res["dqn_collected_frames_per_s"] = rates["added_per_s"] * k
    res["dqn_replayed_samples_per_s"] = rates["replayed_per_s"]
    res["dqn_runner_frames_per_s_last_10s"] = dqn.get("fps10", 0.0) * k
    res["dqn_window_s"], res["dqn_iterations"] = rates["window_s"], rates["iterations"]
    res["dqn_replay_ratio"] = rates["replayed_per_s"] / max(rates["added_per_s"], 1e-9)
    res["dqn_replay_size_at_end"] = rows[-1]["replay_size"]
    res["ratio_dqn_collected_to_ceiling"] = res["dqn_collected_frames_per_s"] / max(res["raw_ceiling_frames_per_s"], 1)
    res["ratio_dqn_collected_to_appo_sampler"] = res["dqn_collected_frames_per_s"] / max(
        res["appo_sampler_frames_per_s"], 1
    )
    res["ratio_appo_sampler_to_ceiling"] = res["appo_sampler_frames_per_s"] / max(res["raw_ceiling_frames_per_s"], 1)
    res["load_avg_after"] = os.getloadavg()[0]
    print(
        f"DQN: {res['dqn_collected_frames_per_s']:,.0f} env frames/s collected, "
        f"{res['dqn_replayed_samples_per_s']:,.0f} replayed samples/s trained "
        f"(replay ratio {res['dqn_replay_ratio']:.2f}) over {rates['window_s']:.0f} s after learning started"
    )
    print(
        f"ratios: DQN collected / raw ceiling {res['ratio_dqn_collected_to_ceiling']:.3f}, "
        f"DQN collected / APPO sampler {res['ratio_dqn_collected_to_appo_sampler']:.3f}, "
        f"APPO sampler / raw ceiling {res['ratio_appo_sampler_to_ceiling']:.3f}"
    )
    print("\n".join(summary))
    print(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
    sys.exit(0)
