"""Sample Factory 2 side by side with this project, in one run on the same machine (issue #15):

    python -m sample_factory.tools.benchmark_sf2 [--env=atari_pong] [--seconds=90] [--rounds=2]
        [--venv=~/.cache/sample_factory/sf2_venv] [--output=docs/results/sf2_side_by_side.md]

Unit: env frames per second (agent steps x frameskip 4), as both report them on Atari (SF2's Atari example sets
summaries_use_frameskip=True, as does our default; checked from each run's output). Per run: the 10 s window at the
end; the whole run (SF2: its final "Collected ..., FPS" line, frames trained over its main loop; ours: the final
"done:" line, frames collected since the workers' start, with our frames trained per second beside it); the last
mean episode reward each printed. Each round (order alternating) measures the raw ceiling (2 processes stepping our
Atari env with random actions: benchmark_atari.raw_ceiling) and, --seconds each:
- "same work per sample": SF2's `python -m sf_examples.atari.train_atari` (its Atari parameters: Nature CNN + 512,
  rollout 128, 4 epochs x 4 minibatches of 256, GAE, normalized returns, one split per worker) with 2 workers x 8
  envs, against our train.py with the same workers, envs and settings (OURS_SAME_WORK);
- "each with its own defaults": both with only `--num_workers=2` (ours: the atari preset).
SF2 runs in a throwaway venv made (or reused if it works) here: torch==2.13.0 (CPU wheel), then sample-factory 2.1.1,
numpy<2, gymnasium 0.29.1 (SF2 needs < 1.0: its Atari wrappers use gym.wrappers.FrameStack) and ale-py 0.9.1 (ROMs
in the wheel; gymnasium 0.29's atari extras would download them). ale-py >= 0.9 registers the NoFrameskip-v4 ids
only on `import ale_py`, which gymnasium 0.29 does not do, so a one-line .pth in the venv imports it.
SF2 flags needed here that change no work per sample: --device=cpu (its default needs CUDA); in the same-work case
--async_rl=True (its sync default refuses 2 x 8 envs x rollout 128 = 2048 samples per rollout against 1024 per
iteration: "Ratio is 0.5 (should be a positive integer)"). SF2 2.1.1 never advances the clock behind
--train_for_seconds, so it gets SIGINT (Ctrl-C, to its process group) --seconds after its first report (ours:
--train_for_seconds from the workers' start); what is left of its group is then killed and listed.
Remaining differences: DIFFERENCES.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from sample_factory.tools.benchmark_atari import raw_ceiling, run_train
from sample_factory.tools.benchmark_gpu import SF2_ATARI_WORK, machine
from sample_factory.tools.throwaway_venv import make_venv, run_in

FRAMESKIP = 4
SF2_INSTALLS = [
    ["torch==2.13.0"],
    ["torch==2.13.0", "sample-factory==2.1.1", "numpy<2", "gymnasium==0.29.1", "ale-py==0.9.1"],
]
SF2_PROBE = "import gymnasium, sf_examples.atari.train_atari; gymnasium.make('PongNoFrameskip-v4')"
PACKAGES = ("sample-factory", "torch", "numpy", "gymnasium", "ale-py", "signal-slot-mp", "faster-fifo", "opencv-python")
# Ours with SF2's Atari settings that change the work per sample or the model (the rest is in our atari preset:
# lr 2.5e-4, clip 0.1, value clip 1.0, entropy 0.01, max_grad_norm 0.5, gamma 0.99, a 512 layer after the convs).
OURS_SAME_WORK = [
    "--num_envs_per_worker=8",
    *SF2_ATARI_WORK,
    "--worker_num_splits=1",
    "--encoder_conv_architecture=convnet_nature",
    "--with_vtrace=False",
    "--normalize_returns=True",
    "--adam_eps=1e-5",
    "--env_sticky_actions=0",  # PongNoFrameskip-v4 has no sticky actions (the atari preset's value too)
]
CASES = {  # case -> (SF2 flags, our flags), besides --env and --num_workers
    "same work per sample": (["--num_envs_per_worker=8", "--async_rl=True"], OURS_SAME_WORK),
    "each with its own defaults": ([], []),
}
DIFFERENCES = [
    "env: SF2 steps PongNoFrameskip-v4 through gymnasium 0.29 wrappers (no-op reset 30, max-and-skip 4, episodic "
    "life, fire reset, reward sign clip, 84x84, grayscale, stack 4); ours ALE/Pong-v5 through AleFrameSkip and "
    "FrameStack (the frames of gymnasium 1.x's AtariPreprocessing, reward clip to [-1, 1]); neither has sticky "
    "actions (our atari preset's "
    "env_sticky_actions=0 since 2026-11-24; 0.25 before)",
    "SF2 normalizes observations with a running mean/std per pixel (normalize_input=True, at inference and in "
    "training); ours only scales uint8 frames by 1/255 (our --normalize_input applies to float observations)",
    "ours trains and runs its conv encoder's inference in bf16 where that times faster on the CPU at the run's start "
    "(--learner_precision=auto, --inference_precision=auto; weights and optimizer stay fp32; the run's log says which "
    "was taken); SF2 does both in fp32",
    "SF2 decays the learning rate linearly over 10M frames (under 1% within these runs); ours keeps it constant",
    "alike: both pin each rollout worker to one core (set_workers_cpu_affinity=True, both defaults), and both run them "
    "at niceness 10 above the learner (ours since 2026-11-24: --actor_worker_niceness; SF2 with more than one worker)",
    "SF2 counts frames when its learner has trained on them, ours when the workers collected them",
    "own defaults: SF2's Atari example is synchronous PPO with 1 env per worker, Nature CNN, rollout 128, 4 epochs "
    "x 4 minibatches of 256; our atari preset is asynchronous with 16 envs per worker in 2 splits, rollout 32, "
    "convnet_simple, 2 epochs x 4 minibatches of 256",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SF2_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
_SF2_FPS = re.compile(r"Fps is \(10 sec: ([\d.]+|nan), 60 sec: [\d.na]+, 300 sec: [\d.na]+\)\. Total num frames: (\d+)")
_SF2_REWARD = re.compile(r"Avg episode reward: \[\(0, '([-\d.]+|nan)'\)\]")
_SF2_DONE = re.compile(r"Collected \{0: (\d+)\}, FPS: ([\d.]+)")


def parse_sf2_log(text: str) -> dict:
    """Frames/s from SF2's log: fps10 (the last "Fps is (10 sec: X" line), fps (its final "Collected {0: N}, FPS: X"
    line, else frames over the span of its reports), frames, the last "Avg episode reward" and the unit."""
    result: dict = {}
    reports = []  # (seconds since the epoch, total frames) of each Fps line
    for line in _ANSI.sub("", text).splitlines():
        if m := _SF2_FPS.search(line):
            result["fps10"], result["frames"] = float(m.group(1)), int(m.group(2))
            if t := _SF2_TIME.search(line):
                reports.append((datetime.strptime(t.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), result["frames"]))
        elif m := _SF2_REWARD.search(line):
            result["reward"] = float(m.group(1))
        elif m := _SF2_DONE.search(line):
            result["frames"], result["fps"] = int(m.group(1)), float(m.group(2))
        elif line.startswith("summaries_use_frameskip="):
            result["unit"] = "env frames" if line.endswith("True") else "env steps"
    if "fps" not in result and len(reports) > 1 and reports[-1][0] > reports[0][0]:
        result["fps"] = (reports[-1][1] - reports[0][1]) / (reports[-1][0] - reports[0][0])
    if reports:
        result["seconds"] = reports[-1][0] - reports[0][0]
    return result


def sf2_command(py: Path, env: str, workers: int, flags: list[str], train_dir: str) -> list[str]:
    """SF2's Atari example with `flags` (--device=cpu always: its default needs CUDA)."""
    base = [str(py), "-m", "sf_examples.atari.train_atari", f"--env={env}", f"--num_workers={workers}", "--device=cpu"]
    return [*base, *flags, f"--train_dir={train_dir}", "--experiment=sf2_bench"]


