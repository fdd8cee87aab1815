"""Sample Factory 2 side by side with this project, in one run on the same machine (issue #15):

    python -m benchmarks.benchmark_sf2 [--env=atari_pong] [--seconds=90] [--rounds=2]
        [--venv=~/.cache/sample_factory/sf2_venv] [--output=benchmarks/results/sf2_side_by_side.md]
        [--cases=same_work,fast] [--device=cpu|gpu] [--num_workers=2] [--sf2_wheels=.whl/sf2]

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
Issue 31's cases for a GPU machine (--cases=same_work,fast --device=gpu --num_workers=16):
- "same_work": CleanRL's / SF2's Atari work per sample as above, with 16 envs per worker in 2 splits (SF2 async);
- "fast": SF2's documented fast Atari setup, both with 8 envs per worker in 2 splits, rollout 32, 4 epochs x 4
  minibatches of 1,024, normalized input and returns, Nature CNN, SF2 async (ours: the issue's exact command).
SF2 runs in a throwaway venv made (or reused if it works) here: torch==2.13.0 (CPU wheel), then sample-factory 2.1.1,
numpy<2, gymnasium 0.29.1 (SF2 needs < 1.0: its Atari wrappers use gym.wrappers.FrameStack) and ale-py 0.9.1 (ROMs
in the wheel; gymnasium 0.29's atari extras would download them). ale-py >= 0.9 registers the NoFrameskip-v4 ids
only on `import ale_py`, which gymnasium 0.29 does not do, so a one-line .pth in the venv imports it.
Offline (--sf2_wheels=DIR, a machine without a package index): the wheels of benchmarks/gpu_wheels.sh are
installed with `pip install --no-index --no-deps --target` into a private folder (--sf2_site), and SF2 runs from this
python (its torch and opencv) with PYTHONPATH set to that folder alone and its cwd outside this checkout, started by
SF2_WRAPPER, a file written into that folder (imports ale_py, checks that `sample_factory` is SF2's, calls
train_atari's main).
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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from benchmarks.benchmark_gpu import SF2_ATARI_WORK, machine
from benchmarks.throwaway_venv import make_venv, run_in
from sample_factory.tools.timed_run import raw_ceiling, run_train

FRAMESKIP = 4
SF2_INSTALLS = [
    ["torch==2.13.0"],
    ["torch==2.13.0", "sample-factory==2.1.1", "numpy<2", "gymnasium==0.29.1", "ale-py==0.9.1"],
]
SF2_PROBE = "import gymnasium, sf_examples.atari.train_atari; gymnasium.make('PongNoFrameskip-v4')"
PACKAGES = (
    "sample-factory",
    "torch",
    "numpy",
    "gymnasium",
    "ale-py",
    "signal-slot-mp",
    "faster-fifo",
    "opencv-python",
    "opencv-python-headless",
)
# The versions of PACKAGES that SF2's python sees (those not installed left out).
VERSIONS = f"""import json, importlib.metadata as m
def v(p):
    try:
        return m.version(p)
    except m.PackageNotFoundError:
        return None
print(json.dumps({{p: v(p) for p in {PACKAGES!r} if v(p)}}))
"""
# Offline mode: `sample_factory` must be SF2's, from PYTHONPATH (SF2's folder alone), or the run stops.
SF2_GUARD = """import os, sys, sample_factory
site = os.path.realpath(os.environ["PYTHONPATH"])
if not os.path.realpath(sample_factory.__file__).startswith(site + os.sep):
    sys.exit(f"sample_factory from {sample_factory.__file__}, not from SF2's {site}")
"""
# Offline mode starts SF2 with this file, written beside its packages. ale-py >= 0.9 registers the NoFrameskip-v4 ids
# only when imported, and each process SF2 spawns (env info, workers) runs this file's top level again as __mp_main__.
SF2_MAIN = "sf2_benchmark_main.py"
SF2_WRAPPER = f"""import ale_py  # noqa: F401

if __name__ == "__main__":
{"".join("    " + ln for ln in SF2_GUARD.splitlines(keepends=True))}
    from sf_examples.atari.train_atari import main

    sys.exit(main())
