"""Every command block of README.md runs (issue 33): the commands as written, each training run capped by an added
`--train_for_seconds` (a stop condition besides the command's own: the first one reached ends the run), run in a
scratch folder that looks like the repository root (train.py, enjoy.py, examples/, the Makefile, `.venv` pointing
at this interpreter's environment, the checkout on PYTHONPATH), so `./train_dir` and the videos stay out of the
checkout. A command fails the test by an error exit, or by leaving a process running: when it exits, only
multiprocessing's fork server and resource tracker may still run (they exit once the run's fds close), and nothing
of it LINGER_S later (a doom run that exited 0 once left two VizDoom engines, the fork server and the resource
tracker).

Skipped, each with its reason in the test id's skip line: `make test` (the whole suite, this test included),
`pip install` (network, and it would change the environment), `tensorboard` (a server that runs until Ctrl+C),
`wandb sync` (network and a login), commands whose extra is not installed, and commands that need a GPU when
torch sees none. `make train` runs with `-o .venv/.installed-train` (its install step is skipped: this environment
is already installed). Commands of different experiments run concurrently (4 at a time: process start-up, not CPU,
is most of each), those of one experiment in README order (the enjoy.py line reads the checkpoint that the
CartPole lines write).

Also here: the README's Pong command is the run that docs/results.md cites next to it (issue 33 item 1)."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from sample_factory.config import parse_cfg
from sample_factory.envs.env_utils import frames_per_env_step
from tests.integration.conftest import is_mp_helper

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
CAP_S = 1.5  # --train_for_seconds added to every training command (start-up, not training, is what each checks)
COMMAND_TIMEOUT_S = 300
PARALLEL = 4
LINGER_S = 20

# (what a command contains, the module it needs, the extra that brings it)
NEEDS = (
    ("--env=atari_", "ale_py", "atari"),
    ("--env_backend=envpool", "envpool", "envpool"),
    ("--env=mujoco_", "mujoco", "mujoco"),
    ("--env=doom_", "vizdoom", "vizdoom"),
    ("--env=pettingzoo.", "pettingzoo", "pettingzoo"),
    ("--with_wandb", "wandb", "wandb"),
    ("--save_video=True", "imageio_ffmpeg", "video"),
    ("--save_video=True", "pygame", "video"),
)
NOT_RUN = (
    (re.compile(r"^make test\b"), "runs the whole test suite, this test included"),
    (re.compile(r"\bpip install\b"), "installs from the network and would change this environment"),
    (re.compile(r"^\.venv/bin/tensorboard\b"), "a server that runs until Ctrl+C"),
    (re.compile(r"^\.venv/bin/wandb sync\b"), "uploads to W&B: needs network access and a login"),
)


@dataclass
class Command:
    text: str  # as in the README
    argv: list[str] = field(default_factory=list)  # what runs (the text plus the cap)
    skip: str | None = None
    experiment: str = ""


def readme_commands() -> list[str]:
    """Every command of every ```bash block, continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            tokens = shlex.split(line, comments=True)
            if tokens:
                out.append(shlex.join(tokens))
    return out


def plan(text: str) -> Command:
    cmd = Command(text)
    for pattern, why in NOT_RUN:
        if pattern.search(text):
            cmd.skip = why
            return cmd
    for fragment, module, extra in NEEDS:
        if fragment in text and importlib.util.find_spec(module) is None:
            cmd.skip = f"needs {module} (the [{extra}] extra), not installed"
            return cmd
    if "--device=gpu" in text:
        import torch

        if not torch.cuda.is_available():
            cmd.skip = "needs a GPU"
            return cmd
    tokens = shlex.split(text)
    if tokens[:2] == ["make", "train"]:
        args = [t for t in tokens if t.startswith("TRAIN_ARGS=")]
        train_args = (args[0].split("=", 1)[1] + " " if args else "") + f"--train_for_seconds={CAP_S}"
        cmd.argv = ["make", "-o", ".venv/.installed-train"]
        cmd.argv += [t for t in tokens[1:] if not t.startswith("TRAIN_ARGS=")] + [f"TRAIN_ARGS={train_args}"]
        named = re.search(r"--experiment[= ](\S+)", train_args)
        cmd.experiment = named.group(1) if named else "cartpole"  # the Makefile's default
        return cmd
    script = next((t for t in tokens if t.endswith(".py")), "")
    if not script and "-m" not in tokens:
        raise AssertionError(f"README command this test does not know how to run: {text}")
    if script != "enjoy.py":  # train.py and the examples: training runs
        tokens.append(f"--train_for_seconds={CAP_S}")
    named = re.search(r"--experiment=(\S+)", text)
    cmd.experiment = named.group(1) if named else "<env>__<algo>__<seed>"  # train.py names such a run so
    env_prefix = tokens[0].count("=") == 1 and not tokens[0].startswith("-")
    cmd.argv = ["bash", "-c", shlex.join(tokens)] if env_prefix else tokens
    return cmd


COMMANDS = [plan(c) for c in readme_commands()]


def _ids() -> list[str]:
    return [f"{i:02d}-{re.sub(r'[^A-Za-z0-9_.=-]+', '_', c.text)[:70]}" for i, c in enumerate(COMMANDS)]


@dataclass
class Outcome:
    returncode: int | None  # None: killed at COMMAND_TIMEOUT_S
    output: str
    leftovers: list[str]  # processes of the command that outlived it (see _kill_group; killed by the test)
    seconds: float


def _leftovers(pgid: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                found.append(proc)
        except (ProcessLookupError, psutil.Error):
            pass
    return found


def _describe(proc: psutil.Process) -> tuple[str, list[str]] | None:
    """("pid command line", argv) of a running process; None for one gone or a zombie (it holds nothing)."""
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        cmdline = proc.cmdline()
    except psutil.Error:
        return None
    return f"{proc.pid} {' '.join(cmdline)[:120]}", cmdline


def _kill_group(pgid: int) -> list[str]:
    """What the command left in its process group, right after it exited: anything but multiprocessing's helpers
    (is_mp_helper: they exit a moment after the run), and whatever still runs LINGER_S later. Kills it all, and
    removes the shared memory of VizDoom games killed so."""
    at_exit = _leftovers(pgid)
    described: dict[int, str] = {}
    for proc in at_exit:
        seen = _describe(proc)
        # An empty command line: the process is exiting (the kernel has released its memory), seen before it became
        # a zombie (CI: a fork server on its way out, no longer recognizable as one); reported only if it lingers.
        # (the command line read here decides: a tracker on its way out no longer has one to read a moment later)
        if seen and seen[1] and not is_mp_helper(proc, seen[1]):
            described[proc.pid] = f"{seen[0]} (running when the command exited)"
    _, procs = psutil.wait_procs(at_exit, timeout=LINGER_S)
    doom_ids = []
    for proc in procs:
        seen = _describe(proc)
        if seen is None:
            continue
        cmdline = seen[1]
        described[proc.pid] = f"{seen[0]} (running {LINGER_S} s after the command exited)"
        if "+viz_instance_id" in cmdline:
            doom_ids.append(cmdline[cmdline.index("+viz_instance_id") + 1])
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)
    for doom_id in doom_ids:
        for path in Path("/dev/shm").glob(f"ViZDoom*{doom_id}"):
            path.unlink(missing_ok=True)
    return list(described.values())


def _run(argv: list[str], cwd: Path, env: dict, log: Path) -> Outcome:
    """Output to a file, not a pipe: a process the command leaves behind would hold a pipe open."""
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl+C: the run stops in order
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = None
    seconds = time.monotonic() - start
    leftovers = _kill_group(proc.pid)
    return Outcome(rc, log.read_text(), leftovers, seconds)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[int, Outcome]:
    """Run every runnable command once: groups of one experiment in README order, the groups concurrently."""
    root = tmp_path_factory.mktemp("readme_root")
    logs = tmp_path_factory.mktemp("readme_logs")
    for name in ("train.py", "enjoy.py", "examples", "Makefile", "setup.py", "constraints.txt"):
        (root / name).symlink_to(REPO / name)
    (root / ".venv").symlink_to(sys.prefix)  # this interpreter's virtualenv (its bin/python, bin/pip)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(COMMANDS):
        if c.skip is None:
            groups.setdefault(c.experiment, []).append(i)

    def run_group(indices: list[int]) -> dict[int, Outcome]:
        return {i: _run(COMMANDS[i].argv, root, env, logs / f"{i:02d}.log") for i in indices}

    out: dict[int, Outcome] = {}
    with ThreadPoolExecutor(PARALLEL) as pool:
        for done in pool.map(run_group, groups.values()):
            out.update(done)
    return out


def test_readme_has_commands():
    assert len(COMMANDS) >= 10 and sum(c.skip is None for c in COMMANDS) >= 5, [c.text for c in COMMANDS]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=_ids())
def test_readme_command_runs(index, results):
    cmd = COMMANDS[index]
    if cmd.skip:
        pytest.skip(cmd.skip)
    r = results[index]
    print(f"{r.seconds:.1f} s: {cmd.text}")
    status = f"killed after {COMMAND_TIMEOUT_S} s" if r.returncode is None else f"exit {r.returncode}"
    assert r.returncode == 0, f"{cmd.text}\n{status}\n{r.output[-4000:]}"
    assert not r.leftovers, f"{cmd.text} left processes running:\n" + "\n".join(r.leftovers) + f"\n{r.output[-4000:]}"


# ---- item 1: the Pong command is the cited run -------------------------------------------------------------------
def _section(doc: str, title: str) -> str:
    start = doc.index(f"## {title}\n")
    end = doc.find("\n## ", start + 1)
    return doc[start : end if end >= 0 else None]


def _agent_step_settings(argv: list[str]) -> dict:
    """What decides the learning curve of a run, budgets in agent steps (the unit does not depend on the flags)."""
    cfg = parse_cfg(argv)
    keys = ("env", "seed", "num_workers", "lr_schedule", "learning_rate", "env_sticky_actions", "stop_at_reward")
    out = {k: getattr(cfg, k) for k in keys}
    out["train_for_agent_steps"] = cfg.train_for_env_steps / frames_per_env_step(cfg)
    return out


def test_readme_pong_command_is_the_cited_run():
    """README: "+18 after 83 minutes on a 2-core CPU" must be the run of docs/results.md ("Atari Pong on 2 cores:
    +18"), whose harness counted agent steps: the README command and results.md's plain command must set what the
    harness set, with the budget (and so the learning-rate decay) in the same agent steps."""
    from benchmarks import benchmark_learning as bl
    from benchmarks.learning_suites import suite_envs

    block = re.search(
        r"```bash\n(.*?)```", _section((REPO / "docs" / "results.md").read_text(), "Atari Pong on 2 cores: +18"), re.S
    )
    lines = [shlex.split(line, comments=True) for line in block.group(1).replace("\\\n", " ").splitlines()]
    harness, plain = [t for t in lines if t]
    assert harness[:3] == ["python", "-m", "benchmarks.benchmark_learning"] and plain[1] == "train.py"
    args = bl.parse_args(harness[3:])
    spec = suite_envs(args.suite, args.envs.split(","))[0]
    cited = _agent_step_settings(bl.train_command(spec, 0, args.budget, args)[3:])
    assert cited["train_for_agent_steps"] == 10_000_000 and cited["stop_at_reward"] == 18  # CleanRL's budget

    assert _agent_step_settings(plain[2:]) == cited
    # The CPU command is the one that stops at the cited score (the GPU line names no score).
    readme = [c for c in readme_commands() if "--env=atari_pong" in c and "--stop_at_reward=18" in c]
    assert len(readme) == 1, readme
    assert _agent_step_settings(shlex.split(readme[0])[2:]) == cited
    assert "+18: 83 minutes on a 2-core CPU, at 4.86M agent steps = 19.4M env frames" in README


FRAMES_TO_SCORE = REPO / "benchmarks" / "results" / "frames_to_score"
# what a run's cfg.json holds that does not decide its learning curve (num_envs: its per-worker share is compared)
NOT_LEARNING = {"experiment", "train_dir", "command_line", "cli_flags", "tuned_for", "preset_reason", "seed"}
NOT_LEARNING |= {"train_for_env_steps", "total_timesteps", "stop_at_reward", "num_envs"}


def test_results_fewest_frames_command_is_the_cited_run(monkeypatch):
    """docs/results.md's "Fewest frames to Pong +18" command must be the run its table cites: it resolves to the cfg
    that seed's run saved, whose progress.csv first reaches +18 at the frames the table prints. A preset change that
    moves the curve fails here until the numbers are measured again."""
    section = _section((REPO / "docs" / "results.md").read_text(), "Fewest frames to Pong +18")
    command = re.search(r"```bash\n(.*?)```", section, re.S).group(1).splitlines()[0]
    argv = shlex.split(command)
    assert argv[:2] == ["python", "train.py"]
    for module in ("checks", "env_defaults"):  # the 2-core CPU the run had: its workers and learner threads
        monkeypatch.setattr(f"sample_factory.config.{module}.usable_cores", lambda: 2)
    cfg = parse_cfg(argv[2:])
    ours = {k: v for k, v in vars(cfg).items() if k not in NOT_LEARNING}

    def same(path: Path) -> bool:  # the saved cfg (<setup>_seed<N>_cfg.json.gz) is the command's, value for value
        saved = json.loads(gzip.decompress(path.read_bytes()))
        return {k: v for k, v in saved.items() if k in ours} == {k: v for k, v in ours.items() if k in saved}

    saved_cfgs = sorted(FRAMES_TO_SCORE.glob(f"*_seed{cfg.seed}_cfg.json.gz"))
    matching = [p for p in saved_cfgs if same(p)]
    assert len(matching) == 1, f"the command resolves to none (or several) of {[p.name for p in saved_cfgs]}"
    setup = matching[0].name.split("_seed")[0]
    assert cfg.async_rl is False  # synchronous and seeded: the run repeats

    with (FRAMES_TO_SCORE / f"{setup}_seed{cfg.seed}_progress.csv").open() as f:
        frames = next(int(r["env_frames"]) for r in csv.DictReader(f) if float(r["reward_p0"]) >= 18)
    row = next(line for line in section.splitlines() if line.startswith(f"| {cfg.seed} |"))
    assert f"| {frames:,} |" in row, row


def test_readme_sample_output_is_what_the_command_prints(results):
    """The README's sample progress output came from its command: the experiment line of our run of that command
    must agree on workers, envs and trajectory slots (it said 8 slots where a real run prints 4). Compared when
    this machine starts as many workers as the sample's (--num_workers defaults to the core count)."""
    shape = re.compile(r"\| (\d+) workers x (\d+) envs, (\d+) trajectory slots \(([\d.]+) MiB\)")
    sample = shape.findall(README)
    assert len(sample) == 1, sample
    (index,) = [i for i, c in enumerate(COMMANDS) if "--experiment=readme" in c.text]
    ran = shape.findall(results[index].output)
    assert len(ran) == 1, results[index].output[-2000:]
    if ran[0][0] != sample[0][0]:
        pytest.skip(f"this machine starts {ran[0][0]} workers, the sample {sample[0][0]}")
    assert ran == sample
