"""benchmarks.benchmark_learning: curve, log and evaluation parsing, the suite table, the scheduler with stand-in
runs, and one real `ci` run of a 1-env suite (CartPole-v1, 1 seed) in its own process group, followed by a resume
that must not launch train.py again and a `--plot_only` regeneration."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from argparse import Namespace
from pathlib import Path

import gymnasium as gym
import pytest

from benchmarks import benchmark_learning as bl
from benchmarks.learning_suites import LEVELS, NOT_FILLED, SUITES, suite_envs
from sample_factory.config.env_defaults import preset_name_for_env
from sample_factory.envs.env_utils import unknown_env_message
from sample_factory.envs.minatar import parse_minatar_id

REPO_ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# Two sessions: the second (a resume) restarts its clock at 0 and counts env steps from 0 until the checkpoint's
# 3000 are added (as train.py writes it); nan before the first episode; a torn last line.
PROGRESS = """time_s,env_steps,fps_10s,reward_p0
1.0,1000,900.0,nan
2.0,2000,950.0,10.000
3.0,3000,990.0,50.000
0.5,500,800.0,nan
1.5,1500,850.0,80.000
2.5,5500,870.0,120.000
3.5,6500,880.0,110.0
4.0,70
"""


# ---- pure parsing ------------------------------------------------------------------------------------------
def test_parse_progress_csv_joins_resumed_sessions_and_skips_torn_rows():
    rows = bl.parse_progress_csv(PROGRESS)
    assert [r[0] for r in rows] == [1000, 2000, 3000, 3500, 4500, 5500, 6500]
    # the second session continues after the first one's last row (3.0 s)
    assert [r[1] for r in rows] == [1.0, 2.0, 3.0, 3.5, 4.5, 5.5, 6.5]
    assert math.isnan(rows[0][2]) and rows[-1][2] == 110.0


def test_summarize_curve_threshold_crossing_and_final_average():
    rows = bl.parse_progress_csv(PROGRESS)
    s = bl.summarize_curve(rows, threshold=100.0, final_points=3)
    assert s["reached"] and s["env_steps_to_threshold"] == 5500 and s["wall_s_to_threshold"] == 5.5
    assert s["final_reward"] == pytest.approx((80 + 120 + 110) / 3)
    assert s["best_reward"] == 120.0
    assert (s["env_steps"], s["wall_s"]) == (6500, 6.5)
    assert s["curve"][0] == [2000, 2.0, 10.0]  # nan rows are not curve points

    exact = bl.summarize_curve(rows, threshold=50.0)  # >=: a row exactly at the threshold counts
    assert exact["env_steps_to_threshold"] == 3000 and exact["wall_s_to_threshold"] == 3.0
    never = bl.summarize_curve(rows, threshold=500.0)
    assert not never["reached"] and never["env_steps_to_threshold"] is None and never["wall_s_to_threshold"] is None
    none = bl.summarize_curve(rows, threshold=None)
    assert not none["reached"] and none["final_reward"] == pytest.approx((10 + 50 + 80 + 120 + 110) / 5)


def test_summarize_curve_without_episodes():
    s = bl.summarize_curve(bl.parse_progress_csv("time_s,env_steps,fps_10s,reward_p0\n1.0,500,10.0,nan\n"), 1.0)
    assert s["final_reward"] is None and s["best_reward"] is None and s["curve"] == [] and s["env_steps"] == 500
    assert bl.summarize_curve([], None)["env_steps"] == 0


def test_parse_log_sums_sessions():
    log = (
        "[10:00:01] stopping: SIGINT received\n[10:00:01] done: 1000 env steps in 1.0 s, 1000 FPS overall\n"
        "[10:01:00] stopping: reached 5000 env steps\n[10:01:04] done: 4000 env steps in 3.0 s, 1333 FPS overall\n"
    )
    assert bl.parse_log(log) == {"fps": 1250.0, "stop_reason": "reached 5000 env steps"}
    assert bl.parse_log("Traceback ...") == {"fps": None, "stop_reason": None}


# ---- suite table and command -------------------------------------------------------------------------------
def test_suite_table():
    for suite, envs in SUITES.items():
        for spec in envs:
            assert set(spec.budgets) == set(LEVELS), (suite, spec.env)
            assert spec.budget("ci").env_steps <= spec.budget("short").env_steps <= spec.budget("full").env_steps
            assert spec.threshold_source and spec.budget_source
            for ref in spec.references:  # never a number without a source, never a source faking a number
                assert ref.source == NOT_FILLED if ref.value is None else ref.source
    for spec in SUITES["classic"] + SUITES["no_preset"]:  # gymnasium's own thresholds, where it registers one
        registered = gym.spec(spec.env).reward_threshold
        assert spec.threshold == registered if registered is not None else spec.threshold_source.startswith("set here")
    # every env of the no_preset suite is one that no family preset names
    assert all(preset_name_for_env(spec.env) is None for spec in SUITES["no_preset"])
    assert [s.env for s in suite_envs("classic", ["Acrobot-v1"])] == ["Acrobot-v1"]
    with pytest.raises(ValueError, match="not in suite"):
        suite_envs("classic", ["Pong"])
    with pytest.raises(ValueError, match="unknown suite"):
        suite_envs("nope")


def test_train_command():
    spec = SUITES["classic"][0]
    args = Namespace(suite="classic", train_dir="/td", num_workers=None, device=None, stop_when_solved=False, extra="")
    cmd = bl.train_command(spec, 3, "ci", args)
    assert cmd[1:3] == ["-m", "sample_factory.train"]
    assert "--experiment=classic_CartPole-v1_s3" in cmd and "--seed=3" in cmd and "--train_dir=/td" in cmd
    assert f"--train_for_env_steps={spec.budget('ci').env_steps}" in cmd
    assert not any(a.startswith(("--num_workers", "--device", "--stop_at_reward")) for a in cmd)
    args = Namespace(
        **{**vars(args), "num_workers": 8, "device": "gpu", "stop_when_solved": True, "extra": "--a=1 --b=x"}
    )
    cmd = bl.train_command(spec, 0, "full", args)
    assert {"--num_workers=8", "--device=gpu", "--stop_at_reward=475.0"} <= set(cmd) and cmd[-2:] == ["--a=1", "--b=x"]
    assert bl.experiment_name("atari", "ALE/Pong-v5", 1) == "atari_ALE_Pong-v5_s1"
    # another algorithm of the same suite gets its own folder: it must not resume the APPO run's checkpoint
    assert bl.experiment_name("minatar", "MinAtar/Breakout-v1", 0, "--algo=DQN") == "minatar_MinAtar_Breakout-v1_dqn_s0"
    assert bl.experiment_name("atari", "ALE/Pong-v5", 1, "--algo APPO --seed=2") == "atari_ALE_Pong-v5_s1"


@pytest.mark.parametrize("suite,version,minimal", [("minatar", "v1", True), ("minatar_v0", "v0", False)])
def test_minatar_suites_are_the_five_games_at_the_papers_5m_frames(suite, version, minimal):
    specs = suite_envs(suite)
    games = ["Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders"]
    assert [s.env for s in specs] == [f"MinAtar/{g}-{version}" for g in games]
    for spec in specs:
        assert unknown_env_message(spec.env) is None and parse_minatar_id(spec.env)[1] == minimal
        assert preset_name_for_env(spec.env) == "minatar"
        full = spec.budget("full")
        assert (full.env_steps, full.seeds) == (5_000_000, 3)  # no frame skip: 5M env steps = 5M frames
        assert "1903.03176" in spec.budget_source and spec.threshold is None
        assert spec.references and all(r.source and "Young & Tian 2019" in r.label for r in spec.references)
        # the reference says where the protocol differs from the paper's (all 6 actions)
        assert all(("minimal set" in r.source) == minimal for r in spec.references)
    args = Namespace(suite=suite, train_dir="/td", num_workers=None, device=None, stop_when_solved=True)
    cmd = bl.train_command(specs[1], 2, "full", Namespace(**vars(args), extra="--algo=DQN"))
    assert f"--env=MinAtar/Breakout-{version}" in cmd and "--train_for_env_steps=5000000" in cmd
    assert cmd[-1] == "--algo=DQN"
    assert not any(a.startswith("--stop_at_reward") for a in cmd)  # no threshold: the return at 5M is the result


def test_the_minatar_study_commands_of_the_results_page():
    """docs/results.md's MinAtar commands: all five games, 3 seeds, 5M env steps; APPO on both suites, DQN on the
    paper's protocol; APPO and DQN into folders of their own (their runs have the same names, so a shared train_dir
    would resume one algorithm's checkpoints with the other)."""
    text = (REPO_ROOT / "docs" / "results.md").read_text()
    section = text[text.index("## MinAtar (first checks)") :]
    block = re.search(r"```bash\n(.*?)```", section[: section.index("\n## ", 3)], re.S).group(1)
    commands = [shlex.split(c) for c in block.replace("\\\n", " ").splitlines() if c.strip()]
    assert all(c[:3] == ["python", "-m", "benchmarks.benchmark_learning"] for c in commands)
    parsed = [bl.parse_args(c[3:]) for c in commands]
    for args in parsed:
        assert (args.budget, args.seeds, args.envs) == ("full", 3, "")
        for spec in suite_envs(args.suite):
            cmd = bl.train_command(spec, 0, args.budget, args)
            assert "--train_for_env_steps=5000000" in cmd
    runs = sorted((a.suite, shlex.split(a.extra)[:1]) for a in parsed)
    assert runs == [("minatar", []), ("minatar_v0", []), ("minatar_v0", ["--algo=DQN"])]
    # DQN is compared with the paper's returns in its protocol: episodes at epsilon 0.1, evaluated every 1M frames
    dqn_extra = next(shlex.split(a.extra) for a in parsed if a.extra)
    assert {"--eval_epsilon=0.1", "--eval_every_env_steps=1000000", "--eval_episodes=100"} <= set(dqn_extra)
    appo = {(a.train_dir, a.output) for a in parsed if not a.extra}
    dqn = {(a.train_dir, a.output) for a in parsed if a.extra}
    assert len(appo) == 1 and len(dqn) == 1 and not {d for d, _ in appo} & {d for d, _ in dqn}
    assert not {o for _, o in appo} & {o for _, o in dqn}


