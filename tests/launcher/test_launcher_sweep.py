"""The sweep description (ParamGrid / ParamList / Experiment, Python and YAML), the commands it expands to, and the
pieces every backend shares: resume markers, CPU and GPU sizing, final reward from progress.csv."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sample_factory.launcher import Experiment, ParamGrid, ParamList, RunDescription
from sample_factory.launcher.jobs import (
    FINISHED,
    GpuSlots,
    Job,
    LauncherError,
    Result,
    cpus_for,
    finished_before,
    gpu_fraction,
    run_status,
    write_marker,
)
from sample_factory.launcher.summary import final_reward, format_table, stop_reason
from sample_factory.launcher.sweep import SweepError, expand, load_run

BASE = "python train.py --env=CartPole-v1 --num_workers=1"


def test_param_grid_is_every_combination_last_fastest():
    grid = ParamGrid([("learning_rate", [1e-3, 3e-3]), ("seed", [0, 1, 2])])
    got = list(grid)
    assert len(got) == 6
    assert got[:3] == [{"learning_rate": 1e-3, "seed": s} for s in (0, 1, 2)]
    assert got[3] == {"learning_rate": 3e-3, "seed": 0}
    assert list(ParamGrid({"a": [1], "b": ["x", "y"]})) == [{"a": 1, "b": "x"}, {"a": 1, "b": "y"}]
    with pytest.raises(SweepError):
        ParamGrid([("seed", [])])
    with pytest.raises(SweepError):
        ParamGrid([("env", "CartPole-v1")])  # a string is not a list of values


def test_expand_names_flags_and_interpreter():
    run = RunDescription(
        "s",
        [
            Experiment("lr", BASE, ParamGrid([("learning_rate", [0.001, 0.003]), ("seed", [0, 1])])),
            Experiment("arch", BASE, ParamList([{"encoder_mlp_layers": [64, 64]}, {"encoder_mlp_layers": [32]}])),
            Experiment("plain", "python -m sample_factory.train --env=CartPole-v1"),
        ],
    )
    cmds = expand(run, "/td", python="/venv/bin/python")
    names = [c.name for c in cmds]
    assert names == [
        "lr_learning_rate0.001_seed0",
        "lr_learning_rate0.001_seed1",
        "lr_learning_rate0.003_seed0",
        "lr_learning_rate0.003_seed1",
        "arch_encoder_mlp_layers64-64",
        "arch_encoder_mlp_layers32",
        "plain",
    ]
    assert cmds[1].argv == [
        "/venv/bin/python",
        "train.py",
        "--env=CartPole-v1",
        "--num_workers=1",
        "--learning_rate=0.001",
        "--seed=1",
        "--experiment=lr_learning_rate0.001_seed1",
        "--train_dir=/td",
    ]
    assert "--encoder_mlp_layers=64,64" in cmds[4].argv  # lists as train.py parses them
    assert cmds[6].argv[:3] == ["/venv/bin/python", "-m", "sample_factory.train"]


def test_expand_refuses_what_would_collide():
    with pytest.raises(SweepError, match="repeat"):
        expand(RunDescription("s", [Experiment("a", BASE), Experiment("a", BASE)]), "/td")
    with pytest.raises(SweepError, match="sets --experiment"):
        expand(RunDescription("s", [Experiment("a", BASE + " --experiment=x")]), "/td")
    with pytest.raises(SweepError, match="sets --train_dir"):
        expand(RunDescription("s", [Experiment("a", BASE, ParamList([{"train_dir": "/x"}]))]), "/td")
    with pytest.raises(SweepError, match="letters"):
        expand(RunDescription("s", [Experiment("a b", BASE)]), "/td")
    with pytest.raises(SweepError, match="no experiments"):
        expand(RunDescription("s", []), "/td")


def test_yaml_and_python_describe_the_same_sweep(tmp_path):
    module = tmp_path / "my_sweep.py"
    module.write_text(
        "from sample_factory.launcher import Experiment, ParamGrid, ParamList, RunDescription\n"
        f"BASE = {BASE!r}\n"
        "RUN = RunDescription('cp', [\n"
        "    Experiment('lr', BASE, ParamGrid([('learning_rate', [0.001, 0.003]), ('seed', [0, 1])])),\n"
        "    Experiment('arch', BASE, ParamList([{'encoder_mlp_layers': [64, 64]}])),\n"
        "])\n"
    )
    yaml_file = tmp_path / "cp.yaml"
    yaml_file.write_text(
        "name: cp\n"
        "experiments:\n"
        "  - name: lr\n"
        f"    cmd: {BASE}\n"
        "    grid:\n"
        "      learning_rate: [0.001, 0.003]\n"
        "      seed: [0, 1]\n"
        "  - name: arch\n"
        f"    cmd: {BASE}\n"
        "    variants:\n"
        "      - {encoder_mlp_layers: [64, 64]}\n"
    )
    from_py, from_yaml = load_run(str(module)), load_run(str(yaml_file))
    assert from_py.name == from_yaml.name == "cp"
    a, b = expand(from_py, "/td"), expand(from_yaml, "/td")
    assert [c.argv for c in a] == [c.argv for c in b]
    assert len(a) == 5 and a[0].argv[0] == sys.executable


def test_load_run_errors(tmp_path):
    with pytest.raises(SweepError, match="no such"):
        load_run(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "norun.py"
    bad.write_text("X = 1\n")
    with pytest.raises(SweepError, match="RUN"):
        load_run(str(bad))
    y = tmp_path / "bad.yaml"
    y.write_text(
        "name: x\nexperiments:\n  - name: a\n    cmd: python train.py\n    grid: {seed: [0]}\n    variants: []\n"
    )
    with pytest.raises(SweepError, match="both"):
        load_run(str(y))
    with pytest.raises(SweepError, match="cannot import"):
        load_run("no_such_package.sweep")


@pytest.mark.parametrize(
    "content, problem",
    [
        (b'name: x\nexperiments:\n  - name: a\n    cmd: python train.py "--env=CartPole-v1\n', "No closing quotation"),
        (b"name: x\nexperiments: 5\n", "'experiments' must be a list"),
        (b"name: x\nexperiments:\n  - name: a\n    cmd: python train.py \xff\xfe\n", "not UTF-8"),
        (b"name: x\nexperiments:\n  - name: a\n    cmd: {python: 1}\n", "cmd must be a string or a list"),
        (b"name: x\nexperiments:\n  - name: a\n    cmd: python train.py\n    variants: 5\n", "ParamList"),
        (b"name: x\nexperiments:\n  - name: a\n   cmd: python train.py\n", "not valid YAML (line 4"),
        (b"name: x\nexperiments:\n  - name: '..'\n    cmd: python train.py\n", "not a folder name"),
        (b"name: x\nexperiments:\n  - name: " + b"a" * 260 + b"\n    cmd: python train.py\n", "260 bytes"),
        (b"name: '.'\nexperiments:\n  - name: a\n    cmd: python train.py\n", "run name '.'"),
    ],
    ids=["quote", "experiments_int", "not_utf8", "cmd_mapping", "variants_int", "yaml", "dots", "long", "run_dot"],
)
def test_bad_sweep_files_are_one_line_errors_exit_2(tmp_path, capsys, content, problem):
    """Each gave a traceback and exit 1 (an unclosed quote, experiments: 5, a non-UTF-8 file), or passed the name
    check and failed at the log's ENAMETOOLONG after other runs had started (a 260-character name)."""
    from sample_factory.launcher.__main__ import main

    sweep = tmp_path / "s.yaml"
    sweep.write_bytes(content)
    rc = main([f"--run={sweep}", f"--train_dir={tmp_path / 'td'}"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith(f"launcher: error: {sweep}: ") and problem in lines[0], lines[0]
    assert not (tmp_path / "td").exists()  # nothing started, nothing written


def test_cmd_as_a_list_is_one_argument_per_item(tmp_path):
    """`cmd: [python, train.py]` became the two arguments '[python,' and 'train.py]'."""
    y = tmp_path / "l.yaml"
    y.write_text("name: x\nexperiments:\n  - name: a\n    cmd: [python, train.py, --env=Pong v5, --seed, 3]\n")
    (cmd,) = expand(load_run(str(y)), "/td", python="/py")
    assert cmd.argv == ["/py", "train.py", "--env=Pong v5", "--seed", "3", "--experiment=a", "--train_dir=/td"]
    run = RunDescription("s", [Experiment("a", ["python", "train.py", "--env=CartPole-v1"])])
    assert expand(run, "/td", python="/py")[0].argv[:3] == ["/py", "train.py", "--env=CartPole-v1"]


def test_python_sweep_errors_are_one_line(tmp_path):
    for code, problem in (("RUN = 1/0\n", "ZeroDivisionError"), ("RUN = (\n", "SyntaxError")):
        f = tmp_path / "bad.py"
        f.write_text(code)
        with pytest.raises(SweepError, match=problem) as e:
            load_run(str(f))
        assert str(e.value).startswith(f"{f}: ") and "\n" not in str(e.value)


def test_gpu_slots_round_robin_and_capacity():
    slots = GpuSlots(num_gpus=2, experiments_per_gpu=2)
    assert [slots.acquire() for _ in range(4)] == ["0", "1", "0", "1"]
    assert slots.acquire() is None  # all 4 slots taken: the next experiment waits
    slots.release("1")
    assert slots.acquire() == "1"
    none = GpuSlots(num_gpus=0, experiments_per_gpu=1)
    assert [none.acquire() for _ in range(5)] == [""] * 5  # no GPUs: no assignment, no limit
    assert gpu_fraction(0, 3) == 0.0 and gpu_fraction(2, 4) == 0.25 and gpu_fraction(1, 1) == 1.0
    with pytest.raises(LauncherError):
        GpuSlots(1, 0)


def test_cpus_per_experiment(monkeypatch):
    assert cpus_for(["py", "train.py", "--num_workers=3"]) == 4
    assert cpus_for(["py", "train.py", "--num_workers", "2"]) == 3
    assert cpus_for(["py", "train.py", "--num_workers=3"], override=1) == 1
    monkeypatch.setattr("sample_factory.launcher.jobs.usable_cores", lambda: 5)
    assert cpus_for(["py", "train.py"]) == 5  # a run without --num_workers uses every usable core


def _job(tmp_path: Path, argv: list[str]) -> Job:
    return Job("e", argv, str(tmp_path), tmp_path / "td" / "e", tmp_path / "logs" / "e.log", 2)


def test_marker_skips_only_the_same_successful_command(tmp_path):
    job = _job(tmp_path, ["/a/python", "train.py", "--seed=0"])
    assert finished_before(job) is None
    write_marker(job, Result("e", FINISHED, exit_code=0, start=1.0, end=2.0), "processes")
    assert finished_before(job) is not None
    # another interpreter path (another machine's venv) is the same command
    assert finished_before(_job(tmp_path, ["/b/python", "train.py", "--seed=0"])) is not None
    # a changed command runs again (train.py then resumes the folder)
    assert finished_before(_job(tmp_path, ["/a/python", "train.py", "--seed=0", "--train_for_env_steps=9"])) is None
    marker = json.loads((job.exp_dir / "launcher_done.json").read_text())
    assert marker["exit_code"] == 0 and marker["backend"] == "processes"


def test_final_reward_and_stop_reason(tmp_path):
    exp = tmp_path / "e"
    exp.mkdir()
    assert final_reward(exp) is None
    (exp / "progress.csv").write_text("time_s,env_steps,fps_10s,reward_p0\n1,100,50,nan\n2,200,50,12.5\n3,30")
    assert final_reward(exp) == 12.5  # the torn last row is skipped
    (exp / "progress.csv").write_text("time_s,env_steps,fps_10s,reward_p0\n1,100,50,nan\n")
    assert final_reward(exp) is None  # no episode finished yet
    log = tmp_path / "e.log"
    log.write_text("[10:00:00] stopping: SIGINT received\n[10:00:05] stopping: reached 100 env steps\n")
    assert stop_reason(log) == "reached 100 env steps"
    row = {
        "name": "e",
        "status": "finished",
        "job_id": "123",
        "exit_code": 0,
        "wall_s": 3.25,
        "final_reward": 12.5,
        "log_path": "/l",
    }
    table = format_table([row, {**row, "name": "f", "status": "failed", "exit_code": 2, "final_reward": None}])
    assert "12.50" in table and "3.2" in table and "1 failed, 1 finished" in table


def test_example_sweeps_agree_and_parse(tmp_path):
    """examples/sweeps: the Python and YAML versions are the same sweep, and every command parses as train.py's."""
    from sample_factory.config import parse_cfg

    examples = Path(__file__).resolve().parents[2] / "examples" / "sweeps"
    py, yml = (
        expand(load_run(str(examples / "cartpole_lr.py")), tmp_path),
        expand(load_run(str(examples / "cartpole_lr.yaml")), tmp_path),
    )
    assert [c.argv for c in py] == [c.argv for c in yml] and len(py) == 7
    cfgs = [parse_cfg(c.argv[2:]) for c in py]  # after the interpreter and train.py
    for c, cfg in zip(py, cfgs):
        assert cfg.experiment == c.name and cfg.train_dir == str(tmp_path)
    assert cfgs[-1].encoder_mlp_layers == [256, 256]
    # a meaningful sweep brackets the preset's learning rate (it was 1e-4 / 3e-4, 10-30x below: every run failed)
    preset_lr = parse_cfg(["--env=CartPole-v1"]).learning_rate
    swept = sorted({cfg.learning_rate for cfg in cfgs[:-1]})
    assert swept[0] < preset_lr < swept[-1] and preset_lr in swept, (swept, preset_lr)


def test_launcher_default_train_dir_is_the_sweeps_own_folder(monkeypatch, capsys):
    """Without --train_dir the example's runs go to ./train_dir/<run name>/, not into the root of ./train_dir."""
    from sample_factory.launcher.__main__ import main

    repo = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(repo)  # where the commands' train.py is; --dry_run writes nothing
    assert main(["--run=examples/sweeps/cartpole_lr.py", "--dry_run"]) == 0
    out = capsys.readouterr().out
    expected = repo / "train_dir" / "cartpole_lr"
    assert out.count(f"--train_dir={expected}") == 7, out
    assert f"logs in {expected / 'sweep_cartpole_lr' / 'logs'}" in out, out


def test_run_status_from_exit_codes():
    """train.py exits 0 only at its stop condition, 130/143 when a signal stopped it first (exit_codes.py)."""
    assert run_status(0, stop_sent=False) == run_status(0, stop_sent=True) == "finished"
    assert run_status(130, stop_sent=False) == run_status(143, stop_sent=False) == "interrupted"
    assert run_status(130, stop_sent=True) == run_status(None, stop_sent=True) == "cancelled"
    assert run_status(1, stop_sent=False) == run_status(137, stop_sent=False) == run_status(None, False) == "failed"


# aliases of aliases, 9 levels of 10: 10^9 seeds once expanded
NESTED_ALIASES = (
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
    + "name: laughs\nexperiments:\n  - name: e\n    cmd: python train.py --env=CartPole-v1\n    grid: {seed: *i}\n"
)


@pytest.mark.timeout(60)
def test_a_sweep_of_nested_aliases_is_one_line_not_a_hang(tmp_path, capsys):
    """A 'billion laughs' file (aliases of aliases: 10^9 values once expanded, 1 KB on disk) loads as shared objects
    but hung the launcher with no output when the sweep was expanded."""
    from sample_factory.launcher.__main__ import main

    sweep = tmp_path / "laughs.yaml"
    sweep.write_text(NESTED_ALIASES + "\n")
    rc = main([f"--run={sweep}", f"--train_dir={tmp_path / 'td'}"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "once its aliases (*name) are expanded" in lines[0], lines
    assert not (tmp_path / "td").exists()
    # a sweep's ordinary use of an alias stays fine
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        "seeds: &s [0, 1]\nname: x\nexperiments:\n  - name: a\n    cmd: python train.py\n    grid: {seed: *s}\n"
    )
    assert len(expand(load_run(str(ok)), "/td", python="/py")) == 2
