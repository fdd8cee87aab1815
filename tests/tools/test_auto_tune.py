"""`train.py --auto_tune=True`: the cache key (what a pick depends on), the refused combinations, and two real runs:
the first searches (short trials) and trains with the pick, the second reuses the cached pick without a trial; and the
tool's own command line, which prints the flags to add."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sample_factory.config import ConfigError, parse_cfg, strip_flags
from sample_factory.tools import auto_tune
from sample_factory.tools.auto_tune import SPEED_NEUTRAL, cache_key, cache_path
from sample_factory.tools.tune import TUNED_ALL, TuneResult
from sample_factory.train import auto_tuned_flags

REPO = Path(__file__).resolve().parents[2]


def test_the_key_ignores_where_and_how_long_but_not_what_changes_speed():
    a = cache_key("CartPole-v1", ["--batch_size=1024", "--num_workers", "2"])
    assert a == cache_key("CartPole-v1", ["--num_workers=2", "--batch_size", "1024"])  # order and form
    assert a["flags"] == {"batch_size": 1024, "num_workers": 2} and a["cores"] >= 1 and a["host"] is not None
    assert a != cache_key("CartPole-v1", ["--batch_size=2048", "--num_workers=2"])
    assert a != cache_key("Acrobot-v1", ["--batch_size=1024", "--num_workers=2"])
    assert cache_path("/x", a) != cache_path("/x", cache_key("CartPole-v1", ["--num_workers=2"]))
    assert cache_path("/x", cache_key("ALE/Pong-v5", [])).parent == Path("/x")  # the env's slash is not a folder
    assert {"experiment", "train_dir", "train_for_env_steps", "seed", "auto_tune"} <= set(SPEED_NEUTRAL)
    assert not set(TUNED_ALL) & set(SPEED_NEUTRAL)  # the tuned settings themselves are speed


@pytest.mark.parametrize("flag", ["--serial_mode=True", "--with_pbt=True --pbt_backend=ray --num_policies=2"])
def test_refused_where_there_is_no_multi_process_run_to_tune(flag):
    with pytest.raises(SystemExit):
        parse_cfg(["--env=CartPole-v1", "--auto_tune=True", *flag.split()])
    with pytest.raises((SystemExit, ConfigError)):
        parse_cfg(["--env=CartPole-v1", "--auto_tune=True", "--auto_tune_seconds=0"])


def _train(tmp_path: Path, experiment: str, cache: Path) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, "train.py", "--env=CartPole-v1", "--num_workers=2", "--auto_tune=True"]
    cmd += [f"--auto_tune_cache_dir={cache}", "--auto_tune_seconds=4", "--auto_tune_max_trials=1"]
    cmd += [f"--train_dir={tmp_path / 'td'}", f"--experiment={experiment}", "--train_for_env_steps=20000"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((tmp_path / "td" / experiment / "cfg.json").read_text())


@pytest.mark.timeout(600)
def test_first_run_tunes_and_trains_with_the_pick_the_second_reuses_it(tmp_path):
    cache = tmp_path / "cache"
    first, cfg = _train(tmp_path, "a", cache)
    files = list(cache.glob("CartPole-v1_*.json"))
    assert len(files) == 1, files
    record = json.loads(files[0].read_text())
    # the tuner's progress reaches the user through stderr; the run's own lines are on stdout as usual
    assert "auto-tune: measuring this machine" in first.stderr and "trial 1:" in first.stderr, first.stderr[-3000:]
    assert record["defaults_fps"] > 0 and len(record["result"]["trials"]) == 2
    assert all(t["settings"]["num_workers"] == 2 for t in record["result"]["trials"])  # typed: never tuned
    # the run trained with the pick: every tuned setting is the pick's (the defaults' where the pick kept them)
    pick = record["result"]["pick"]
    assert {k: cfg[k] for k in TUNED_ALL} == pick, (cfg, pick)
    assert "done:" in first.stdout

    second, cfg2 = _train(tmp_path, "b", cache)
    assert "the pick cached in" in second.stderr and "measuring" not in second.stderr, second.stderr[-3000:]
    assert "trial" not in second.stderr
    assert {k: cfg2[k] for k in TUNED_ALL} == pick


def test_the_tool_prints_the_cached_flags_as_json(tmp_path, capsys, monkeypatch):
    argv = ["--env=CartPole-v1", "--auto_tune=True", f"--auto_tune_cache_dir={tmp_path}", "--num_workers", "2"]
    key = cache_key("CartPole-v1", ["--num_workers", "2"])
    path = cache_path(str(tmp_path), key)
    record = {"key": key, "changed": {"num_envs_per_worker": 128}, "defaults_fps": 4.0e4, "pick_fps": 5.0e4}
    path.write_text(json.dumps(record))
    searched: list[list[str]] = []

    def fake_search(env, flags, seconds, max_trials, log):
        searched.append(flags)
        start = {k: 1 for k in TUNED_ALL}
        return TuneResult(env, 2, "train", 5.0, 1e5, [], {}, start, {**start, "worker_num_splits": 2}, 1.0, 2.0)

    monkeypatch.setattr(auto_tune, "search", fake_search)
    assert auto_tune.main([*argv, "--experiment=x", "--seed=3"]) == 0  # neither changes the key
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1]) == ["--num_envs_per_worker=128"] and not searched
    assert "--num_envs_per_worker=128 (50,000 FPS vs the defaults' 40,000)" in err

    path.write_text(json.dumps({**record, "key": {**key, "cores": -1}}))  # another machine's pick: not used
    assert auto_tune.main(argv) == 0
    assert searched == [["--num_workers", "2"]]  # the speed flags only
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == ["--worker_num_splits=2"]
    assert json.loads(path.read_text())["key"] == key  # the new pick replaced the stale one


def _cached(tmp_path: Path, argv: list[str], changed: dict) -> Path:
    """A cache file for `argv` holding `changed` (as a hand-edited or shared cache would)."""
    key = cache_key("CartPole-v1", strip_flags(argv, SPEED_NEUTRAL))
    path = cache_path(str(tmp_path), key)
    path.write_text(json.dumps({"key": key, "changed": changed, "defaults_fps": 1.0, "pick_fps": 2.0}))
    return path


def test_a_hand_edited_cache_changes_only_tuned_settings_the_user_did_not_type(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(auto_tune, "search", lambda *a, **k: pytest.fail("the cached pick must be used"))
    argv = ["--env=CartPole-v1", "--auto_tune=True", f"--auto_tune_cache_dir={tmp_path}", "--num_workers=1"]
    changed = {
        "num_workers": 7,  # typed: stays 1
        "restart_behavior": "overwrite",  # not a tuned setting
        "train_dir": "/tmp/elsewhere",
        "num_envs_per_worker": 128,  # the one valid entry
        "policy_workers_per_policy": "2",  # not a number
        "learner_main_loop_num_cores": True,
        "worker_num_splits": 1e9,
    }
    _cached(tmp_path, argv, changed)
    assert auto_tune.main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1]) == ["--num_envs_per_worker=128"], err
    assert "ignoring num_workers=7" in err and "--num_workers is on the command line and stays 1" in err
    for name in ("restart_behavior", "train_dir", "policy_workers_per_policy", "learner_main_loop_num_cores"):
        assert f"ignoring {name}=" in err, err
    # what train.py appends to its command line (the tool run as train.py runs it)
    assert auto_tuned_flags(argv) == ["--num_envs_per_worker=128"]


@pytest.mark.parametrize(
    "changed, why",
    [
        ({"num_workers": 100_000}, "out of range"),  # more than any search from here reaches: not a pick
        ({"num_workers": 0}, "out of range"),
        ({"num_envs_per_worker": 64, "worker_num_splits": 3}, "not a valid combination"),  # 64 % 3 != 0
        ({"policy_workers_per_policy": 4096}, "not a valid combination"),  # past half the cores
    ],
)
def test_a_cached_pick_out_of_range_or_invalid_is_not_applied(tmp_path, capsys, monkeypatch, changed, why):
    monkeypatch.setattr(auto_tune, "search", lambda *a, **k: pytest.fail("the cached pick must be used"))
    argv = ["--env=CartPole-v1", "--auto_tune=True", f"--auto_tune_cache_dir={tmp_path}"]
    _cached(tmp_path, argv, changed)
    assert auto_tune.main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1]) == [], err
    assert why in err and "nothing of the pick applies" in err, err


@pytest.mark.parametrize("text", ["[1, 2]", "3", '"x"', "null"])
def test_a_cache_file_that_is_json_but_not_a_record_is_searched_again(tmp_path, capsys, monkeypatch, text):
    """Valid JSON that is not an object gave a traceback (AttributeError: 'list' object has no attribute 'get')."""
    argv = ["--env=CartPole-v1", "--auto_tune=True", f"--auto_tune_cache_dir={tmp_path}", "--num_workers", "2"]
    path = cache_path(str(tmp_path), cache_key("CartPole-v1", ["--num_workers", "2"]))
    path.write_text(text)

    def fake_search(env, flags, seconds, max_trials, log):
        start = {k: 1 for k in TUNED_ALL}
        return TuneResult(env, 2, "train", 5.0, 1e5, [], {}, start, {**start, "worker_num_splits": 2}, 1.0, 2.0)

    monkeypatch.setattr(auto_tune, "search", fake_search)
    assert auto_tune.main(argv) == 0
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1]) == ["--worker_num_splits=2"] and "Traceback" not in err, err
    assert isinstance(json.loads(path.read_text()), dict)  # replaced by a real record
