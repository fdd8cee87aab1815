"""benchmark_sf2 without Sample Factory 2: its log parser on lines copied from a real SF2 2.1.1 run, the commands,
process-group cleanup, the summary and the report files."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks import benchmark_sf2 as b
from benchmarks.benchmark_gpu import SF2_ATARI_WORK
from benchmarks.throwaway_venv import make_venv

REPO = Path(__file__).resolve().parents[2]

# From `python -m sf_examples.atari.train_atari --env=atari_pong --num_workers=2 --num_envs_per_worker=8
# --async_rl=True --device=cpu` (sample-factory 2.1.1, 2026-11-23), colour codes included.
SF2_LOG = [
    "summaries_use_frameskip=True",
    "\x1b[36m[2026-11-23 18:17:51,347][08754] Fps is (10 sec: nan, 60 sec: nan, 300 sec: nan). Total num frames: 0. "
    "Throughput: 0: nan. Samples: 0. Policy #0 lag: (min: -1.0, avg: -1.0, max: -1.0)\x1b[0m",
    "\x1b[36m[2026-11-23 18:18:41,603][08754] Fps is (10 sec: 819.2, 60 sec: 489.0, 300 sec: 489.0). Total num "
    "frames: 24576. Throughput: 0: 159.8. Samples: 7192. Policy #0 lag: (min: 15.0, avg: 21.3, max: 47.0)\x1b[0m",
    "\x1b[36m[2026-11-23 18:18:41,603][08754] Avg episode reward: [(0, '-5.375')]\x1b[0m",
    "\x1b[37m\x1b[1m[2026-11-23 18:18:43,356][08772] Updated weights for policy 0, policy_version 100 (0.0017)\x1b[0m",
    "\x1b[36m[2026-11-23 18:18:51,615][08754] Fps is (10 sec: 0.0, 60 sec: 409.5, 300 sec: 407.8). Total num frames: "
    "24576. Throughput: 0: 147.5. Samples: 8440. Policy #0 lag: (min: 15.0, avg: 21.3, max: 47.0)\x1b[0m",
    "\x1b[36m[2026-11-23 18:18:51,615][08754] Avg episode reward: [(0, '-4.500')]\x1b[0m",
]
# SF2's last line after SIGINT, from the benchmark run of 2026-11-23 (as the tool prints it, colour codes removed).
SF2_DONE = "[2026-11-23 19:24:57,771][26968] Collected {0: 69632}, FPS: 712.0"


def test_parse_sf2_log():
    r = b.parse_sf2_log("\n".join(SF2_LOG))
    assert r["unit"] == "env frames" and r["fps10"] == 0.0 and r["frames"] == 24576 and r["reward"] == -4.5
    # without the final line: frames over the span of the reports, which is SF2's own 300 s window here
    assert r["seconds"] == pytest.approx(60.268) and r["fps"] == pytest.approx(407.8, abs=0.05)
    r = b.parse_sf2_log("\n".join([*SF2_LOG, SF2_DONE]))
    assert r["fps"] == 712.0 and r["frames"] == 69632
    # a report cut by the Ctrl+C with the final line written after it, on one line
    cut = SF2_LOG[-2][: SF2_LOG[-2].index("Samples")] + SF2_DONE
    r = b.parse_sf2_log("\n".join([*SF2_LOG[:-2], cut]))
    assert r["fps"] == 712.0 and r["frames"] == 69632 and r["fps10"] == 0.0
    assert b.parse_sf2_log("no report") == {}
    assert b.parse_sf2_log(SF2_LOG[0].replace("True", "False"))["unit"] == "env steps"


def test_commands():
    cmd = b.sf2_command(b.Path("/v/bin/python"), "atari_pong", 2, b.CASES["same work per sample"][0], "/tmp/td")
    assert cmd[:3] == ["/v/bin/python", "-m", "sf_examples.atari.train_atari"]
    assert {"--env=atari_pong", "--num_workers=2", "--device=cpu", "--num_envs_per_worker=8", "--async_rl=True"} <= {
        *cmd
    }
    assert cmd[-2:] == ["--train_dir=/tmp/td", "--experiment=sf2_bench"]
    sf2_defaults, ours_defaults = b.CASES["each with its own defaults"]
    assert sf2_defaults == [] and ours_defaults == []
    ours = b.CASES["same work per sample"][1]
    assert set(SF2_ATARI_WORK) <= set(ours)
    assert {"--num_envs_per_worker=8", "--worker_num_splits=1", "--encoder_conv_architecture=convnet_nature"} <= {*ours}
    assert not any("summaries_use_frameskip" in f for f in ours)  # our FPS stays in frames, as SF2's


def test_run_ours_units(monkeypatch):
    summary = ["done: 1000 env steps in 10.0 s, 100 FPS overall", "  learner (avg of 1): train 9.0 s"]
    r = {"rc": 0, "unit": "env steps", "fps": 100, "fps10": 110.0, "env_steps": 1000, "seconds": 10.0}
    monkeypatch.setattr(b, "run_train", lambda args, seconds: ({**r, "samples_trained": 900, "reward": -20.0}, summary))
    out = b.run_ours("atari_pong", 2, [], 10)
    assert (out["fps"], out["fps10"], out["frames"], out["fps_trained"]) == (400, 440.0, 4000, 360.0)
    assert out["reward"] == -20.0 and out["timing"] == summary
    monkeypatch.setattr(b, "run_train", lambda args, seconds: ({**r, "unit": "env frames"}, summary))
    assert b.run_ours("atari_pong", 2, [], 10)["fps"] == 100
    monkeypatch.setattr(b, "run_train", lambda args, seconds: ({"rc": 2, "stderr_tail": ["bad flag"]}, []))
    assert b.run_ours("atari_pong", 2, [], 10)["error"] == "train.py exited with 2: bad flag"


@pytest.mark.timeout(60)
def test_stop_group_leaves_nothing():
    script = "trap '' INT; sleep 30 & sleep 30 & wait"  # a child that ignores SIGINT: needs SIGKILL
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    assert b.group_members(proc.pid)
    killed, left = b.stop_group(proc, grace=1.0)
    assert killed and left == [] and b.group_members(proc.pid) == []
    # A KeyboardInterrupt ends it (nothing killed), even when started by a process that ignores SIGINT, as a
    # background job of a non-interactive shell does.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = b.start_group([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"])
    finally:
        signal.signal(signal.SIGINT, old)
    assert proc.stdout.readline() == "up\n"
    assert b.stop_group(proc, grace=10.0) == ([], [])


def test_summary_and_report(tmp_path):
    runs = []
    for rnd, (s, o) in enumerate([(700.0, 1000.0), (720.0, 1100.0), (740.0, 1200.0)], start=1):
        for lib, fps in (("sf2", s), ("ours", o)):
            for case in b.CASES:
                runs.append(dict(round=rnd, case=case, lib=lib, fps10=fps, fps=fps - 100, reward=-20.0, command="x"))
    runs.append(dict(round=4, case="same work per sample", lib="sf2", error="no Fps report", command="x"))
    summary = b.summarize(runs)
    s = summary["same work per sample"]
    assert s["sf2"]["fps10"] == 720.0 and s["ours"]["fps10"] == 1100.0
    assert s["ratio_fps10"] == pytest.approx(1100 / 720) and s["ratio_fps"] == pytest.approx(1000 / 620)
    assert s["ours"]["to_ceiling"] is None and b._median([math.nan, None]) is None
    result = dict(date="2026-11-23", machine="2 CPU cores", load_before="1", load_after="2", command="c")
    result.update(sf2_versions={"sample-factory": "2.1.1"}, ceilings=[4000.0], runs=runs, summary=summary)
    text = b.write({**result, "differences": b.DIFFERENCES}, tmp_path / "r" / "side.md")
    assert "| same work per sample | frames/s, end | 720 | 1,100 | 1.53 |" in text
    assert "(no Fps report)" in text and (tmp_path / "r" / "side.md").read_text() == text
    assert json.loads((tmp_path / "r" / "side.json").read_text())["summary"]["same work per sample"]["ours"]


def test_make_venv_reuse_and_probe(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(sys.executable)
    assert make_venv(tmp_path, [["not-a-package-that-exists"]], probe="pass") == tmp_path / "bin" / "python"
    seen = []
    with pytest.raises(RuntimeError, match="does not work"):
        make_venv(tmp_path, [], probe="raise SystemExit(3)", after_install=seen.append)
    assert seen == [tmp_path / "bin" / "python"]


def test_main_alternates_rounds(tmp_path, monkeypatch):
    order = []
    monkeypatch.setattr(b, "sf2_venv", lambda path: (path / "bin" / "python", {"sample-factory": "2.1.1"}))
    monkeypatch.setattr(b, "raw_ceiling", lambda env, n, seconds: 500.0)
    monkeypatch.setattr(
        b, "run_sf2", lambda py, env, w, flags, s: order.append("sf2") or {"fps10": 400.0, "fps": 380.0}
    )
    monkeypatch.setattr(b, "run_ours", lambda env, w, flags, s: order.append("ours") or {"fps10": 600.0, "timing": []})
    out = b.main(["--seconds=1", "--rounds=2", f"--venv={tmp_path / 'v'}", f"--output={tmp_path / 'o.md'}"])
    assert order == ["sf2", "ours", "sf2", "ours", "ours", "sf2", "ours", "sf2"]
    assert out["ceilings"] == [2000.0, 2000.0] and out["runs"][0]["to_ceiling"] == 0.2
    assert out["summary"]["each with its own defaults"]["ratio_fps10"] == 1.5
    assert (tmp_path / "o.json").exists()


# A stand-in for SF2's wheel: its top-level package is `sample_factory` too, it brings the modules SF2_WRAPPER and
# sf2_offline's check import, and its train_atari reports as SF2 2.1.1 does until SIGINT.
FAKE_TRAIN_ATARI = """import datetime, multiprocessing, os, sys, time
import sample_factory

