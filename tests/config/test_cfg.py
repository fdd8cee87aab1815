import argparse
import copy
import json
import pickle
import types
import typing

import pytest

from sample_factory.config import PRESETS, Config, Option, all_options, parse_cfg
from sample_factory.config.env_defaults import preset_values
from sample_factory.config.machine import usable_cores
from sample_factory.config.option_types import OptionGroup
from sample_factory.config.options import GROUPS, AllOptions
from sample_factory.config.reference import markdown_reference

BASE = ["--env=SomeCustomEnv-v0", "--num_workers=2"]  # an env without a preset: plain defaults apply


def _defaults():
    return {opt.name: opt.default for opt in all_options()}


def _parse_error(capsys, argv) -> str:
    """Parse argv expecting a usage error: stderr must be exactly one line naming the problem."""
    with pytest.raises(SystemExit) as exc:
        parse_cfg(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("train.py: error: "), err
    return lines[0]


def test_defaults_parse():
    cfg = parse_cfg(BASE)
    defaults = _defaults()
    assert cfg.env == "SomeCustomEnv-v0"
    assert cfg.preset is None
    assert cfg.num_workers == 2
    # Values that finalize_cfg does not derive keep the declared default.
    derived = {
        "env",
        "num_workers",
        "recurrence",
        "num_minibatches_to_accumulate",
        "train_for_env_steps",
        "exp_replayer",
        "experiment",
    }
    for name, default in defaults.items():
        if name not in derived:
            assert getattr(cfg, name) == default, name
    # Derived values.
    assert cfg.use_rnn is True
    assert cfg.recurrence == cfg.rollout == 32
    assert cfg.num_minibatches_to_accumulate == cfg.num_batches_per_epoch == 1  # async: one iteration
    assert cfg.train_for_env_steps == 10**10 and isinstance(cfg.train_for_env_steps, int)
    assert cfg.command_line == " ".join(BASE)
    assert cfg.experiment == "SomeCustomEnv-v0__appo"  # no --experiment, no --seed: env__algo


def test_a_run_without_experiment_gets_a_folder_of_its_own():
    """CleanRL's run name (env__exp_name__seed) without its start time: another env or seed is another folder (all
    went to default_experiment, so a second run on another env was refused), the same command resumes (issue 53)."""
    assert parse_cfg(["--env=CartPole-v1", "--seed=1"]).experiment == "CartPole-v1__appo__1"
    assert parse_cfg(["--env=ALE/Pong-v5", "--seed=3", "--algo=DQN"]).experiment == "ALE_Pong-v5__dqn__3"
    assert parse_cfg(["--env=my.mod:Env-v0"]).experiment == "my.mod_Env-v0__appo"
    assert parse_cfg(["--env=CartPole-v1", "--experiment=mine"]).experiment == "mine"  # SF2's
    assert parse_cfg(["--env=CartPole-v1", "--exp-name=mine"]).experiment == "mine"


def test_num_workers_defaults_to_usable_cores(monkeypatch):
    import sample_factory.config.checks as cfg_module

    monkeypatch.setattr(cfg_module, "usable_cores", lambda: 7)
    assert parse_cfg(["--env=SomeCustomEnv-v0"]).num_workers == 7


@pytest.mark.parametrize(
    "new_flag, old_flag, dest",
    [
        ("--num_epochs", "--ppo_epochs", "num_epochs"),
        ("--num_batches_per_epoch", "--num_batches_per_iteration", "num_batches_per_epoch"),
        ("--rnn_size", "--hidden_size", "rnn_size"),
    ],
)
def test_sf1_sf2_aliases_share_dest(new_flag, old_flag, dest):
    new = parse_cfg([*BASE, f"{new_flag}=3"])
    old = parse_cfg([*BASE, f"{old_flag}=3"])
    assert getattr(new, dest) == getattr(old, dest) == 3
    assert _defaults()[dest] != 3  # the value really came from the flag
    # The alias name is not a separate attribute.
    assert not hasattr(old, old_flag[2:])
    # Space-separated form works for aliases too.
    assert getattr(parse_cfg([*BASE, old_flag, "5"]), dest) == 5


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--serial_mode=True"], True),
        (["--serial_mode=true"], True),
        (["--serial_mode=1"], True),
        (["--serial_mode=false"], False),
        (["--serial_mode=False"], False),
        (["--serial_mode=0"], False),
        (["--serial_mode"], True),
        (["--serial_mode", "False"], False),
        (["--serial_mode", "--num_epochs=2"], True),
        ([], False),
    ],
)
def test_boolean_parsing(args, expected):
    cfg = parse_cfg([*BASE, *args])
    assert cfg.serial_mode is expected