def test_env_table_entry_keeps_the_passthrough_flags_split_as_a_shell_would():
    assert bl.env_table_entry(bl.SUITES["classic"][0], "short", "--seed=3 --x='a b'")["passthrough_flags"] == [
        "--seed=3",
        "--x=a b",
    ]


def test_periodic_evaluations_are_read_into_the_record(tmp_path):
    """train.py's eval/eval_<env steps>_p0.json files (--eval_every_env_steps) become the record's `evals`: policy 0's,
    in env-step order, a file cut off while being written left out."""
    (tmp_path / "eval").mkdir()
    for steps, reward in ((1_000_000, 4.0), (500_000, 2.0)):
        result = {"episodes": 100, "reward_mean": reward, "reward_std": 1.0, "rewards": [reward] * 100}
        (tmp_path / "eval" / f"eval_{steps}_p0.json").write_text(json.dumps(result))
    (tmp_path / "eval" / "eval_1500000_p0.json").write_text('{"episo')  # cut off while being written
    (tmp_path / "eval" / "notes.json").write_text("{}")
    (tmp_path / "eval" / "eval_1000000_p1.json").write_text(json.dumps({"episodes": 5, "reward_mean": 99.0}))
    assert bl.read_evaluations(tmp_path) == [[500_000, 2.0, 100], [1_000_000, 4.0, 100]]
    assert bl.read_evaluations(tmp_path / "none") == []