def group_members(pgid: int) -> list[str]:
    """`pid command` of each live process in the process group `pgid` (from ps)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,pgid=,stat=,args="], capture_output=True, text=True).stdout
    rows = [ln.split(None, 3) for ln in out.splitlines()]
    return [
        f"{r[0]} {r[3] if len(r) > 3 else ''}" for r in rows if len(r) > 2 and r[1] == str(pgid) and "Z" not in r[2]
    ]


def start_group(cmd: list[str], **kwargs) -> subprocess.Popen:
    """`cmd` leading a new process group, output piped as text, SIGINT at its default: a job started in the
    background by a non-interactive shell (nohup ... &) inherits SIGINT ignored, and Python then never raises
    KeyboardInterrupt, so SF2 would not stop on SIGINT."""
    pipe = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return subprocess.Popen(cmd, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **pipe, **kwargs)


def stop_group(proc: subprocess.Popen, grace: float = 60.0) -> tuple[list[str], list[str]]:
    """SIGINT (Ctrl-C) to the process group `proc` leads, up to `grace` s for all of it to end, then SIGKILL to what
    is left: (the processes that needed SIGKILL, those still there after it), as ps lists them."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    while group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    killed = group_members(proc.pid)
    if killed:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(1.0)
    proc.wait(timeout=30)
    return killed, group_members(proc.pid)