def test_boolean_default_true_can_be_disabled():
    assert parse_cfg(BASE).async_rl is True
    assert parse_cfg([*BASE, "--async_rl=False", "--batch_size=2048"]).async_rl is False


def test_invalid_boolean_exits(capsys):
    err = _parse_error(capsys, [*BASE, "--serial_mode=maybe"])
    assert "serial_mode" in err and "maybe" in err


def test_int_list_and_number_parsing():
    cfg = parse_cfg([*BASE, "--encoder_mlp_layers=8,16", "--train_for_env_steps=1e6"])
    assert cfg.encoder_mlp_layers == [8, 16]
    assert cfg.train_for_env_steps == 1_000_000 and isinstance(cfg.train_for_env_steps, int)


def test_classic_control_preset_applies_only_to_untyped_flags():
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=2", "--num_envs_per_worker=8", "--ppo_epochs=7"])
    assert cfg.preset == "classic_control"
    preset = PRESETS["classic_control"]
    assert cfg.num_envs_per_worker == 8 != preset["num_envs_per_worker"]
    assert cfg.num_epochs == 7 != preset["num_epochs"]  # typed through an alias: still counts as typed
    for k, v in preset.items():
        if k not in ("num_envs_per_worker", "num_epochs"):
            assert getattr(cfg, k) == v, k
    # Sanity: the preset really differs from the plain defaults for the flags checked above.
    defaults = _defaults()
    assert defaults["batch_size"] != preset["batch_size"]
    assert defaults["use_rnn"] != preset["use_rnn"]
    # Derived from preset values: no rnn -> recurrence 1.
    assert cfg.recurrence == 1


@pytest.mark.parametrize("env", ["mujoco_halfcheetah", "Hopper-v5", "Walker2d-v4"])
def test_mujoco_preset_is_synchronous_and_valid_on_a_big_machine(env, monkeypatch):
    """The synchronous mujoco preset must parse on a machine with many cores (the default num_workers is one per
    core, and 16 workers' rounds would not divide its 2,048-sample iteration); a typed worker count still wins."""
    monkeypatch.setattr("sample_factory.config.checks.usable_cores", lambda: 16)
    monkeypatch.setattr("sample_factory.config.env_defaults.usable_cores", lambda: 16)
    cfg = parse_cfg([f"--env={env}"])
    assert cfg.preset == "mujoco" and not cfg.async_rl and not cfg.use_rnn
    assert cfg.num_workers == 2
    assert parse_cfg([f"--env={env}", "--num_workers=4"]).num_workers == 4
    with pytest.raises(SystemExit):
        parse_cfg([f"--env={env}", "--num_workers=3"])  # 1,536-sample rounds: refused with one line


def test_mountain_car_gets_the_classic_preset_plus_exploration():
    """MountainCar's sparse goal: the classic settings, normalized inputs, an entropy bonus and GAE (presets.py)."""
    cfg = parse_cfg(["--env=MountainCar-v0"])
    assert cfg.preset == "sparse_classic_control"
    assert cfg.normalize_input is True and cfg.exploration_loss_coeff == 0.02
    assert cfg.with_vtrace is False and cfg.gae_lambda == 0.98
    assert PRESETS["classic_control"]["exploration_loss_coeff"] == 0.0  # the other classic envs are unchanged
    assert cfg.num_envs_per_worker == PRESETS["classic_control"]["num_envs_per_worker"]
    assert parse_cfg(["--env=MountainCar-v0", "--exploration_loss_coeff=0"]).exploration_loss_coeff == 0.0


def test_lunar_lander_gets_its_own_horizon_and_the_classic_dqn_preset():
    """LunarLander: the classic settings with a longer horizon (presets.py); CartPole keeps its preset; DQN on
    LunarLander still gets the classic DQN preset, not PPO's horizon settings."""
    cfg = parse_cfg(["--env=LunarLander-v3"])
    assert cfg.preset == "lunar_lander"
    assert (cfg.gamma, cfg.with_vtrace, cfg.gae_lambda, cfg.exploration_loss_coeff) == (0.999, False, 0.98, 0.01)
    assert cfg.learning_rate == PRESETS["classic_control"]["learning_rate"]
    cartpole = parse_cfg(["--env=CartPole-v1"])
    assert (cartpole.gamma, cartpole.with_vtrace, cartpole.exploration_loss_coeff) == (0.99, True, 0.0)
    assert parse_cfg(["--env=LunarLander-v3", "--algo=DQN"]).preset == "classic_control_dqn"