# ---- a real run --------------------------------------------------------------------------------------------
def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run_benchmark(argv: list[str], timeout: float = 200) -> dict:
    """`python -m benchmarks.benchmark_learning <argv>` in its own process group, so that whatever it leaves
    running can be found and killed: its exit code, output and whether any process of it outlived it."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.benchmark_learning", *argv],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        deadline = time.monotonic() + 15  # forkserver / resource tracker exit just after the run
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        leaked = _group_alive(proc.pid)
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    return {"rc": proc.returncode, "out": out, "leaked": leaked}


@pytest.fixture(scope="module")
def ci_run(tmp_path_factory):
    """One `ci` run of CartPole-v1 (1 seed, 1 worker) through the command line, in its own process group, so
    that whatever it leaves running can be found and killed."""
    root = tmp_path_factory.mktemp("learning")
    argv = [
        "--suite=classic",
        "--budget=ci",
        "--envs=CartPole-v1",
        "--seeds=1",
        "--num_workers=1",
        "--device=cpu",
        f"--train_dir={root / 'td'}",
        f"--output={root / 'out'}",
    ]
    return {"root": root, "argv": argv, **_run_benchmark(argv)}


@pytest.mark.timeout(300)
def test_ci_run_writes_record_table_and_plot(ci_run):
    assert ci_run["rc"] == 0, ci_run["out"]
    assert not ci_run["leaked"], "processes of the run outlived it"
    out = ci_run["root"] / "out"
    assert not (out / "classic.json").exists()
    doc = bl.load_doc(out / "classic.json.gz")
    assert doc["budget"] == "ci" and list(doc["runs"]) == ["CartPole-v1/s0"]
    r = doc["runs"]["CartPole-v1/s0"]
    assert r["rc"] == 0 and r["complete"] and r["stop_reason"].startswith("reached")
    assert r["env_steps"] >= 1000 and r["wall_s"] > 0 and r["fps"] > 0
    assert r["curve"] and 0 < r["final_reward"] <= 500 and r["final_reward"] <= r["best_reward"] <= 500
    steps = [p[0] for p in r["curve"]]
    assert steps == sorted(steps)
    assert "CartPole-v1 seed 0: exit 0, final reward" in ci_run["out"]
    exp = ci_run["root"] / "td" / "classic_CartPole-v1_s0"
    assert (exp / "progress.csv").exists() and "sample_factory.train" in (exp / "benchmark.log").read_text()
    md = (out / "classic.md").read_text()
    assert "| CartPole-v1 | 1 |" in md and "--budget=ci" in md and "(classic_CartPole-v1.png)" in md
    assert (out / "classic_CartPole-v1.png").read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.timeout(300)
def test_rerun_skips_the_recorded_run_then_plot_only_regenerates(ci_run, monkeypatch, capsys):
    assert ci_run["rc"] == 0, ci_run["out"]
    out = ci_run["root"] / "out"
    log = ci_run["root"] / "td" / "classic_CartPole-v1_s0" / "benchmark.log"
    log_before = log.read_text()

    def no_launch(*a, **k):
        raise AssertionError("train.py launched again")

    monkeypatch.setattr(bl, "launch", no_launch)
    assert bl.main(ci_run["argv"]) == 0
    assert "skip CartPole-v1 seed 0" in capsys.readouterr().out
    assert log.read_text() == log_before

    for name in ("classic.md", "classic_CartPole-v1.png"):
        (out / name).unlink()
    assert bl.main([*ci_run["argv"], "--plot_only"]) == 0
    assert (out / "classic.md").exists() and (out / "classic_CartPole-v1.png").exists()

    # another budget level into the same folders is refused instead of being mixed in
    assert bl.main([a if a != "--budget=ci" else "--budget=short" for a in ci_run["argv"]]) == 2


@pytest.mark.process
@pytest.mark.timeout(300)
def test_a_minatar_ci_run_with_dqn(tmp_path):
    """One `ci` run of MinAtar/Breakout-v1 with --extra=--algo=DQN: the minatar_dqn preset, a few SGD steps."""
    pytest.importorskip("minatar", reason="MinAtar needs the [minatar] extra: pip install -e .[minatar]")
    extra = "--algo=DQN --learning_starts=1024 --training_intensity=4"  # updates within the ci budget's 5,000 steps
    argv = ["--suite=minatar", "--budget=ci", "--envs=MinAtar/Breakout-v1", "--seeds=1", "--num_workers=1"]
    argv += ["--device=cpu", f"--train_dir={tmp_path / 'td'}", f"--output={tmp_path / 'out'}", f"--extra={extra}"]
    run = _run_benchmark(argv)
    assert run["rc"] == 0, run["out"]
    assert not run["leaked"], "processes of the run outlived it"
    r = bl.load_doc(tmp_path / "out" / "minatar.json.gz")["runs"]["MinAtar/Breakout-v1/s0"]
    assert r["complete"] and r["stop_reason"].startswith("reached") and r["env_steps"] >= 5_000, run["out"]
    assert r["command"].endswith(extra)
    cfg = json.loads((tmp_path / "td" / "minatar_MinAtar_Breakout-v1_dqn_s0" / "cfg.json").read_text())
    assert (cfg["algo"], cfg["preset"]) == ("DQN", "minatar_dqn")
    assert "| MinAtar/Breakout-v1 | 1 |" in (tmp_path / "out" / "minatar.md").read_text()


def test_the_record_is_gzipped_json_and_an_older_plain_one_is_read(tmp_path):
    doc = {"suite": "classic", "budget": "short", "runs": {"CartPole-v1/s0": {"complete": True, "curve": [[1, 2, 3]]}}}
    path = bl.results_path(tmp_path, "classic")
    assert path.name == "classic.json.gz"
    assert bl.load_doc(path) == {}
    (tmp_path / "classic.json").write_text(json.dumps(doc))  # as versions before the .gz wrote it
    assert bl.load_doc(path) == doc
    bl.save_doc(doc, path)
    assert gzip.decompress(path.read_bytes()).startswith(b'{"suite":"classic"') and bl.load_doc(path) == doc


def test_the_recorded_suites_load():
    """benchmarks/results/ keeps the suites' records gzipped; each loads and has runs with curves."""
    records = sorted((REPO_ROOT / "benchmarks" / "results").rglob("*.json.gz"))
    suites = [p for p in records if p.name.split(".")[0] in SUITES]
    assert {p.name for p in suites} >= {"classic.json.gz", "mujoco.json.gz", "atari.json.gz", "doom.json.gz"}
    for path in suites:
        doc = bl.load_doc(path)
        assert doc["suite"] == path.name.split(".")[0] and doc["runs"], path
        assert all("curve" in r for r in doc["runs"].values()), path
    assert not list((REPO_ROOT / "benchmarks" / "results").rglob("*.json")), "raw data stays compact: gzip it"