def run_sf2(py: Path, env: str, workers: int, flags: list[str], seconds: float) -> dict:
    """One SF2 run, stopped --seconds after its first report (stop_group), its log parsed (parse_sf2_log)."""
    with tempfile.TemporaryDirectory() as td:
        # not our PYTHONPATH nor our checkout as cwd: both would make `import sample_factory` find this project
        environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        proc = start_group(sf2_command(py, env, workers, flags, td), cwd=td, env=environ)
        lines: list[str] = []
        first_report = threading.Event()

        def read() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.append(line)
                if "Fps is" in line:
                    first_report.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        t0 = time.monotonic()
        while not first_report.wait(0.5) and proc.poll() is None and time.monotonic() - t0 < 600:
            pass
        deadline = time.monotonic() + seconds
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        killed, left = stop_group(proc)
        reader.join(timeout=30)
    text = "".join(lines)
    tail = _ANSI.sub("", text).strip().splitlines()[-25:]  # SF2's final timing and FPS lines
    result = {"rc": proc.returncode, "killed_after_sigint": killed, "left_behind": left, **parse_sf2_log(text)}
    if "fps10" not in result:
        result["error"] = "no Fps report: " + " | ".join(tail[-5:])
    return {**result, "log_tail": tail}


def run_ours(env: str, workers: int, flags: list[str], seconds: float) -> dict:
    """Our train.py via benchmark_atari.run_train, its numbers converted to frames if it reported env steps."""
    r, summary = run_train([f"--env={env}", f"--num_workers={workers}", *flags], seconds)
    k = 1 if r.get("unit") == "env frames" else FRAMESKIP
    out = {"rc": r["rc"], "unit": r.get("unit"), "reward": r.get("reward"), "seconds": r.get("seconds")}
    if "fps" in r:
        out.update(fps10=r.get("fps10", 0.0) * k, fps=r["fps"] * k, frames=r["env_steps"] * k)
        if "samples_trained" in r:
            out["fps_trained"] = r["samples_trained"] * FRAMESKIP / max(r["seconds"], 1e-9)
    else:
        out["error"] = f"train.py exited with {r['rc']}: " + " | ".join(r["stderr_tail"])
    out["timing"] = summary
    return out


def sf2_venv(path: Path) -> tuple[Path, dict[str, str]]:
    """The python of SF2's venv at `path` (made, or reused if it works: see the module doc) and its versions."""

    def register_ale(py: Path) -> None:
        next(path.glob("lib/python*/site-packages")).joinpath("sf2_benchmark_ale.pth").write_text("import ale_py\n")

    py = make_venv(path, SF2_INSTALLS, probe=SF2_PROBE, after_install=register_ale)
    script = f"import json, importlib.metadata as m; print(json.dumps({{p: m.version(p) for p in {PACKAGES!r}}}))"
    return py, json.loads(run_in(py, script).stdout)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _median(values: list) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def summarize(runs: list[dict]) -> dict:
    """Per case and library: medians of fps10, fps, the last reward and fps10 / ceiling; ratios ours / SF2."""
    out: dict = {}
    for case in CASES:
        row: dict = {}
        for lib in ("sf2", "ours"):
            rs = [r for r in runs if r["case"] == case and r["lib"] == lib]
            row[lib] = {k: _median([r.get(k) for r in rs]) for k in ("fps10", "fps", "reward", "to_ceiling")}
        for k in ("fps10", "fps"):
            sf2, ours = row["sf2"][k], row["ours"][k]
            row[f"ratio_{k}"] = ours / sf2 if sf2 and ours is not None else None
        out[case] = row
    return out


