"""What a new user meets on the command line (issue 33): --help with defaults and the env preset's values,
--version, enjoy.py's help limited to what it reads, enjoy-only flags refused by train.py, and CleanRL's spelling
(dashed flags, its option names, --total_timesteps in agent steps)."""

from __future__ import annotations

import pytest

from sample_factory.config import OPTIONS, all_options, parse_cfg, str2bool
from sample_factory.config.options import ENJOY_ONLY_GROUP
from sample_factory.config.parse import package_version
from sample_factory.envs.env_utils import set_step_units
from sample_factory.evaluation.enjoy import load_experiment_cfg
from sample_factory.experiment.folder import merge_for_resume


def _help(capsys, argv, parse=parse_cfg) -> str:
    """The --help text with its line wrapping undone."""
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    assert exc.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_help_shows_every_default_grouped(capsys):
    out = _help(capsys, ["--help"])
    assert out.count("(default") == len(all_options())  # a few say it in their own words
    assert "--num_envs_per_worker INT (default: 2) Envs stepped by one actor worker." in out
    assert "--learning_rate FLOAT, --lr FLOAT (default: 0.0001) Adam learning rate." in out
    assert "--encoder_mlp_layers INT_LIST (default: 512,512) Hidden layer sizes of the MLP encoder, e.g. 64,64." in out
    assert "give --env=NAME with --help to see the preset's values" in out
    positions = [out.index(f" {group}: ") for group in OPTIONS]  # the groups, in the table's order
    assert positions == sorted(positions)


def test_help_with_env_shows_the_presets_values(capsys):
    out = _help(capsys, ["--env=CartPole-v1", "--help"])
    assert "(default: 2; classic_control preset for --env=CartPole-v1: 64)" in out
    assert "(default: 0.0001; classic_control preset for --env=CartPole-v1: 0.003)" in out
    assert "(default: True; classic_control preset for --env=CartPole-v1: False)" in out  # use_rnn
    assert "--gae_lambda FLOAT (default: 0.95) GAE lambda (used when --with_vtrace=False)." in out  # not in it
    assert "has no preset: the defaults apply" in _help(capsys, ["--env=MyEnv-v0", "--help"])