"""
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
# SF2's documented fast Atari setup (its Nature CNN is its default convnet_atari; ours is issue 31's exact command).
FAST = [
    "--num_envs_per_worker=8",
    "--worker_num_splits=2",
    "--rollout=32",
    "--batch_size=1024",
    "--num_batches_per_epoch=4",
    "--num_epochs=4",
    "--normalize_input=True",
    "--normalize_returns=True",
]
SPLIT_16_2 = ["--num_envs_per_worker=16", "--worker_num_splits=2"]  # our atari preset's envs per worker and splits
CASES = {  # case -> (SF2 flags, our flags), besides --env, --num_workers and --device
    "same work per sample": (["--num_envs_per_worker=8", "--async_rl=True"], OURS_SAME_WORK),
    "each with its own defaults": ([], []),
    "same_work": (
        [*SPLIT_16_2, "--async_rl=True"],
        [
            *(f for f in OURS_SAME_WORK if f.split("=")[0] not in ("--num_envs_per_worker", "--worker_num_splits")),
            *SPLIT_16_2,
        ],
    ),
    "fast": ([*FAST, "--async_rl=True"], [*FAST, "--encoder_conv_architecture=convnet_nature"]),
}
DEFAULT_CASES = "same work per sample,each with its own defaults"
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
_RAISED = re.compile(r"^[\w.]*(Error|Exception|NotFound)\b")
_SF2_DONE = re.compile(r"Collected \{0: (\d+)\}, FPS: ([\d.]+)")


def parse_sf2_log(text: str) -> dict:
    """Frames/s from SF2's log: fps10 (the last "Fps is (10 sec: X" line), fps (its final "Collected {0: N}, FPS: X"
    line, else frames over the span of its reports), frames, the last "Avg episode reward" and the unit."""
    result: dict = {}
    reports = []  # (seconds since the epoch, total frames) of each Fps line
    # Each pattern on every line: processes writing to one pipe can leave two messages on one line (a report cut by
    # the Ctrl+C, then the final "Collected" line after it).
    for line in _ANSI.sub("", text).splitlines():
        if m := _SF2_FPS.search(line):
            result["fps10"], result["frames"] = float(m.group(1)), int(m.group(2))
            if t := _SF2_TIME.search(line):
                reports.append((datetime.strptime(t.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), result["frames"]))
        if m := _SF2_REWARD.search(line):
            result["reward"] = float(m.group(1))
        if m := _SF2_DONE.search(line):
            result["frames"], result["fps"] = int(m.group(1)), float(m.group(2))
        if line.startswith("summaries_use_frameskip="):
            result["unit"] = "env frames" if line.endswith("True") else "env steps"
    if "fps" not in result and len(reports) > 1 and reports[-1][0] > reports[0][0]:
        result["fps"] = (reports[-1][1] - reports[0][1]) / (reports[-1][0] - reports[0][0])
    if reports:
        result["seconds"] = reports[-1][0] - reports[0][0]
    return result


@dataclass(frozen=True)
class Sf2:
    """How SF2 runs: its python; `site`, the folder its packages were installed into from wheels (offline mode), or
    None (a venv whose site-packages hold them); --device (cpu or gpu: its default needs CUDA); `after_frames`: its
    --seconds counted from its first report of trained frames (past its start-up) instead of its first report, which
    must come within `start_timeout` s of its launch."""

    python: Path
    site: Path | None = None
    device: str = "cpu"
    after_frames: bool = False
    start_timeout: float = 600.0


def sf2_command(
    py: Path, env: str, workers: int, flags: list[str], train_dir: str, device: str = "cpu", site: Path | None = None
) -> list[str]:
    """SF2's Atari example with `flags`: its module (venv), or SF2_MAIN when its packages are in `site`."""
    start = ["-m", "sf_examples.atari.train_atari"] if site is None else [str(site / SF2_MAIN)]
    base = [str(py), *start, f"--env={env}", f"--num_workers={workers}", f"--device={device}"]
    return [*base, *flags, f"--train_dir={train_dir}", "--experiment=sf2_bench"]