def _child(q):
    q.put("ale_py" in sys.modules)

def main():
    if "--crash" in sys.argv:
        raise RuntimeError("boom")
    print("summaries_use_frameskip=True")
    ctx = multiprocessing.get_context("spawn")  # as SF2 starts its processes
    q = ctx.Queue()
    child = ctx.Process(target=_child, args=(q,))
    child.start()
    print("ale_py in a spawned child:", q.get(timeout=60), flush=True)
    child.join()
    print("sample_factory from", sample_factory.__file__, "PYTHONPATH", os.environ.get("PYTHONPATH"), flush=True)
    print("argv", " ".join(sys.argv[1:]), flush=True)
    frames = 0
    try:
        while True:
            now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
            print(f"[{now}][1] Fps is (10 sec: {100.0 if frames else 'nan'}, 60 sec: nan, 300 sec: nan). "
                  f"Total num frames: {frames}. Throughput: 0: nan.", flush=True)
            frames += 1000
            time.sleep(0.2)
    except KeyboardInterrupt:
        print(f"Collected {{0: {frames}}}, FPS: 123.0", flush=True)
    return 0
"""
FAKE_FILES = {
    "sample_factory/__init__.py": "",
    "ale_py/__init__.py": "",
    "gymnasium/__init__.py": "def make(env_id):\n    return env_id\n",
    "sf_examples/__init__.py": "",
    "sf_examples/atari/__init__.py": "",
    "sf_examples/atari/train_atari.py": FAKE_TRAIN_ATARI,
    "sample_factory-9.9.9.dist-info/METADATA": "Metadata-Version: 2.1\nName: sample-factory\nVersion: 9.9.9\n",
    "sample_factory-9.9.9.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}


@pytest.fixture
def fake_sf2_wheels(tmp_path):
    wheels = tmp_path / "whl"
    wheels.mkdir()
    files = {**FAKE_FILES, "sample_factory-9.9.9.dist-info/RECORD": "".join(f"{n},,\n" for n in FAKE_FILES)}
    with zipfile.ZipFile(wheels / "sample_factory-9.9.9-py3-none-any.whl", "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return wheels


def test_offline_commands_and_environ(tmp_path, monkeypatch):
    site = tmp_path / "site"
    cmd = b.sf2_command(b.Path("/py"), "atari_pong", 16, b.CASES["fast"][0], "/td", device="gpu", site=site)
    assert cmd[:2] == ["/py", str(site / b.SF2_MAIN)] and "--device=gpu" in cmd and "--async_rl=True" in cmd
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    assert b.sf2_environ(site)["PYTHONPATH"] == str(site)  # SF2's folder alone, never ours beside it
    assert "PYTHONPATH" not in b.sf2_environ(None)
    # issue 31's cases: the work per sample as stated there, the same on both sides
    sf2_same, ours_same = b.CASES["same_work"]
    for flags in (sf2_same, ours_same):
        assert {"--num_envs_per_worker=16", "--worker_num_splits=2"} <= {*flags}
    assert set(SF2_ATARI_WORK) <= {*ours_same} and "--num_envs_per_worker=8" not in ours_same
    sf2_fast, ours_fast = b.CASES["fast"]
    assert set(b.FAST) <= {*sf2_fast} and set(b.FAST) <= {*ours_fast}
    assert "--rollout=32" in b.FAST and "--batch_size=1024" in b.FAST
    assert "--encoder_conv_architecture=convnet_nature" in ours_fast


@pytest.mark.timeout(120)
def test_offline_install_and_run_beside_our_pythonpath(fake_sf2_wheels, tmp_path, monkeypatch):
    """From our checkout with our package first on PYTHONPATH, SF2's wheels install without an index and SF2 runs
    with its own `sample_factory`."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    site = tmp_path / "site"
    versions = b.sf2_offline(fake_sf2_wheels, site)
    assert versions["sample-factory"] == "9.9.9"  # not our sample_factory's metadata
    sf2 = b.Sf2(b.Path(sys.executable), site, device="gpu", after_frames=True, start_timeout=60)
    r = b.run_sf2(sf2, "atari_pong", 2, ["--rollout=32"], seconds=1.0)
    assert "error" not in r, r
    assert r["fps10"] == 100.0 and r["fps"] == 123.0 and r["left_behind"] == [], r  # its log tail, if not
    log = "\n".join(r["log_tail"])
    assert f"sample_factory from {site / 'sample_factory' / '__init__.py'} PYTHONPATH {site}" in log
    assert "--device=gpu" in log and "--rollout=32" in log
    assert "ale_py in a spawned child: True" in log  # registers the NoFrameskip ids in SF2's processes too
    assert b.run_sf2(sf2, "atari_pong", 2, ["--crash"], seconds=1.0)["error"] == "no Fps report: RuntimeError: boom"
    # SF2's start refuses a PYTHONPATH where something else could come first
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{site}")
    done = subprocess.run([sys.executable, str(site / b.SF2_MAIN)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0 and "not from SF2's" in done.stderr


def test_offline_install_failure_is_recorded(tmp_path, monkeypatch, capsys):
    """No wheels: SF2's runs record the error, ours still run, and the last line is the JSON headline."""
    monkeypatch.setattr(b, "run_ours", lambda env, w, flags, s: {"fps10": 600.0, "timing": [], "flags": flags})
    monkeypatch.setattr(b, "raw_ceiling", lambda env, n, seconds: 500.0)
    argv = ["--seconds=1", "--rounds=1", "--cases=fast,same_work", "--device=gpu", f"--sf2_wheels={tmp_path}"]
    out = b.main([*argv, f"--output={tmp_path / 'o.md'}"])
    assert [(r["case"], r["lib"]) for r in out["runs"]] == [
        ("fast", "sf2"),
        ("fast", "ours"),
        ("same_work", "sf2"),
        ("same_work", "ours"),
    ]
    assert out["runs"][0]["error"].startswith("SF2 setup failed: RuntimeError: no wheels")
    assert out["runs"][1]["flags"][0] == "--device=gpu" and "--device=gpu" in out["runs"][0]["command"]
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["device"] == "gpu" and last["cases"]["fast"]["ours"] == 600.0
    assert last["cases"]["fast"]["sf2"] is None and last["cases"]["fast"]["errors"][0].startswith("sf2: SF2 setup")
    with pytest.raises(SystemExit):
        b.main(["--cases=nope"])