def test_dqn_on_mountain_car_gets_the_classic_dqn_preset_not_the_ppo_values():
    """MountainCar's preset is PPO's (lr 3e-3, minibatches of 2,048, rewards x 0.1): DQN gets the classic DQN one."""
    cfg = parse_cfg(["--env=MountainCar-v0", "--algo=DQN"])
    assert cfg.preset == "classic_control_dqn"
    assert (cfg.learning_rate, cfg.batch_size, cfg.reward_scale) == (1e-3, 128, 1.0)


@pytest.mark.parametrize(("cores", "threads"), [(1, 1), (2, 1), (3, 1), (4, 2), (16, 2)])
def test_preset_learner_threads_are_capped_at_half_the_cores(cores, threads, monkeypatch):
    """The atari preset's 2 learner threads would compete with the samplers on a 2-core machine (presets.py,
    preset_values); a typed value is taken as given."""
    monkeypatch.setattr("sample_factory.config.env_defaults.usable_cores", lambda: cores)
    assert parse_cfg(["--env=atari_pong", "--num_workers=2"]).learner_main_loop_num_cores == threads
    typed = parse_cfg(["--env=atari_pong", "--num_workers=2", "--learner_main_loop_num_cores=2"])
    assert typed.learner_main_loop_num_cores == 2


def test_atari_preset_plays_without_sticky_actions_other_families_keep_the_default():
    """The atari preset follows the NoFrameskip-v4 setup of the published results; VizDoom has no sticky actions to
    set, so doom_frame does not copy the atari preset's value."""
    assert parse_cfg(["--env=atari_pong"]).env_sticky_actions == 0.0
    assert parse_cfg(["--env=atari_pong", "--algo=DQN"]).env_sticky_actions == 0.0
    assert parse_cfg(["--env=atari_pong", "--env_sticky_actions=0.25"]).env_sticky_actions == 0.25
    assert "env_sticky_actions" not in PRESETS["doom_frame"]
    assert parse_cfg(["--env=CartPole-v1"]).env_sticky_actions == _defaults()["env_sticky_actions"]


def test_preset_typed_value_equal_to_default_is_kept():
    # Typing a flag with its plain default value must still win over the preset.
    cfg = parse_cfg(
        ["--env=CartPole-v1", "--num_workers=2", "--use_rnn=True", f"--batch_size={_defaults()['batch_size']}"]
    )
    assert cfg.use_rnn is True
    assert cfg.batch_size == _defaults()["batch_size"]
    assert cfg.recurrence == cfg.rollout


def test_no_preset_for_other_envs():
    cfg = parse_cfg(BASE)
    assert cfg.preset is None
    assert cfg.num_envs_per_worker == _defaults()["num_envs_per_worker"]
    assert cfg.batch_size == _defaults()["batch_size"]


def test_unknown_flag_suggests_close_match(capsys):
    err = _parse_error(capsys, [*BASE, "--num_worker=4"])
    assert "unknown flag --num_worker (did you mean --num_workers" in err


def test_unknown_flag_space_separated(capsys):
    err = _parse_error(capsys, [*BASE, "--lerning_rate", "0.1"])
    assert "unknown flag --lerning_rate (did you mean --learning_rate" in err


def test_unknown_flag_without_close_match(capsys):
    err = _parse_error(capsys, [*BASE, "--zzzzqqqq=1"])
    assert "unknown flag --zzzzqqqq" in err
    assert "did you mean" not in err


def test_abbreviations_are_not_accepted(capsys):
    err = _parse_error(capsys, [*BASE, "--learning_rat=0.1"])
    assert "unknown flag --learning_rat (did you mean --learning_rate" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--num_envs_per_worker=3", "--worker_num_splits=2"],
            "--num_envs_per_worker=3 must be divisible by --worker_num_splits=2",
        ),
        (["--rollout=32", "--recurrence=5"], "--recurrence=5 must divide --rollout=32"),
        (["--rollout=32", "--recurrence=0"], "--recurrence=0 must divide --rollout=32"),
        (["--rollout=32", "--batch_size=100"], "--batch_size=100 must be a multiple of --rollout=32"),
        (["--num_workers=0"], "--num_workers must be >= 1, got 0"),
        (["--num_workers=-3"], "--num_workers must be >= 1, got -3"),
        (["--rollout=0"], "--rollout must be >= 1, got 0"),
        (["--gamma=1.5"], "--gamma must be in [0, 1]"),
        (["--learning_rate=0"], "--learning_rate must be > 0"),
        (
            ["--async_rl=False", "--batch_size=64", "--rollout=32", "--num_envs_per_worker=2", "--worker_num_splits=2"],
            "--async_rl=False needs batch_size*num_batches_per_epoch (64)",
        ),
    ],
)
def test_invalid_combinations_exit_with_message(capsys, args, message):
    err = _parse_error(capsys, [*BASE, *args])
    assert err.startswith("train.py: error: ")
    assert message in err