# ---- several runs at once ----------------------------------------------------------------------------------
_FAKE_RUN = """
import pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
def interrupted(*_):
    (out / "interrupted").write_text("")
    sys.exit(130)
signal.signal(signal.SIGINT, interrupted)
(out / "started").write_text(str(time.monotonic()))
time.sleep(float(sys.argv[2]))
(out / "ended").write_text(str(time.monotonic()))
"""


def _fake_runs(monkeypatch, tmp_path, seconds: float) -> list[str]:
    """train.py replaced by a script that writes when it starts and ends (or is interrupted) into a folder per seed;
    returns the argv of a 3-seed suite run into tmp_path."""

    def fake_command(spec, seed, level, args):
        (tmp_path / f"seed{seed}").mkdir(exist_ok=True)
        return [sys.executable, "-c", _FAKE_RUN, str(tmp_path / f"seed{seed}"), str(seconds)]

    monkeypatch.setattr(bl, "train_command", fake_command)
    monkeypatch.setattr(bl, "POLL_S", 0.05)
    return ["--suite=classic", "--budget=ci", "--envs=CartPole-v1", "--seeds=3"] + [
        f"--train_dir={tmp_path / 'td'}",
        f"--output={tmp_path / 'out'}",
    ]


@pytest.mark.timeout(120)
def test_parallel_trains_at_most_n_runs_at_once_and_records_each(monkeypatch, tmp_path):
    argv = _fake_runs(monkeypatch, tmp_path, seconds=1.0)
    assert bl.main([*argv, "--parallel=2"]) == 0
    spans = [
        tuple(float((tmp_path / f"seed{s}" / name).read_text()) for name in ("started", "ended")) for s in range(3)
    ]
    at_start = [sum(a <= start < b for a, b in spans) for start, _ in spans]  # runs in flight when each began
    assert max(at_start) == 2, spans
    assert spans[2][0] >= min(spans[0][1], spans[1][1])  # the third waited for a free slot
    doc = bl.load_doc(tmp_path / "out" / "classic.json.gz")
    assert sorted(doc["runs"]) == [f"CartPole-v1/s{s}" for s in range(3)]
    assert all(r["rc"] == 0 and r["complete"] and r["launch_wall_s"] >= 1.0 for r in doc["runs"].values())
    with pytest.raises(SystemExit):
        bl.parse_args([*argv, "--parallel=0"])


@pytest.mark.timeout(120)
def test_an_interrupt_stops_every_run_in_flight_and_records_none(monkeypatch, tmp_path):
    argv = _fake_runs(monkeypatch, tmp_path, seconds=60.0)

    def interrupt_once_both_started(seconds):
        if all((tmp_path / f"seed{s}" / "started").exists() for s in range(2)):
            raise KeyboardInterrupt
        time.sleep(seconds)

    monkeypatch.setattr(bl, "time", Namespace(monotonic=time.monotonic, sleep=interrupt_once_both_started))
    assert bl.main([*argv, "--parallel=2"]) == 130
    assert all((tmp_path / f"seed{s}" / "interrupted").exists() for s in range(2))  # SIGINT: each saves and exits
    assert not (tmp_path / "seed2").exists()  # never started
    assert bl.load_doc(tmp_path / "out" / "classic.json.gz") == {}