def sf2_environ(site: Path | None) -> dict[str, str]:
    """SF2's environment: PYTHONPATH only `site` (offline mode), else none. Never ours: both are `sample_factory`."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**environ, "PYTHONPATH": str(site)} if site is not None else environ


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


def run_sf2(sf2: Sf2, env: str, workers: int, flags: list[str], seconds: float) -> dict:
    """One SF2 run, stopped --seconds after its first report (or its first trained frames: Sf2.after_frames; at most
    Sf2.start_timeout s to get there) by stop_group, its log parsed (parse_sf2_log)."""
    with tempfile.TemporaryDirectory() as td:
        # not our PYTHONPATH nor our checkout as cwd: both would make `import sample_factory` find this project
        cmd = sf2_command(sf2.python, env, workers, flags, td, sf2.device, sf2.site)
        t0 = time.monotonic()
        proc = start_group(cmd, cwd=td, env=sf2_environ(sf2.site))
        lines: list[str] = []
        first_report = threading.Event()

        def read() -> None:
            for line in proc.stdout:  # type: ignore[union-attr]
                lines.append(line)
                m = _SF2_FPS.search(_ANSI.sub("", line))
                if m and (not sf2.after_frames or int(m.group(2)) > 0):
                    first_report.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while not first_report.wait(0.5) and proc.poll() is None and time.monotonic() - t0 < sf2.start_timeout:
            pass
        started = time.monotonic() - t0
        deadline = time.monotonic() + seconds
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        killed, left = stop_group(proc)
        reader.join(timeout=30)
    text = "".join(lines)
    tail = _ANSI.sub("", text).strip().splitlines()[-25:]  # SF2's final timing and FPS lines
    result = {"rc": proc.returncode, "killed_after_sigint": killed, "left_behind": left, **parse_sf2_log(text)}
    result["start_s"] = round(started, 1)  # launch to its first report (or first trained frames)
    if "fps10" not in result:  # the first exception it printed (a crashed child leaves SF2 waiting), else its end
        raised = [ln for ln in _ANSI.sub("", text).splitlines() if _RAISED.match(ln)]
        result["error"] = "no Fps report: " + " | ".join(raised[:1] or tail[-5:])
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
    return py, json.loads(run_in(py, VERSIONS).stdout)


def sf2_offline(wheels: Path, site: Path) -> dict[str, str]:
    """SF2's wheels in `wheels` installed into `site` without a package index (pip --no-index --no-deps --target,
    replacing what is there), then checked as SF2 will run (SF2_WRAPPER's imports, PYTHONPATH `site` alone, cwd
    outside this checkout): the versions this python sees. RuntimeError with pip's or the check's output if not."""
    whls = sorted(str(w) for w in wheels.glob("*.whl"))
    if not whls:
        raise RuntimeError(f"no wheels in {wheels} (benchmarks/gpu_wheels.sh makes them)")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade"]
    environ = sf2_environ(None)
    done = subprocess.run([*pip, "--target", str(site), *whls], capture_output=True, text=True, env=environ)
    if done.returncode != 0:
        raise RuntimeError(f"pip install of {wheels} failed: {(done.stdout + done.stderr)[-2000:]}")
    (site / SF2_MAIN).write_text(SF2_WRAPPER)
    check = f"import ale_py\n{SF2_GUARD}{SF2_PROBE}\n"
    with tempfile.TemporaryDirectory() as td:
        run = dict(capture_output=True, text=True, cwd=td, env=sf2_environ(site))
        done = subprocess.run([sys.executable, "-c", check + VERSIONS], **run)
    if done.returncode != 0:
        raise RuntimeError(f"SF2 from {site} does not work: {done.stderr[-2000:]}")
    return json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])  # ALE prints its banner


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _median(values: list) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def summarize(runs: list[dict]) -> dict:
    """Per case and library: medians of fps10, fps, the last reward and fps10 / ceiling; ratios ours / SF2."""
    out: dict = {}
    for case in dict.fromkeys(r["case"] for r in runs):
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
        f"{result['load_after']} after. `{result['command']}`. SF2 {result.get('sf2_source', 'venv')}: {versions}.",
        "Frames/s in env frames (agent steps x 4); end: the 10 s window at the end of the run; whole run: see "
        f"benchmarks/benchmark_sf2.py. Raw ceiling ({result.get('num_workers', 2)} processes, random "
        "actions), frames/s per round: " + ", ".join(_f(c) for c in result["ceilings"]) + ".",
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


def headline(result: dict) -> dict:
    """The one-line result: per case, ours and SF2's frames/s in the 10 s window at the end (medians over rounds),
    their ratio and the errors of failed runs."""
    cases = {}
    for case, s in result["summary"].items():
        errors = [f"{r['lib']}: {r['error']}" for r in result["runs"] if r["case"] == case and "error" in r]
        cases[case] = {"ours": s["ours"]["fps10"], "sf2": s["sf2"]["fps10"], "ratio": s["ratio_fps10"]}
        cases[case].update({"errors": errors} if errors else {})
    unit = "env frames/s (agent steps x 4), 10 s window at the end of each run"
    return {"unit": unit, "device": result["device"], "num_workers": result["num_workers"], "cases": cases}


def _sf2_setup(args: argparse.Namespace) -> tuple[Sf2 | None, dict[str, str], str]:
    """(how SF2 runs, its versions, where it comes from), or (None, {}, the error) if it could not be set up."""
    try:
        if args.sf2_wheels is not None:
            versions = sf2_offline(args.sf2_wheels, args.sf2_site)
            py, source = Path(sys.executable), f"wheels {args.sf2_wheels} installed offline into {args.sf2_site}"
        else:
            (py, versions), source = sf2_venv(args.venv), f"venv {args.venv}"
    except Exception as e:  # the runs of ours still count; SF2's record the error
        return None, {}, f"SF2 setup failed: {type(e).__name__}: {e}"
    site = args.sf2_site if args.sf2_wheels is not None else None
    return Sf2(py, site, args.device, args.sf2_clock == "first_frames", args.start_timeout), versions, source


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="atari_pong")
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--seconds", type=float, default=90.0, help="Length of each run.")
    p.add_argument("--rounds", type=int, default=2, help="Rounds of all runs, the order alternating.")
    p.add_argument("--cases", default=DEFAULT_CASES, help=f"Comma-separated, of: {', '.join(CASES)}.")
    p.add_argument("--device", default="cpu", choices=("cpu", "gpu"), help="--device of both systems.")
    p.add_argument("--venv", type=Path, default=Path("~/.cache/sample_factory/sf2_venv").expanduser())
    p.add_argument(
        "--sf2_wheels",
        type=Path,
        default=None,
        help="Offline mode: SF2 from these wheels (gpu_wheels.sh's .whl/sf2), installed into --sf2_site, no venv.",
    )
    p.add_argument(
        "--sf2_site",
        type=Path,
        default=Path(tempfile.gettempdir()) / "sf2_benchmark_site",
        help="Offline mode: the folder SF2's wheels are installed into (its PYTHONPATH, alone).",
    )
    p.add_argument(
        "--sf2_clock",
        default="first_report",
        choices=("first_report", "first_frames"),
        help="SF2's --seconds start at its first report, or at its first report of trained frames (after its start-up "
        "and decorrelation, ~40 s on a 16-core GPU machine).",
    )
    p.add_argument("--start_timeout", type=float, default=600.0, help="Seconds SF2 may take to its clock's start.")
    p.add_argument("--ceiling_seconds", type=float, default=20.0, help="Raw ceiling per round (0: not measured).")
    p.add_argument("--output", type=Path, default=Path("benchmarks/results/sf2_side_by_side.md"))
    args = p.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    if unknown := [c for c in cases if c not in CASES]:
        p.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    args.sf2_site = args.sf2_site.resolve()
    load_before = _load()
    sf2, versions, source = _sf2_setup(args)
    print(f"SF2 ({source}): " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    runs: list[dict] = []
    ceilings: list[float | None] = []
    device = [f"--device={args.device}"]
    for rnd in range(1, args.rounds + 1):
        ceiling = None
        if args.ceiling_seconds > 0:
            ceiling = raw_ceiling(args.env, args.num_workers, min(args.seconds, args.ceiling_seconds)) * FRAMESKIP
            print(f"round {rnd}: raw ceiling {ceiling:,.0f} frames/s", flush=True)
        ceilings.append(ceiling)
        for case in cases:
            sf2_flags, our_flags = CASES[case]
            for lib in ("sf2", "ours") if rnd % 2 else ("ours", "sf2"):
                # a failed run is recorded and the others go on
                try:
                    if lib == "sf2":
                        cmd = sf2_command(Path("python"), args.env, args.num_workers, sf2_flags, "...", args.device)
                        cmd = cmd[:-2]
                        if sf2 is None:
                            r = {"error": source}
                        else:
                            r = run_sf2(sf2, args.env, args.num_workers, sf2_flags, args.seconds)
                    else:
                        cmd = ["python", "train.py", f"--env={args.env}", f"--num_workers={args.num_workers}"]
                        cmd += [*device, *our_flags]
                        r = run_ours(args.env, args.num_workers, [*device, *our_flags], args.seconds)
                except Exception as e:
                    r = {"error": f"{type(e).__name__}: {e}"}
                r.update(round=rnd, case=case, lib=lib, command=" ".join(cmd))
                if r.get("fps10") is not None and ceiling:
                    r["to_ceiling"] = r["fps10"] / ceiling
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k not in ("timing", "log_tail")}), flush=True)
                print("\n".join(r.get("timing") or r.get("log_tail", [])), flush=True)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "command": "python -m benchmarks.benchmark_sf2 " + " ".join(argv if argv is not None else sys.argv[1:]),
        "load_before": load_before,
        "load_after": _load(),
        "sf2_source": source,
        "sf2_versions": versions,
        "device": args.device,
        "num_workers": args.num_workers,
        "seconds": args.seconds,
        "ceilings": ceilings,
        "runs": runs,
        "summary": summarize(runs),
        "differences": DIFFERENCES,
    }
    print(write(result, args.output))
    print(json.dumps(headline(result)), flush=True)
    return result


if __name__ == "__main__":
    main()