def test_missing_env_exits(capsys):
    err = _parse_error(capsys, ["--num_workers=1"])
    assert "--env is required" in err


def test_recurrence_and_accumulation_derivation():
    cfg = parse_cfg([*BASE, "--use_rnn=False"])
    assert cfg.recurrence == 1
    cfg = parse_cfg([*BASE, "--rollout=16", "--recurrence=4", "--batch_size=64"])
    assert cfg.recurrence == 4
    cfg = parse_cfg([*BASE, "--num_batches_per_epoch=3"])
    assert cfg.num_minibatches_to_accumulate == 3
    cfg = parse_cfg([*BASE, "--num_minibatches_to_accumulate=5"])
    assert cfg.num_minibatches_to_accumulate == 5
    # Sync mode: 2 workers * 2 envs * 32 rollout = 128 samples per round; 1024 is a multiple.
    cfg = parse_cfg([*BASE, "--async_rl=False"])
    assert cfg.num_minibatches_to_accumulate == 0


def test_markdown_reference_contains_every_option():
    md = markdown_reference()
    options = all_options()
    assert len(options) > 40
    for opt in options:
        for flag in opt.flags:
            assert f"`{flag}`" in md, flag
    for preset, values in PRESETS.items():
        assert f"### {preset}" in md
        for k in values:
            assert f"| `--{k}` |" in md


def test_help_prints_usage_and_exits_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_cfg(["--help"])
    assert exc.value.code == 0
    assert "--num_workers" in capsys.readouterr().out