def test_help_keeps_the_default_and_the_presets_value_on_the_options_line(capsys, monkeypatch):
    """`train.py --env=atari_pong --help | grep rollout` showed the preset's value wrapped onto the next line
    (issue 53)."""
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        parse_cfg(["--env=atari_pong", "--help"])
    lines = capsys.readouterr().out.splitlines()
    rollout = next(line for line in lines if line.startswith("  --rollout"))
    assert rollout == "  --rollout INT, --num_steps INT  (default: 32; atari preset for --env=atari_pong: 32)"
    for flag, default, preset in (("--batch_size", 1024, 256), ("--learning_rate", "0.0001", "0.00025")):
        line = next(line for line in lines if line.startswith(f"  {flag}"))
        assert line.endswith(f"(default: {default}; atari preset for --env=atari_pong: {preset})"), line


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_cfg(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"sample_factory {package_version()}"
    assert package_version()[0].isdigit()


def test_enjoy_help_lists_only_what_enjoy_reads(capsys):
    out = _help(capsys, ["--help"], parse=load_experiment_cfg)
    assert out.startswith("usage: enjoy.py")
    for flag in ("--save_video", "--max_num_episodes", "--eval_deterministic", "--env_frameskip", "--num_workers"):
        assert f"{flag} " in out, flag
    for flag in ("--learning_rate", "--ppo_clip_ratio", "--rnn_size", "--with_pbt", "--save_every_sec"):
        assert f"{flag} " not in out, flag
    assert out.count("(default: ") < len(all_options()) // 3


@pytest.mark.parametrize("opt", OPTIONS[ENJOY_ONLY_GROUP], ids=lambda o: o.name)
def test_train_refuses_enjoy_only_flags(capsys, opt):
    value = "True" if opt.type is str2bool else "x" if opt.default is None else str(opt.default)
    with pytest.raises(SystemExit) as exc:
        parse_cfg(["--env=CartPole-v1", f"--{opt.name}={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--{opt.name} belongs to enjoy.py" in err and "train.py does not read it" in err, err


def test_save_video_on_train_points_to_capture_video(capsys):
    with pytest.raises(SystemExit):
        parse_cfg(["--env=CartPole-v1", "--save_video=True"])
    assert "--capture_video=True records the periodic evaluations" in capsys.readouterr().err


def test_dashed_flags_and_cleanrl_names():
    cfg = parse_cfg(
        [
            "--env-id",
            "CartPole-v1",
            "--exp-name=cleanrl-style",  # values keep their dashes
            "--learning-rate=3e-4",
            "--num-steps=16",
            "--update-epochs=3",
            "--num-minibatches=2",
            "--clip-coef=0.2",
            "--norm-adv=False",
            "--track=False",
            "--wandb-project-name=proj",
            "--total-timesteps=5000",
            "--eval-every-env-steps=1000",
            "--capture-video",
        ]
    )
    assert (cfg.env, cfg.experiment, cfg.learning_rate) == ("CartPole-v1", "cleanrl-style", 3e-4)
    assert (cfg.rollout, cfg.num_epochs, cfg.num_batches_per_epoch, cfg.ppo_clip_ratio) == (16, 3, 2, 0.2)
    assert (cfg.normalize_advantage, cfg.with_wandb, cfg.wandb_project) == (False, False, "proj")
    assert cfg.total_timesteps == 5000 and cfg.capture_video is True


def test_lr_is_learning_rate():
    """--lr was unknown, with the suggestion --help, --algo (issue 53)."""
    assert parse_cfg(["--env=CartPole-v1", "--lr=1e-3"]).learning_rate == 1e-3
    assert parse_cfg(["--env=CartPole-v1", "--lr", "2e-3"]).learning_rate == 2e-3


def test_track_is_with_wandb():
    assert parse_cfg(["--env=CartPole-v1", "--track", "--num_workers=1"]).with_wandb is True


@pytest.mark.parametrize(("env", "frames"), [("CartPole-v1", 1), ("atari_pong", 4)])
def test_total_timesteps_counts_agent_steps(env, frames):
    cfg = parse_cfg([f"--env={env}", "--total_timesteps=10000", "--num_workers=1"])
    set_step_units(cfg)  # what the runner does once the env is known
    assert cfg.train_for_env_steps == 10000 * frames


def test_total_timesteps_or_train_for_env_steps_one_budget_wins_on_resume(capsys):
    with pytest.raises(SystemExit):
        parse_cfg(["--env=CartPole-v1", "--total_timesteps=10", "--train_for_env_steps=10"])
    assert "same budget: give one" in capsys.readouterr().err
    # Resumed with the other unit than the saved run: the budget typed now is the one that counts.
    cfg = parse_cfg(["--env=CartPole-v1", "--total_timesteps=7000", "--num_workers=1"])
    merge_for_resume(cfg, {"train_for_env_steps": 999.0, "total_timesteps": None})
    set_step_units(cfg)
    assert cfg.train_for_env_steps == 7000
    cfg = parse_cfg(["--env=CartPole-v1", "--train_for_env_steps=8000", "--num_workers=1"])
    merge_for_resume(cfg, {"train_for_env_steps": 7000, "total_timesteps": 7000})
    set_step_units(cfg)
    assert cfg.train_for_env_steps == 8000


def test_num_envs_is_cleanrls_total_spread_over_the_workers(monkeypatch, capsys):
    """--num-envs was refused, with a suggestion that never named --num_envs_per_worker (issue 53)."""
    cfg = parse_cfg(["--env=CartPole-v1", "--num-envs=8", "--num_workers=2"])
    assert (cfg.num_workers, cfg.num_envs_per_worker, cfg.num_envs) == (2, 4, 8)
    # an odd share: one split (the preset's 2 would not divide it)
    cfg = parse_cfg(["--env=LunarLander-v3", "--num_envs=6", "--num_workers=2"])
    assert (cfg.num_envs_per_worker, cfg.worker_num_splits) == (3, 1)
    monkeypatch.setattr("sample_factory.config.checks.usable_cores", lambda: 4)
    cfg = parse_cfg(["--env=CartPole-v1", "--num_envs=6"])  # workers not typed: the most of 4 that divide 6
    assert (cfg.num_workers, cfg.num_envs_per_worker) == (3, 2)
    assert parse_cfg(["--env=CartPole-v1", "--num_envs=1"]).num_workers == 1
    for argv, why in (
        (["--num_envs=5", "--num_workers=2"], "--num_envs=5 is not a multiple of --num_workers=2"),
        (["--num_envs=8", "--num_envs_per_worker=4"], "count the same envs: give one"),
        (["--num_envs=0"], "--num_envs must be >= 1"),
    ):
        with pytest.raises(SystemExit):
            parse_cfg(["--env=CartPole-v1", *argv])
        assert why in capsys.readouterr().err


def test_a_presets_num_envs_yields_to_a_typed_num_envs_per_worker(monkeypatch, capsys):
    """The atari preset's GPU setup counts all the envs (--num_envs, so that its synchronous iteration holds whole
    rounds of rollouts on any core count); a typed --num_envs_per_worker wins over it, and a --num_workers it cannot be
    spread over names it."""
    monkeypatch.setattr("sample_factory.config.checks.usable_cores", lambda: 16)
    cfg = parse_cfg(["--env=atari_pong", "--device=gpu"])
    assert (cfg.num_workers, cfg.num_envs_per_worker, cfg.num_envs) == (16, 4, 64)
    cfg = parse_cfg(["--env=atari_pong", "--device=gpu", "--num_workers=2", "--num_envs_per_worker=4"])
    assert (cfg.num_workers, cfg.num_envs_per_worker) == (2, 4)
    with pytest.raises(SystemExit):
        parse_cfg(["--env=atari_pong", "--device=gpu", "--num_workers=3"])
    assert "the preset's --num_envs=64 is not a multiple of --num_workers=3" in capsys.readouterr().err


@pytest.mark.parametrize(("sf2", "ours"), [("convnet_impala", "resnet_impala"), ("convnet_atari", "convnet_nature")])
def test_sample_factory_2_encoder_names_are_aliases(sf2, ours):
    """They were refused (issue 53)."""
    assert parse_cfg(["--env=atari_pong", f"--encoder_conv_architecture={sf2}"]).encoder_conv_architecture == ours
    assert parse_cfg(["--env=atari_pong", f"--encoder-conv-architecture={ours}"]).encoder_conv_architecture == ours
