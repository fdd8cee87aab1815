"""Timed training runs for the throughput tuner (tools/tune.py) and the benchmarks: the raw ceiling of an env (plain
processes stepping it with random actions) and one train.py run read back from its progress lines."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sample_factory.config import parse_cfg

REPO = Path(__file__).resolve().parents[2]  # the checkout this package runs from (sample_factory/tools/ is 2 down)
DONE = re.compile(r"done: (\d+) (env steps|env frames) in ([\d.]+) s, (\d+) FPS overall")
FPS10 = re.compile(r"FPS 10s/60s/300s: ([\d.]+)/")
_TRAINED = re.compile(r"samples collected/trained: \d+/(\d+)")
_REWARD = re.compile(r"policy 0: reward ([-+\w.]+),")


def _step_randomly(env_name: str, seconds: float, out) -> None:
    try:
        from sample_factory.envs.env_utils import make_env

        env = make_env(parse_cfg([f"--env={env_name}"]))
        env.reset(seed=0)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            steps += 1
            if term or trunc:
                env.reset()
        out.put(steps / (time.perf_counter() - t0))
    except BaseException as e:  # the parent waits on the queue: tell it, rather than let it time out
        out.put(f"{type(e).__name__}: {e}")
        raise


def raw_ceiling(env_name: str, processes: int, seconds: float) -> float:
    """Env steps/s of `processes` spawned processes stepping `env_name` with random actions for `seconds`."""
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_step_randomly, args=(env_name, seconds, q)) for _ in range(processes)]
    for p in procs:
        p.start()
    rates = [q.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    errors = [r for r in rates if isinstance(r, str)]
    if errors:
        raise RuntimeError(f"stepping {env_name} failed in {len(errors)} of {processes} processes: {errors[0]}")
    return sum(rates)


def run_train(args: list[str], seconds: float, repo: Path = REPO) -> tuple[dict, list[str]]:
    """One timed train.py run of `repo`'s code (another checkout: its own code first on PYTHONPATH; an installed
    package without a checkout: `python -m sample_factory.train`). The result has env_steps (the run's counter), unit
    ("env steps" or "env frames"), seconds, fps (overall) and fps10 (the last 10 s window) in that unit,
    samples_trained (agent steps) and reward (policy 0's final mean episode reward); the summary is the final
    per-component timing."""
    script = repo / "train.py"
    with tempfile.TemporaryDirectory() as td:
        cmd = [sys.executable, str(script)] if script.is_file() else [sys.executable, "-m", "sample_factory.train"]
        cmd += [f"--train_dir={td}", "--experiment=bench", f"--train_for_seconds={seconds}", "--report_interval_sec=2"]
        cmd += args
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
        cwd = repo if repo.is_dir() else None
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=seconds + 300)
    out = proc.stdout.splitlines()
    result = {"rc": proc.returncode, "stderr_tail": proc.stderr.splitlines()[-3:]}
    for line in out:
        if m := DONE.search(line):
            result.update(env_steps=int(m.group(1)), unit=m.group(2), seconds=float(m.group(3)), fps=int(m.group(4)))
        if m := FPS10.search(line):
            result["fps10"] = float(m.group(1))
        if m := _TRAINED.search(line):
            result["samples_trained"] = int(m.group(1))
        if m := _REWARD.search(line):
            result["reward"] = float(m.group(1))
    summary = [ln for ln in out if ln.startswith("  ") or "done:" in ln or "remote samplers:" in ln]
    return result, summary