def _f(x: float | None, fmt: str = ",.0f") -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def write(result: dict, output: Path) -> str:
    """The markdown table (also returned) at `output`, the json beside it."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.with_suffix(".json").write_text(json.dumps(result, indent=1))
    versions = ", ".join(f"{k} {v}" for k, v in result["sf2_versions"].items())
    lines = [
        f"Measured {result['date']}, {result['machine']}; load average {result['load_before']} before, "
        f"{result['load_after']} after. `{result['command']}`. SF2 venv: {versions}.",
        "Frames/s in env frames (agent steps x 4); end: the 10 s window at the end of the run; whole run: see "
        "sample_factory/tools/benchmark_sf2.py. Raw ceiling (2 processes, random actions), frames/s per round: "
        + ", ".join(_f(c) for c in result["ceilings"])
        + ".",
        "",
        "| case | | SF2 | ours | ours / SF2 |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for case, s in result["summary"].items():
        for label, k in (("frames/s, end", "fps10"), ("frames/s, whole run", "fps")):
            ratio = _f(s[f"ratio_{k}"], ".2f")
            lines.append(f"| {case} | {label} | {_f(s['sf2'][k])} | {_f(s['ours'][k])} | {ratio} |")
        for label, k in (("end / raw ceiling", "to_ceiling"), ("last mean reward", "reward")):
            lines.append(f"| {case} | {label} | {_f(s['sf2'][k], '.2f')} | {_f(s['ours'][k], '.2f')} | |")
    lines += ["", "| round | case | library | frames/s end | whole run | trained (ours) | reward | command |"]
    lines.append("| ---: | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for r in result["runs"]:
        err = f" ({r['error']})" if "error" in r else ""
        lines.append(
            f"| {r['round']} | {r['case']} | {r['lib']} | {_f(r.get('fps10'))}{err} | {_f(r.get('fps'))} | "
            f"{_f(r.get('fps_trained'))} | {_f(r.get('reward'), '.2f')} | `{r['command']}` |"
        )
    lines += ["", "Remaining differences:", *(f"- {d}" for d in result["differences"])]
    text = "\n".join(lines) + "\n"
    output.write_text(text)
    return text


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="atari_pong")
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=90.0, help="Length of each run.")
    p.add_argument("--rounds", type=int, default=2, help="Rounds of all runs, the order alternating.")
    p.add_argument("--venv", type=Path, default=Path("~/.cache/sample_factory/sf2_venv").expanduser())
    p.add_argument("--output", type=Path, default=Path("docs/results/sf2_side_by_side.md"))
    args = p.parse_args(argv)
    load_before = _load()
    py, versions = sf2_venv(args.venv)
    print(f"SF2 venv {args.venv}: " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    runs: list[dict] = []
    ceilings: list[float] = []
    for rnd in range(1, args.rounds + 1):
        ceilings.append(raw_ceiling(args.env, args.num_workers, min(args.seconds, 20.0)) * FRAMESKIP)
        print(f"round {rnd}: raw ceiling {ceilings[-1]:,.0f} frames/s", flush=True)
        for case, (sf2_flags, our_flags) in CASES.items():
            for lib in ("sf2", "ours") if rnd % 2 else ("ours", "sf2"):
                if lib == "sf2":
                    r = run_sf2(py, args.env, args.num_workers, sf2_flags, args.seconds)
                    cmd = sf2_command(Path("python"), args.env, args.num_workers, sf2_flags, "...")[:-2]
                else:
                    r = run_ours(args.env, args.num_workers, our_flags, args.seconds)
                    cmd = ["python", "train.py", f"--env={args.env}", f"--num_workers={args.num_workers}", *our_flags]
                r.update(round=rnd, case=case, lib=lib, command=" ".join(cmd))
                if r.get("fps10") is not None:
                    r["to_ceiling"] = r["fps10"] / ceilings[-1]
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in ("timing", "log_tail")}), flush=True)
                print("\n".join(r.get("timing") or r.get("log_tail", [])), flush=True)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "command": "python -m sample_factory.tools.benchmark_sf2 "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "load_before": load_before,
        "load_after": _load(),
        "sf2_versions": versions,
        "seconds": args.seconds,
        "ceilings": ceilings,
        "runs": runs,
        "summary": summarize(runs),
        "differences": DIFFERENCES,
    }
    print(write(result, args.output))
    return result


if __name__ == "__main__":
    main()