def test_short_help_prints_usage_and_exits_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_cfg(["-h"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: train.py") and "--num_workers" in out


# ---- Option records and the typed Config -------------------------------------------------------------------------
def test_option_names_and_flags_are_unique():
    names = [opt.name for opt in all_options()]
    assert len(names) == len(set(names))
    flags = [f for opt in all_options() for f in opt.flags]
    assert len(flags) == len(set(flags))
    assert all(isinstance(opt, Option) and opt.help for opt in all_options())


def _matches(value, hint) -> bool:
    """isinstance for the annotations the option groups use: X, X | None, list[int]; an int is a valid float."""
    if isinstance(hint, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def test_config_declares_every_option_with_its_type():
    hints = typing.get_type_hints(Config)
    declared = [name for group in GROUPS for name in group.__annotations__ if name not in OptionGroup.__annotations__]
    assert declared == [opt.name for opt in all_options()]  # each option annotated in its group, in table order
    for opt in all_options():
        assert _matches(opt.default, hints[opt.name]), (opt.name, opt.default, hints[opt.name])
    # Parsed values (with a preset, and finalized) have the declared types too.
    for argv in (BASE, ["--env=CartPole-v1", "--num_workers=2"], [*BASE, "--seed=3", "--stop_at_reward=1"]):
        cfg = parse_cfg(argv)
        for opt in all_options():
            assert _matches(getattr(cfg, opt.name), hints[opt.name]), (opt.name, getattr(cfg, opt.name))


def test_options_have_no_class_level_value():
    # argparse sets a default on the namespace only when the attribute is missing: a class-level value would keep
    # the option out of vars(cfg), hence out of cfg.json.
    for opt in all_options():
        assert not hasattr(Config, opt.name), opt.name
    assert set(vars(parse_cfg(BASE))) == {opt.name for opt in all_options()} | {
        "preset",
        "preset_reason",
        "command_line",
        "cli_flags",
    }


def test_derived_fields_are_declared_with_defaults_and_docs():
    derived = typing.get_type_hints(Config).keys() - typing.get_type_hints(AllOptions).keys()
    assert derived == {
        "preset",
        "preset_reason",
        "command_line",
        "cli_flags",
        "evaluation_run",
        "reward_shaping",
        "frames_per_env_step",
    }
    cfg = Config.from_dict({})
    assert cfg.preset is None and cfg.preset_reason == "" and cfg.command_line == "" and tuple(cfg.cli_flags) == ()
    assert cfg.frames_per_env_step == 1
    assert cfg.evaluation_run is False and cfg.reward_shaping is None
    # Unset derived fields stay out of vars(cfg): cfg.json only has what code set.
    assert not derived & set(vars(cfg))


def test_parse_cfg_returns_config():
    cfg = parse_cfg(BASE)
    assert isinstance(cfg, Config) and isinstance(cfg, argparse.Namespace)
    assert cfg.cli_flags == ["env", "num_workers"]
    assert cfg.evaluation_run is False and cfg.reward_shaping is None


def test_from_dict_fills_missing_options_with_defaults():
    old = {"env": "CartPole-v1", "experiment": "old", "learning_rate": 0.5, "removed_option": 1}
    cfg = Config.from_dict(old)
    assert cfg.learning_rate == 0.5 and cfg.experiment == "old"
    for name, default in _defaults().items():
        if name not in old:
            assert getattr(cfg, name) == default, name
    assert cfg.removed_option == 1  # kept as read
    # Defaults are copies: changing one config's list does not change another's or the table.
    cfg.encoder_mlp_layers.append(7)
    assert Config.from_dict({}).encoder_mlp_layers == _defaults()["encoder_mlp_layers"] == [512, 512]


def test_cfg_json_round_trip():
    cfg = parse_cfg(["--env=CartPole-v1", "--num_workers=2", "--seed=5"])
    text = json.dumps(vars(cfg), indent=2, sort_keys=True)  # as experiment/folder.py writes cfg.json
    back = Config.from_dict(json.loads(text))
    assert back == cfg and vars(back) == vars(cfg)
    assert json.dumps(vars(back), indent=2, sort_keys=True) == text
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    assert isinstance(copy.deepcopy(cfg), Config)


@pytest.mark.parametrize("env", ["atari_pong", "ALE/Breakout-v5"])
def test_atari_dqn_preset_applies_and_typed_flags_win(env):
    """--algo=DQN on Atari gets the Ape-X/Rainbow-style preset (presets.py: atari_dqn), APPO keeps the atari one, and
    every flag typed on the command line wins over the preset."""
    preset = preset_values("atari_dqn", usable_cores())  # learner threads capped by the cores
    cfg = parse_cfg([f"--env={env}", "--algo=DQN"])
    assert cfg.preset == "atari_dqn"
    for k, v in preset.items():
        assert getattr(cfg, k) == v, k
    # Sanity: these differ from the plain defaults and from the APPO atari preset, so the checks above can fail.
    defaults, appo = _defaults(), parse_cfg([f"--env={env}"])
    assert appo.preset == "atari" and appo.max_grad_norm != preset["max_grad_norm"]
    assert appo.adam_eps != preset["adam_eps"] and appo.encoder_conv_architecture != "convnet_nature"
    for k in ("learning_rate", "adam_eps", "target_network_update_freq", "replay_buffer_capacity", "learning_starts"):
        assert defaults[k] != preset[k], k
    typed = {"learning_rate": 1e-4, "replay_buffer_capacity": 100_000, "training_intensity": 8.0, "dueling": False}
    cfg = parse_cfg([f"--env={env}", "--algo=DQN", *(f"--{k}={v}" for k, v in typed.items())])
    assert cfg.preset == "atari_dqn"
    for k, v in preset.items():
        assert getattr(cfg, k) == typed.get(k, v), k


def test_atari_preset_takes_its_gpu_setup_where_training_is_on_a_gpu(monkeypatch):
    """--device=gpu (or auto with CUDA visible) applies GPU_PRESETS' changes on top of the atari preset; --device=cpu,
    or auto on a machine without an NVIDIA driver, keeps the 2-core setup; a flag the user typed wins over both."""
    from sample_factory.config import env_defaults, presets

    cpu = parse_cfg(["--env=atari_pong", "--device=cpu"])
    gpu = parse_cfg(["--env=atari_pong", "--device=gpu"])
    for k, v in presets.GPU_PRESETS["atari"].items():
        assert getattr(gpu, k) == v
    assert (cpu.batch_size, cpu.num_envs_per_worker) == (256, 16)
    assert parse_cfg(["--env=atari_pong", "--device=gpu", "--num_epochs=2"]).num_epochs == 2
    monkeypatch.setattr(env_defaults.os.path, "exists", lambda p: False)
    monkeypatch.setattr(env_defaults.os.path, "isdir", lambda p: False)
    assert parse_cfg(["--env=atari_pong"]).batch_size == 256  # auto, no driver: torch is not even asked
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert not env_defaults.gpu_expected("auto")


def test_tuned_for_picks_the_presets_setup_whatever_the_device(capsys):
    """--tuned_for=gpu trains a GPU user's setup on the CPU (frames to a score measured here), --tuned_for=cpu the
    CPU setup on a GPU; auto follows the device; the help shows the chosen setup's values."""
    from sample_factory.config import presets

    on_cpu_as_gpu = parse_cfg(["--env=atari_pong", "--device=cpu", "--tuned_for=gpu"])
    for k, v in presets.GPU_PRESETS["atari"].items():
        assert getattr(on_cpu_as_gpu, k) == v, k
    assert on_cpu_as_gpu.device == "cpu"
    on_gpu_as_cpu = parse_cfg(["--env=atari_pong", "--device=gpu", "--tuned_for=cpu"])
    assert (on_gpu_as_cpu.batch_size, on_gpu_as_cpu.num_envs_per_worker) == (256, 16)
    assert parse_cfg(["--env=atari_pong", "--device=cpu", "--tuned_for=auto"]).batch_size == 256
    assert parse_cfg(["--env=CartPole-v1", "--tuned_for=gpu"]).batch_size == parse_cfg(["--env=CartPole-v1"]).batch_size
    with pytest.raises(SystemExit):
        parse_cfg(["--env=atari_pong", "--tuned_for=tpu"])
    with pytest.raises(SystemExit):
        parse_cfg(["--env=atari_pong", "--device=cpu", "--tuned_for=gpu", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--batch_size INT (default: 1024; atari preset for --env=atari_pong: 512)" in help_text


def test_auto_device_asks_nvml_not_the_cuda_runtime(monkeypatch):
    """The launcher forks its fork server after parsing (runtime/fork_server.py); a fork of a process that asked
    the CUDA runtime (torch.cuda.is_available()) cannot use CUDA, NVML's device count can be asked."""
    import torch

    from sample_factory.config import env_defaults

    monkeypatch.setattr(env_defaults.os.path, "exists", lambda p: p == "/dev/nvidia0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def runtime_query():
        raise AssertionError("torch.cuda.is_available() poisons the fork")

    monkeypatch.setattr(torch.cuda, "is_available", runtime_query)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert env_defaults.gpu_expected("auto")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert not env_defaults.gpu_expected("auto")


@pytest.mark.parametrize(
    "name, message",
    [
        (".", "is not a folder name of its own"),
        ("..", "is not a folder name of its own"),
        ("", "is empty"),
        ("a/b", "must be a plain folder name"),
        ("../elsewhere", "must be a plain folder name"),
        ("/tmp/x", "must be a plain folder name"),
        ("x" * 201, "is 201 bytes long (at most 200)"),
    ],
)
def test_experiment_must_be_a_plain_folder_name(capsys, name, message):
    """--experiment=.. with --restart_behavior=overwrite deleted train_dir's parent's contents: refused at parse."""
    err = _parse_error(capsys, [*BASE, f"--experiment={name}", "--restart_behavior=overwrite"])
    assert "--experiment=" in err and message in err


def test_ordinary_experiment_names_are_kept():
    for name in ("run1", "my run (2)", "a.b", "...", "x" * 200, "größe"):
        assert parse_cfg([*BASE, f"--experiment={name}"]).experiment == name


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--learning_rate=nan", "--learning_rate must be a number, got nan"),
        ("--max_grad_norm=nan", "--max_grad_norm must be a number, got nan"),
        ("--heartbeat_timeout_sec=0", "--heartbeat_timeout_sec must be > 0, got 0"),
        ("--heartbeat_interval=-1", "--heartbeat_interval must be > 0, got -1"),
    ],
)
def test_values_a_worker_would_fail_on_are_refused_at_parse_time(capsys, flag, message):
    """NaN passed every range check (every comparison with it is False) and a zero heartbeat timeout was accepted:
    both failed later in a worker with a traceback."""
    err = _parse_error(capsys, [*BASE, flag])
    assert message in err and "Traceback" not in err, err


@pytest.mark.parametrize("name", ["a\nb", "tab\there", "esc\x1b[31m", "del\x7f"])
def test_experiment_names_with_control_characters_are_refused(capsys, name):
    err = _parse_error(capsys, [*BASE, f"--experiment={name}"])
    assert "must not contain control characters" in err, err
